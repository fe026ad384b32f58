// Python bindings: the ops take and return mlx.core.array (nanobind, MLX's domain).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include "mlx/version.h"
#include "parallel.h"
#include "int_matvec.h"
#include "layer.h"
#include "primitives.h"
#include "simd.h"

namespace nb = nanobind;
namespace mx = mlx::core;
using namespace nb::literals;

#define MLXK_STR2(x) #x
#define MLXK_STR(x) MLXK_STR2(x)

namespace {

mlxk::RowOps row_ops(const std::optional<mx::array>& bias, const std::optional<mx::array>& residual,
                     const std::optional<mx::array>& norm, float eps, bool silu_gate) {
  auto prologue = norm ? mlxk::Prologue::rms_norm
                       : (silu_gate ? mlxk::Prologue::silu_gate_halves : mlxk::Prologue::none);
  return {prologue, eps, bias.has_value(), residual.has_value()};
}

using Products = std::vector<std::tuple<int, int, bool>>;

// What Python holds of a layer: a C++ reference count only, so the primitive that shares
// it may drop the last one on MLX's stream thread without the GIL (a nanobind-made
// shared_ptr would take the GIL there, while the main thread waits in eval holding it).
struct GgmlHandle {
  std::shared_ptr<const mlxk::GgmlWeight> weight;
};

struct LayerHandle {
  std::shared_ptr<const mlxk::LayerWeights> layer;
};

std::vector<mlxk::ProductSpec> product_specs(const Products& products) {
  std::vector<mlxk::ProductSpec> out;
  for (const auto& [bits, group, has_bias] : products) {
    out.push_back({bits, group, has_bias});
  }
  return out;
}

} // namespace

