// Dequantization to float32, rounded as MLX's CPU backend rounds it (scale * q, then
// + bias: this file is compiled with -ffp-contract=off).
#include "parallel.h"
#include "primitives.h"
#include "quant_codes.h"
#include "quantized.h"
#include "simd.h"

#include <cstring>

namespace mlxk {

void dequantize_rows(const QMat& w, float* out, int64_t n0, int64_t n1) {
  const int G = w.group, ng = w.groups();
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* wr = w.w + n * w.row_bytes();
    float* o = out + (n - n0) * w.K;
    for (int gi = 0; gi < ng; ++gi) {
      vf s = splat(w.scale(n * ng + gi)), b = splat(w.bias(n * ng + gi));
      for (int t = 0; t < G; t += kW) {
        int k = gi * G + t;
        store(o + k, s * quant::codes(wr, k, w.bits) + b);
      }
    }
  }
}

QMat qmat(const std::vector<mx::array>& in, int group, int bits) {
  const bool half = in[2].dtype() == mx::float16;
  return QMat{in[1].data<uint8_t>(), static_cast<const float*>(in[2].data<void>()),
              static_cast<const float*>(in[3].data<void>()), int(in[1].shape(0)),
              int(in[1].shape(1) * 32 / bits), group, bits, half};
}

void check_quantized(const mx::array& w, const mx::array& scales, const mx::array& biases,
                     int group, int bits) {
  if (bits != 8 && bits != 6 && bits != 5 && bits != 4) {
    throw std::invalid_argument("quantized kernels: bits must be 8, 6, 5 or 4");
  }
  if (group % (2 * kW) != 0 || w.dtype() != mx::uint32 || w.ndim() != 2 ||
      (int64_t(w.shape(1)) * 32) % (int64_t(bits) * group) != 0) {
    throw std::invalid_argument("quantized kernels: unsupported group size or weight layout");
  }
  if ((scales.dtype() != mx::float32 && scales.dtype() != mx::float16) || biases.dtype() != scales.dtype() ||
      !scales.flags().row_contiguous || !biases.flags().row_contiguous) {
    throw std::invalid_argument("quantized kernels: scales and biases must be row-contiguous float32 or float16, alike");
  }
  int K = w.shape(1) * 32 / bits;
  if (scales.shape() != mx::Shape{w.shape(0), K / group} || biases.shape() != scales.shape()) {
    throw std::invalid_argument("quantized kernels: scales/biases do not match the weight");
  }
}

void Dequantize::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& out = outputs[0];
  auto& enc = encoder(stream(), inputs, outputs);
  std::vector<mx::array> all = {out, inputs[0], inputs[1], inputs[2]};
  enc.dispatch([w = qmat(all, group_size_, bits_), o = out.data<float>()]() {
    parallel_for(w.N, 64, [&](int64_t n0, int64_t n1) { dequantize_rows(w, o + n0 * w.K, n0, n1); });
  });
}

bool Dequantize::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const Dequantize&>(other);
  return group_size_ == o.group_size_ && bits_ == o.bits_;
}

mx::array dequantize(const mx::array& w, const mx::array& scales, const mx::array& biases,
                     int group_size, int bits, mx::StreamOrDevice s) {
  check_quantized(w, scales, biases, group_size, bits);
  mx::Shape shape = {w.shape(0), w.shape(1) * 32 / bits};
  return mx::array(shape, mx::float32,
                   std::make_shared<Dequantize>(mx::to_stream(s), group_size, bits),
                   {w, scales, biases});
}

} // namespace mlxk
