// A Llama-family decoder layer as one primitive:
//   a = attention(rope(split(qkv(rms_norm(x)))), cache + new keys), causal or masked
//   h = x + o(a);  out = h + down(silu(gate) * up, of gate_up(rms_norm(h)))
// with k and v written into a float KV cache's buffers at row `at` (in place when nothing
// else holds them), as fused_block's four products, qkv_rope_append and attention compute
// it, kernel for kernel, in one dispatch.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "primitives.h"

namespace mlxk {

// How one product's arrays come among the weights: a float32 weight [N, K] (bits 0), or
// codes, scales and biases (MLX's affine quantization); then its bias [N] when has_bias.
struct ProductSpec {
  int bits = 0, group = 0;
  bool has_bias = false;
};

// What stays the same from call to call of one layer. The weights, in order: the first
// norm [D]; the qkv products (one, or q, k and v: outputs concatenated); q_norm and k_norm
// [head_dim] when heads.has_norm; RoPE's inverse frequencies; o; the second norm [D]; the
// gate_up products (one, or gate and up); down.
struct LayerSpec {
  std::vector<ProductSpec> qkv, gate_up;
  ProductSpec o, down;
  float eps1 = 0.0f, eps2 = 0.0f;
  RopeParams rope{};
  QkvHeads heads{};
  float scale = 1.0f;  // attention's
};

// A layer's spec and weights, checked against each other once (throws where they disagree)
// and evaluated. The primitive holds them itself rather than as graph inputs: a step's graph
// then carries per layer only x, the offsets, the mask and the cache buffers.
struct LayerViews;  // the weights as the kernels read them (layer.cpp)
struct LayerWeights {
  LayerSpec spec;
  std::vector<mx::array> weights;
  int dim = 0;  // D, the width of x
  std::unique_ptr<const LayerViews> views;  // pointers into `weights`, made once they are evaluated
  LayerWeights(LayerSpec spec, std::vector<mx::array> weights);
  ~LayerWeights();
};

// Per call: k and v go to rows [at, at + L) of keys and values [B, Hk, capacity, head_dim];
// the queries see keys [0, at + L), causally, or as `mask` (bool keep or additive,
// broadcasting to [B, Hq, L, at + L]) says. Returns [out, keys, values, offsets + L].
std::vector<mx::array> decoder_layer(const mx::array& x, std::shared_ptr<const LayerWeights> layer,
                                     const mx::array& offsets,
                                     const mx::array& keys,
                                     const mx::array& values, int at, bool causal,
                                     const std::optional<mx::array>& mask, mx::StreamOrDevice s = {});

class DecoderLayer : public CpuPrimitive {
 public:
  DecoderLayer(mx::Stream stream, std::shared_ptr<const LayerWeights> layer, int at, bool causal, bool has_mask)
      : CpuPrimitive(stream), layer_(std::move(layer)), at_(at), causal_(causal), has_mask_(has_mask) {}
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override { return "KernelDecoderLayer"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  std::shared_ptr<const LayerWeights> layer_;
  int at_;
  bool causal_, has_mask_;
};

} // namespace mlxk