NB_MODULE(_ext, m) {
  m.doc() = "SIMD CPU kernels for MLX (float32)";
  m.attr("mlx_version") = MLXK_STR(MLX_VERSION_MAJOR) "." MLXK_STR(MLX_VERSION_MINOR) "." MLXK_STR(
      MLX_VERSION_PATCH);
  m.attr("simd_width") = mlxk::kW;
  m.def("max_threads", &mlxk::max_threads, "Threads the kernels may use.");
  m.def("silu_gate", &mlxk::silu_gate, "gate"_a, "up"_a, nb::kw_only(), "stream"_a = nb::none(),
        "silu(gate) * up.");
  m.def("gelu", &mlxk::gelu, "x"_a, "approximate"_a = false, nb::kw_only(), "stream"_a = nb::none(),
        "GELU: the erf form, or the tanh approximation.");
  m.def("softmax", &mlxk::softmax, "x"_a, nb::kw_only(), "stream"_a = nb::none(),
        "Softmax over the last axis.");
  m.def("attention", &mlxk::attention, "q"_a, "k"_a, "v"_a, "scale"_a, "causal"_a = false,
        "window"_a = 0, "mask"_a = nb::none(), "flat"_a = false, "segments"_a = nb::none(), "length"_a = -1,
        nb::kw_only(), "stream"_a = nb::none(),
        "softmax(scale * q k^T + mask) v with grouped-query heads, causal and window masks, over the first "
        "`length` keys (-1: all); [B, Hq, L, Dv], or [B, L, Hq * Dv] when flat.");
  m.def("attention_quantized", &mlxk::attention_quantized, "q"_a, "k"_a, "v"_a, "group_size"_a, "bits"_a,
        "scale"_a, "causal"_a = false, "mask"_a = nb::none(), "flat"_a = false, "length"_a = -1, nb::kw_only(),
        "stream"_a = nb::none(),
        "attention with keys and values as MLX affine-quantized (codes, scales, biases), over the first "
        "`length` keys (-1: all); [B, Hq, L, Dv], or [B, L, Hq * Dv] when flat.");
  m.def("kv_pack_write", &mlxk::kv_pack_write, "buffer"_a, "x"_a, "at"_a, "group_size"_a, "bits"_a, nb::kw_only(),
        "stream"_a = nb::none(),
        "A quantized KV cache's packed buffer with rows [at, at + n) replaced by x quantized (in place when "
        "unshared).");
  m.def("silu_gate_halves", &mlxk::silu_gate_halves, "x"_a, nb::kw_only(), "stream"_a = nb::none(),
        "silu(gate) * up with gate and up the halves of x's last axis.");
  m.def(
      "quantized_matmul",
      [](const mx::array& x, const mx::array& w, const mx::array& scales, const mx::array& biases,
         int group_size, int bits, const std::optional<mx::array>& bias,
         const std::optional<mx::array>& residual, const std::optional<mx::array>& norm, float eps,
         bool silu_gate, mx::StreamOrDevice s) {
        return mlxk::quantized_matmul(x, w, scales, biases, group_size, bits,
                                      row_ops(bias, residual, norm, eps, silu_gate), bias, residual, norm, s);
      },
      "x"_a, "w"_a, "scales"_a, "biases"_a, "group_size"_a, "bits"_a, "bias"_a = nb::none(),
      "residual"_a = nb::none(), "norm"_a = nb::none(), "eps"_a = 0.0f, "silu_gate"_a = false,
      nb::kw_only(), "stream"_a = nb::none(),
      "prologue(x) @ dequantize(w).T (+ bias) (+ residual) for MLX's affine 8- and 4-bit layouts; "
      "the prologue as linear's.");
  m.def("dequantize", &mlxk::dequantize, "w"_a, "scales"_a, "biases"_a, "group_size"_a, "bits"_a,
        nb::kw_only(), "stream"_a = nb::none(), "MLX's affine 8- and 4-bit weights as float32.");
  m.def(
      "linear",
      [](const mx::array& x, const mx::array& w, const std::optional<mx::array>& bias,
         const std::optional<mx::array>& residual, const std::optional<mx::array>& norm, float eps,
         bool silu_gate, mx::StreamOrDevice s) {
        return mlxk::linear(x, w, row_ops(bias, residual, norm, eps, silu_gate), bias, residual, norm, s);
      },
      "x"_a, "weight"_a, "bias"_a = nb::none(), "residual"_a = nb::none(), "norm"_a = nb::none(),
      "eps"_a = 0.0f, "silu_gate"_a = false, nb::kw_only(), "stream"_a = nb::none(),
      "prologue(x) @ weight.T (+ bias) (+ residual) in one primitive; the prologue is RMSNorm "
      "with `norm` and `eps`, SiLU-gate of x's halves with `silu_gate`, or nothing.");
  m.def("packed_available", &mlxk::packed_available, "kind"_a,
        "Whether this build has the packed product of `kind` (\"f32\": AVX-512 FMAs, \"bf16\": AVX-512 BF16, "
        "\"int8\": AVX-512 VNNI).");
  m.def("linear_pack", &mlxk::linear_pack, "w"_a, "kind"_a,
        "A float32 weight [N, K] packed once for packed_linear of `kind` (a flat uint8 array).");
  m.def("packed_linear", &mlxk::packed_linear, "x"_a, "packed"_a, "kind"_a, "N"_a, "bias"_a = nb::none(),
        "residual"_a = nb::none(), "act"_a = "none", nb::kw_only(), "stream"_a = nb::none(),
        "act(x @ W.T (+ bias) (+ residual)) with W packed by linear_pack: f32 float32 sums of float32 "
        "products, bf16 float32 sums of bfloat16 products, int8 integer sums of Q8_0 blocks (W and x); "
        "act is \"none\", \"gelu\" (erf) or \"gelu_tanh\".");
  m.def("segment_attention_available", &mlxk::segment_attention_available,
        "Whether this build has segment_attention (AVX-512).");
  m.def("segment_attention", &mlxk::segment_attention, "q"_a, "k"_a, "v"_a, "scale"_a, "segments"_a, nb::kw_only(),
        "stream"_a = nb::none(),
        "softmax(scale q k^T) v within each packed sequence: q, k, v [1, H, N, D], segments int32 starts and "
        "the end (0 to N); out [1, N, H * Dv], the value dim a multiple of 32.");
  m.def("ggml_open", &mlxk::ggml_open, "bridge_library"_a,
        "Opens ggml's CPU backend (through the bridge ggml_build.py makes) for the ggml_* ops; once per process.");
  m.def("ggml_is_open", &mlxk::ggml_is_open, "Whether ggml_open succeeded.");
  m.def("ggml_vec_dot_type", &mlxk::ggml_vec_dot_type, "type"_a,
        "The ggml type a weight type's dot product takes its activations in.");
  m.def("ggml_row_bytes", &mlxk::ggml_row_bytes, "type"_a, "K"_a, "Bytes of one row of K values of a ggml type.");
  nb::class_<GgmlHandle>(m, "GgmlWeight", "A weight ggml holds repacked for its CPU kernels.")
      .def_prop_ro("bytes", [](const GgmlHandle& h) { return h.weight->bytes; })
      .def_prop_ro("shape", [](const GgmlHandle& h) { return std::make_tuple(h.weight->n, h.weight->k); });
  m.def(
      "ggml_hold",
      [](const mx::array& w, int type) -> std::optional<GgmlHandle> {
        auto held = mlxk::ggml_hold(w, type);
        return held ? std::optional<GgmlHandle>(GgmlHandle{held}) : std::nullopt;
      },
      "w"_a, "type"_a,
      "w's blocks repacked by ggml where its CPU backend repacks that type and shape (as llama.cpp places "
      "weights), else None.");
  m.def(
      "ggml_matmul_held",
      [](const mx::array& x, const GgmlHandle& w, mx::StreamOrDevice s) { return mlxk::ggml_matmul_held(x, w.weight, s); },
      "x"_a, "w"_a, nb::kw_only(), "stream"_a = nb::none(), "x @ w.T for a weight ggml_hold gave.");
  m.def("ggml_matmul", &mlxk::ggml_matmul, "x"_a, "w"_a, "type"_a, nb::kw_only(),
        "stream"_a = nb::none(),
        "x @ w.T by ggml's CPU backend: x's rows quantized to the weight type's vec_dot_type, ggml's kernels.");
  m.def("blas_available", &mlxk::blas_available, "Whether a CBLAS sgemm is loaded globally.");
  m.def("int_matvec", &mlxk::int_matvec_bits,
        "The code widths whose one-row quantized products take the integer-dot path (built with AVX-512 "
        "VNNI, 5 and 6 bits with VBMI too; empty where not built or MLX_GRPC_INT_MATVEC=off).");
  m.def("rms_norm", &mlxk::rms_norm, "x"_a, "weight"_a.none(), "eps"_a, nb::kw_only(),
        "stream"_a = nb::none(), "RMSNorm over the last axis (mx.fast.rms_norm's rounding).");
  m.def("layer_norm", &mlxk::layer_norm, "x"_a, "weight"_a.none(), "bias"_a.none(), "eps"_a,
        nb::kw_only(), "stream"_a = nb::none(), "LayerNorm over the last axis (mx.fast.layer_norm's rounding).");
  m.def(
      "rope",
      [](const mx::array& x, int dims, bool traditional, float scale, const mx::array& inv_freqs,
         const mx::array& offsets, mx::StreamOrDevice s) {
        return mlxk::rope(x, {dims, traditional, scale}, inv_freqs, offsets, s);
      },
      "x"_a, "dims"_a, "traditional"_a, "scale"_a, "inv_freqs"_a, "offsets"_a, nb::kw_only(),
      "stream"_a = nb::none(), "mx.fast.rope with the inverse frequencies given (same results).");
  m.def(
      "qkv_rope",
      [](const mx::array& qkv, int q_heads, int kv_heads, int head_dim, int dims, bool traditional,
         float scale, const mx::array& inv_freqs, const mx::array& offsets,
         const std::optional<mx::array>& q_norm, const std::optional<mx::array>& k_norm, float eps,
         mx::StreamOrDevice s) {
        mlxk::QkvHeads h{q_heads, kv_heads, head_dim, q_norm.has_value(), eps};
        return mlxk::qkv_rope(qkv, {dims, traditional, scale}, h, inv_freqs, offsets, q_norm, k_norm, s);
      },
      "qkv"_a, "q_heads"_a, "kv_heads"_a, "head_dim"_a, "dims"_a, "traditional"_a, "scale"_a,
      "inv_freqs"_a, "offsets"_a, "q_norm"_a = nb::none(), "k_norm"_a = nb::none(), "eps"_a = 0.0f,
      nb::kw_only(), "stream"_a = nb::none(),
      "Split a fused qkv projection into q, k, v heads with per-head RMSNorm (optional) and RoPE.");
  m.def(
      "qkv_rope_append",
      [](const mx::array& qkv, int q_heads, int kv_heads, int head_dim, int dims, bool traditional,
         float scale, const mx::array& inv_freqs, const mx::array& offsets, const mx::array& keys,
         const mx::array& values, int at, const std::optional<mx::array>& q_norm,
         const std::optional<mx::array>& k_norm, float eps, mx::StreamOrDevice s) {
        mlxk::QkvHeads h{q_heads, kv_heads, head_dim, q_norm.has_value(), eps};
        return mlxk::qkv_rope_append(qkv, {dims, traditional, scale}, h, inv_freqs, offsets, q_norm, k_norm, keys,
                                     values, at, s);
      },
      "qkv"_a, "q_heads"_a, "kv_heads"_a, "head_dim"_a, "dims"_a, "traditional"_a, "scale"_a,
      "inv_freqs"_a, "offsets"_a, "keys"_a, "values"_a, "at"_a, "q_norm"_a = nb::none(), "k_norm"_a = nb::none(),
      "eps"_a = 0.0f, nb::kw_only(), "stream"_a = nb::none(),
      "qkv_rope with k and v written into a float KV cache's buffers [B, kv_heads, capacity, head_dim] at rows "
      "[at, at + L) (in place when unshared): [q, keys, values, offsets + L].");
  nb::class_<LayerHandle>(m, "LayerWeights",
                          "A decoder layer's weights and how they are laid out, checked once (see decoder_layer).")
      .def(
          "__init__",
          [](LayerHandle* self, const std::vector<mx::array>& weights, const Products& qkv,
             const std::tuple<int, int, bool>& o, const Products& gate_up, const std::tuple<int, int, bool>& down,
             float eps1, float eps2, int q_heads, int kv_heads, int head_dim, bool qk_norm, float qk_eps, int dims,
             bool traditional, float rope_scale, float scale) {
            mlxk::LayerSpec spec{product_specs(qkv), product_specs(gate_up), product_specs({o})[0],
                                 product_specs({down})[0], eps1, eps2, {dims, traditional, rope_scale},
                                 {q_heads, kv_heads, head_dim, qk_norm, qk_eps}, scale};
            new (self) LayerHandle{std::make_shared<const mlxk::LayerWeights>(std::move(spec), weights)};
          },
          "weights"_a, "qkv"_a, "o"_a, "gate_up"_a, "down"_a, "eps1"_a, "eps2"_a, "q_heads"_a, "kv_heads"_a,
          "head_dim"_a, "qk_norm"_a, "qk_eps"_a, "dims"_a, "traditional"_a, "rope_scale"_a, "scale"_a,
          "The weights: the first norm, the qkv products' arrays, q_norm and k_norm (with qk_norm), RoPE's "
          "inverse frequencies, o's, the second norm, the gate_up products', down's. Products as (bits, group, "
          "has_bias), bits 0 for a float32 weight; qkv one product or three, gate_up one or two.");
  m.def(
      "decoder_layer",
      [](const mx::array& x, const LayerHandle& layer, const mx::array& offsets, const mx::array& keys,
         const mx::array& values, int at, bool causal, const std::optional<mx::array>& mask, mx::StreamOrDevice s) {
        return mlxk::decoder_layer(x, layer.layer, offsets, keys, values, at, causal, mask, s);
      },
      "x"_a, "layer"_a, "offsets"_a, "keys"_a, "values"_a,
        "at"_a, "causal"_a, "mask"_a = nb::none(), nb::kw_only(), "stream"_a = nb::none(),
        "A Llama-family decoder layer in one primitive: x + attention and x + MLP with both RMSNorms, k and v "
        "written into the float cache buffers at row `at` (in place when unshared): [out, keys, values, "
        "offsets + L].");
}
