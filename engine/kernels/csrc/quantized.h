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
// Rows [n0, n1) of w as float32, row n at out + (n - n0) * K (dequantize.cpp).
void dequantize_rows(const QMat& w, float* out, int64_t n0, int64_t n1);
// y[M, N] (ld ldy) = x[M, K] w[N, K]^T + beta * y through the process's CBLAS (linear.cpp;
// only where blas_available()).
void sgemm_nt(int M, int N, int K, const float* x, int ldx, const float* w, int ldw, float beta, float* y,
              int ldy);
bool blas_available();
void check_quantized(const mx::array& w, const mx::array& scales, const mx::array& biases,
                     int group, int bits);

} // namespace mlxk
