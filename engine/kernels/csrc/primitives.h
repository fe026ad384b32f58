// The custom MLX primitives: CPU kernels only (eval_gpu throws; the Python side
// never builds them for another device). float32 inputs and outputs.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mlx/ops.h"
#include "mlx/primitives.h"
#include "rowops.h"

namespace mlxk {

namespace mx = mlx::core;

// silu(gate) * up, elementwise (shapes equal).
mx::array silu_gate(const mx::array& gate, const mx::array& up, mx::StreamOrDevice s = {});
// The same with gate and up the two halves of x's last axis (a fused projection).
mx::array silu_gate_halves(const mx::array& x, mx::StreamOrDevice s = {});
// gelu(x): the erf form, or the tanh approximation when `approximate`.
mx::array gelu(const mx::array& x, bool approximate, mx::StreamOrDevice s = {});
// softmax over the last axis.
mx::array softmax(const mx::array& x, mx::StreamOrDevice s = {});
// Attention of q [B, Hq, L, D] over k [B, Hk, S, D], v [B, Hk, S, Dv]
// (Hq a multiple of Hk): softmax(scale * q k^T + mask) v. `causal` aligns the
// queries with the last L keys; `window` > 0 also drops keys more than
// window - 1 positions back; `mask` (bool keep, or additive) broadcasts to
// [B, Hq, L, S]. Reads k and v in place (any strides, last axis contiguous).
// With `flat` the result is [B, L, Hq * Dv] (the same memory). `segments` (int32
// [n + 1], B == 1, L == S): packed sequences [segments[i], segments[i + 1]) that
// see only themselves. `length` >= 0 reads only the first `length` keys (S = length:
// a cache's buffers as they are).
mx::array attention(const mx::array& q, const mx::array& k, const mx::array& v, float scale,
                    bool causal, int window, const std::optional<mx::array>& mask, bool flat,
                    const std::optional<mx::array>& segments, int length = -1, mx::StreamOrDevice s = {});
// attention() over keys and values in MLX's affine quantization, as mlx-lm's
// QuantizedKVCache holds them: k = (codes uint32 [B, Hk, S, D * bits / 32],
// scales and biases float32 [B, Hk, S, D / group]), the same for v; bits 8 or 4.
// Each block of keys is dequantized once for every query row that reads it.
// `length` >= 0 reads only the first `length` keys (a cache's buffers as they are).
mx::array attention_quantized(const mx::array& q, const std::vector<mx::array>& k,
                              const std::vector<mx::array>& v, int group, int bits, float scale,
                              bool causal, const std::optional<mx::array>& mask, bool flat, int length = -1,
                              mx::StreamOrDevice s = {});
// A quantized KV cache's packed buffer [B, H, capacity, W + 2G] (uint32: each row a
// token's codes, then its scales and biases as float32 bits) with rows [at, at + n)
// replaced by x [B, H, n, D] (float32) quantized as mx.quantize does; in place when
// nothing else holds the buffer.
mx::array kv_pack_write(const mx::array& buffer, const mx::array& x, int at, int group, int bits,
                        mx::StreamOrDevice s = {});
// prologue(x) [..., K] @ dequantize(w)^T (+ bias) (+ residual) for MLX's affine
// quantization (w uint32 [N, K*bits/32], scales/biases [N, K/group]), bits 8 or 4;
// the prologue and extra inputs as linear's.
mx::array quantized_matmul(const mx::array& x, const mx::array& w, const mx::array& scales,
                           const mx::array& biases, int group_size, int bits, RowOps ops,
                           const std::optional<mx::array>& bias, const std::optional<mx::array>& residual,
                           const std::optional<mx::array>& norm, mx::StreamOrDevice s = {});
// dequantize(w) as float32 [N, K].
mx::array dequantize(const mx::array& w, const mx::array& scales, const mx::array& biases,
                     int group_size, int bits, mx::StreamOrDevice s = {});
// prologue(x) [..., K] @ w[N, K]^T (+ bias [N]) (+ residual [..., N]); rms_norm takes
// `norm` [K] and ops.eps (x is [..., K]); silu_gate_halves takes x [..., 2K].
mx::array linear(const mx::array& x, const mx::array& w, RowOps ops, const std::optional<mx::array>& bias,
                 const std::optional<mx::array>& residual, const std::optional<mx::array>& norm,
                 mx::StreamOrDevice s = {});
// Row helpers shared with linear (each defined beside its own primitive).
void silu_gate_row(float* y, const float* gate, const float* up, int64_t n);
void rms_norm_row(float* out, const float* x, const float* w, int n, float eps);
// Whether a CBLAS sgemm is in the process's global scope (linear's path for many rows).
bool blas_available();
// RMSNorm / LayerNorm over the last axis, as mx.fast's CPU fallbacks compute them.
mx::array rms_norm(const mx::array& x, const std::optional<mx::array>& weight, float eps,
                   mx::StreamOrDevice s = {});
mx::array layer_norm(const mx::array& x, const std::optional<mx::array>& weight,
                     const std::optional<mx::array>& bias, float eps, mx::StreamOrDevice s = {});

struct RopeParams {
  int dims;  // leading elements of each head that rotate
  bool traditional;
  float scale;
};
struct QkvHeads {
  int q_heads, kv_heads, head_dim;
  bool has_norm;  // per-head RMSNorm of q and k before RoPE
  float eps;
};
// mx.fast.rope of x [B, T, D] or [B, N, T, D] at positions (t + offset[b]) * scale,
// with inverse frequencies inv_freqs [dims / 2]; offsets int32 [1] or [B].
mx::array rope(const mx::array& x, const RopeParams& p, const mx::array& inv_freqs,
               const mx::array& offsets, mx::StreamOrDevice s = {});
// q [B, Hq, L, D], k and v [B, Hk, L, D] from a fused projection qkv [B, L, (Hq + 2 Hk) D]:
// per-head RMSNorm of q and k (when given), then RoPE.
std::vector<mx::array> qkv_rope(const mx::array& qkv, const RopeParams& p, const QkvHeads& h,
                                const mx::array& inv_freqs, const mx::array& offsets,
                                const std::optional<mx::array>& q_norm,
                                const std::optional<mx::array>& k_norm, mx::StreamOrDevice s = {});
// qkv_rope writing k and v into a float KV cache's buffers keys and values [B, Hk, capacity, D]
// at rows [at, at + L): returns q, the buffers (in place when nothing else holds them, else
// copies) and offsets + L (int32, offsets' shape). One primitive.
std::vector<mx::array> qkv_rope_append(const mx::array& qkv, const RopeParams& p, const QkvHeads& h,
                                       const mx::array& inv_freqs, const mx::array& offsets,
                                       const std::optional<mx::array>& q_norm,
                                       const std::optional<mx::array>& k_norm, const mx::array& keys,
                                       const mx::array& values, int at, mx::StreamOrDevice s = {});

// Shared by the primitives below: CPU only, no transforms.
class CpuPrimitive : public mx::Primitive {
 public:
  explicit CpuPrimitive(mx::Stream stream) : mx::Primitive(stream) {}
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override;
};

class SiluGate : public CpuPrimitive {
 public:
  SiluGate(mx::Stream stream, bool halves) : CpuPrimitive(stream), halves_(halves) {}
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override { return "KernelSiluGate"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  bool halves_;
};

class Gelu : public CpuPrimitive {
 public:
  Gelu(mx::Stream stream, bool approximate) : CpuPrimitive(stream), approximate_(approximate) {}
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override { return "KernelGelu"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  bool approximate_;
};

class Softmax : public CpuPrimitive {
 public:
  using CpuPrimitive::CpuPrimitive;
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override { return "KernelSoftmax"; }
  bool is_equivalent(const mx::Primitive&) const override { return true; }
};

struct AttentionParams {
  float scale;
  bool causal;
  int window;
  bool has_mask;
  bool flat;
  bool has_segments;
  int bits = 0;  // > 0: quantized keys and values (codes, scales, biases each)
  int group = 0;
  int length = -1;  // >= 0: only the first `length` keys of the buffers
};

class Attention : public CpuPrimitive {
 public:
  Attention(mx::Stream stream, AttentionParams p) : CpuPrimitive(stream), p_(p) {}
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override { return "KernelAttention"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  AttentionParams p_;
};

class Linear : public CpuPrimitive {
 public:
  Linear(mx::Stream stream, RowOps ops) : CpuPrimitive(stream), ops_(ops) {}
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override { return "KernelLinear"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  RowOps ops_;
};

class RmsNorm : public CpuPrimitive {
 public:
  RmsNorm(mx::Stream stream, float eps, bool has_weight)
      : CpuPrimitive(stream), eps_(eps), has_weight_(has_weight) {}
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override { return "KernelRmsNorm"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  float eps_;
  bool has_weight_;
};

class LayerNorm : public CpuPrimitive {
 public:
  LayerNorm(mx::Stream stream, float eps, bool has_weight, bool has_bias)
      : CpuPrimitive(stream), eps_(eps), has_weight_(has_weight), has_bias_(has_bias) {}
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override { return "KernelLayerNorm"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  float eps_;
  bool has_weight_, has_bias_;
};

class Rope : public CpuPrimitive {
 public:
  Rope(mx::Stream stream, RopeParams p) : CpuPrimitive(stream), p_(p) {}
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override { return "KernelRope"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  RopeParams p_;
};

class QkvRope : public CpuPrimitive {
 public:
  QkvRope(mx::Stream stream, RopeParams p, QkvHeads h, int at = -1) : CpuPrimitive(stream), p_(p), h_(h), at_(at) {}
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override { return "KernelQkvRope"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  RopeParams p_;
  QkvHeads h_;
  int at_;  // >= 0: k and v go into cache buffers at this row (qkv_rope_append)
};

class QuantizedMatmul : public CpuPrimitive {
 public:
  QuantizedMatmul(mx::Stream stream, int group_size, int bits, RowOps ops)
      : CpuPrimitive(stream), group_size_(group_size), bits_(bits), ops_(ops) {}
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override { return "KernelQuantizedMatmul"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  int group_size_;
  int bits_;
  RowOps ops_;
};

class KVPackWrite : public CpuPrimitive {
 public:
  KVPackWrite(mx::Stream stream, int at, int group, int bits)
      : CpuPrimitive(stream), at_(at), group_(group), bits_(bits) {}
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override { return "KernelKVPackWrite"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  int at_, group_, bits_;
};

// llama.cpp's numerics through ggml's CPU backend (ggml_products.cpp): ggml_open first.
void ggml_open(const std::string& bridge_library);
bool ggml_is_open();
int ggml_vec_dot_type(int type);
int64_t ggml_row_bytes(int type, int64_t K);
// x [..., K] float32 @ w^T, w the weight's GGUF blocks [N, ggml_row_bytes(type, K)] of ggml type `type`.
mx::array ggml_matmul(const mx::array& x, const mx::array& w, int type, mx::StreamOrDevice s = {});

// A weight ggml holds repacked for its CPU backend's kernels (released with the last owner).
struct GgmlWeight {
  void* handle;
  int type;
  int64_t n, k, bytes;
  GgmlWeight(void* h, int t, int64_t n_, int64_t k_, int64_t b) : handle(h), type(t), n(n_), k(k_), bytes(b) {}
  ~GgmlWeight();
};
// w's blocks repacked by ggml where its CPU backend repacks that type and shape; null elsewhere.
std::shared_ptr<const GgmlWeight> ggml_hold(const mx::array& w, int type);
mx::array ggml_matmul_held(const mx::array& x, const std::shared_ptr<const GgmlWeight>& w, mx::StreamOrDevice s = {});

class GgmlMatmul : public CpuPrimitive {
 public:
  GgmlMatmul(mx::Stream stream, int type, int K, std::shared_ptr<const GgmlWeight> held)
      : CpuPrimitive(stream), type_(type), K_(K), held_(std::move(held)) {}
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override { return "KernelGgmlMatmul"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  int type_, K_;
  std::shared_ptr<const GgmlWeight> held_;  // null: the weight is inputs[1]
};

class Dequantize : public CpuPrimitive {
 public:
  Dequantize(mx::Stream stream, int group_size, int bits)
      : CpuPrimitive(stream), group_size_(group_size), bits_(bits) {}
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override { return "KernelDequantize"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  int group_size_;
  int bits_;
};

// act(x [..., K] @ W^T (+ bias [N]) (+ residual)) on W packed once by linear_pack for one of
// packed_linear.h's kinds ("f32", "bf16", "int8"); act is "none", "gelu" (erf) or "gelu_tanh".
bool packed_available(const std::string& kind);
mx::array linear_pack(const mx::array& w, const std::string& kind);
mx::array packed_linear(const mx::array& x, const mx::array& packed, const std::string& kind, int N,
                        const std::optional<mx::array>& bias, const std::optional<mx::array>& residual,
                        const std::string& act, mx::StreamOrDevice s = {});

// Packed sequences' attention for the encoder (segment_attention.cpp): q, k, v [1, H, N, D];
// segments the int32 starts and the end, from 0 to N; out [1, N, H * Dv].
bool segment_attention_available();
mx::array segment_attention(const mx::array& q, const mx::array& k, const mx::array& v, float scale,
                            const mx::array& segments, mx::StreamOrDevice s = {});

class SegmentAttention : public CpuPrimitive {
 public:
  SegmentAttention(mx::Stream stream, float scale) : CpuPrimitive(stream), scale_(scale) {}
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override { return "KernelSegmentAttention"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  float scale_;
};

class PackedLinear : public CpuPrimitive {
 public:
  PackedLinear(mx::Stream stream, int kind, int n, int k, bool has_bias, bool has_residual, int act)
      : CpuPrimitive(stream), kind_(kind), n_(n), k_(k), has_bias_(has_bias), has_residual_(has_residual),
        act_(act) {}
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override { return "KernelPackedLinear"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  int kind_, n_, k_;
  bool has_bias_, has_residual_;
  int act_;
};

} // namespace mlxk
