// Writing a decode step's keys (or values) into a quantized KV cache's packed buffer in
// one primitive: each row of the buffer [B, H, capacity, W + 2G] (uint32) holds a
// token's codes (W words), then its G scales and G biases (float32 bits). Rows
// [at, at + n) take x [B, H, n, D] quantized exactly as mx.quantize's CPU path does. A
// buffer nothing else holds is written in place; otherwise it is copied first.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "arrays.h"
#include "primitives.h"

namespace mlxk {

namespace {

// One group of `group` floats (stride ws) in MLX's affine quantization, bit-identical
// to mx.quantize on the CPU.
void quantize_group(const float* w, int64_t ws, int group, int bits, uint8_t* codes, float* scale_out,
                    float* bias_out) {
  const float n_bins = float((1 << bits) - 1), eps = 1e-7f;
  float w_min = std::numeric_limits<float>::infinity(), w_max = -w_min;
  for (int j = 0; j < group; ++j) {
    w_max = std::max(w_max, w[j * ws]);
    w_min = std::min(w_min, w[j * ws]);
  }
  bool mask = std::abs(w_min) > std::abs(w_max);
  float scale = std::max((w_max - w_min) / n_bins, eps);
  scale = mask ? scale : -scale;
  float edge = mask ? w_min : w_max;
  float q0 = std::rint(edge / scale);
  float bias = 0;
  if (q0 != 0) {
    scale = edge / q0;
    bias = edge;
  }
  const int per_byte = 8 / bits;
  for (int j = 0; j < group; j += per_byte) {
    uint32_t byte = 0;
    for (int k = 0; k < per_byte; ++k) {
      float e = std::rint((w[(j + k) * ws] - bias) / scale);
      e = std::min(std::max(e, 0.0f), n_bins);
      byte |= uint32_t(e) << (k * bits);
    }
    codes[j / per_byte] = uint8_t(byte);
  }
  *scale_out = scale;
  *bias_out = bias;
}

} // namespace

void KVPackWrite::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  const auto& in = inputs[0];
  auto& out = outputs[0];
  auto& enc = mx::cpu::get_command_encoder(stream());
  enc.set_input_array(in);
  enc.set_input_array(inputs[1]);
  bool copy = !(in.is_donatable() && in.flags().row_contiguous && in.size() == in.data_size());
  if (copy) {
    allocate(out);
  } else {
    out.copy_shared_buffer(in);
  }
  enc.set_output_array(out);
  enc.dispatch([in = mx::array::unsafe_weak_copy(in), x = mx::array::unsafe_weak_copy(inputs[1]),
                out = mx::array::unsafe_weak_copy(out), copy, at = at_, group = group_, bits = bits_]() mutable {
    const int64_t B = x.shape(0), H = x.shape(1), n = x.shape(2), D = x.shape(3), G = D / group;
    const int64_t width = out.shape(3), words = D * bits / 32;
    uint32_t* dst = out.data<uint32_t>();  // row-contiguous: allocated, or a donated row-contiguous input
    if (copy) {
      const uint32_t* src = in.data<uint32_t>();
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t t = 0; t < in.shape(2); ++t) {
            const uint32_t* s = src + b * in.strides(0) + h * in.strides(1) + t * in.strides(2);
            uint32_t* d = dst + ((b * H + h) * out.shape(2) + t) * width;
            for (int64_t w = 0; w < width; ++w) {
              d[w] = s[w * in.strides(3)];
            }
          }
    }
    const float* xs = x.data<float>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < n; ++t) {
          const float* row = xs + b * x.strides(0) + h * x.strides(1) + t * x.strides(2);
          uint32_t* d = dst + ((b * H + h) * out.shape(2) + at + t) * width;
          auto* scales = reinterpret_cast<float*>(d + words);
          auto* biases = scales + G;
          for (int64_t g = 0; g < G; ++g) {
            quantize_group(row + g * group * x.strides(3), x.strides(3), group, bits,
                           reinterpret_cast<uint8_t*>(d) + g * group * bits / 8, scales + g, biases + g);
          }
        }
  });
}

bool KVPackWrite::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const KVPackWrite&>(other);
  return at_ == o.at_ && group_ == o.group_ && bits_ == o.bits_;
}

mx::array kv_pack_write(const mx::array& buffer, const mx::array& x, int at, int group, int bits,
                        mx::StreamOrDevice s) {
  require_float32(x, "kv_pack_write");
  if ((bits != 8 && bits != 4) || group <= 0 || x.ndim() != 4 || x.shape(3) % group != 0) {
    throw std::invalid_argument("kv_pack_write: bits 8 or 4, and a head size the group divides");
  }
  const int width = x.shape(3) * bits / 32 + 2 * (x.shape(3) / group);
  if (buffer.dtype() != mx::uint32 || buffer.ndim() != 4 || buffer.shape(0) != x.shape(0) ||
      buffer.shape(1) != x.shape(1) || buffer.shape(3) != width || at < 0 || at + x.shape(2) > buffer.shape(2)) {
    throw std::invalid_argument("kv_pack_write: the rows do not fit the buffer");
  }
  return mx::array(buffer.shape(), mx::uint32, std::make_shared<KVPackWrite>(mx::to_stream(s), at, group, bits),
                   {buffer, x});
}

} // namespace mlxk
