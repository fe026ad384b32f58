// MLX's affine-quantized weights as the kernels see them (quantized.cpp, dequantize.cpp).
#pragma once

#include <vector>

#include "arrays.h"
#include "simd.h"

namespace mlxk {

struct QMat {
  const uint8_t* w;  // N rows of K * bits / 8 bytes
  const float* scales;
  const float* biases;
  int N, K, group, bits;
  int groups() const { return K / group; }
  int64_t row_bytes() const { return int64_t(K) * bits / 8; }
};

QMat qmat(const std::vector<mx::array>& in, int group, int bits);
void check_quantized(const mx::array& w, const mx::array& scales, const mx::array& biases,
                     int group, int bits);

} // namespace mlxk
