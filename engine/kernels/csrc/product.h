// One weight product run on raw rows, as the primitives and the decoder layer call it:
// y (rows `ys` apart) = x (rows `xs` apart) @ W^T (+ bias) (+ res, rows `rs` apart),
// the kernel chosen by the row count as the product's own primitive chooses it.
#pragma once

#include <cstdint>

#include "quantized.h"

namespace mlxk {

// quantized.cpp: the integer-dot matvec (one row), the register matvec (a few), or
// per-thread tiles through the BLAS (more).
void quantized_rows(const QMat& w, const float* x, int64_t xs, int rows, float* y, int64_t ys, const float* bias,
                    const float* res, int64_t rs);
// linear.cpp: the SIMD matvec (a few rows) or the BLAS's sgemm.
void float_rows(const float* w, int N, int K, const float* x, int64_t xs, int rows, float* y, int64_t ys,
                const float* bias, const float* res, int64_t rs);

// A float32 weight [N, K] (w set) or MLX's affine quantization (q set), with its bias.
struct ProductView {
  const float* w = nullptr;
  QMat q{};
  int N = 0, K = 0;
  const float* bias = nullptr;
  void run(const float* x, int64_t xs, int rows, float* y, int64_t ys, const float* res, int64_t rs) const {
    if (w) {
      float_rows(w, N, K, x, xs, rows, y, ys, bias, res, rs);
    } else {
      quantized_rows(q, x, xs, rows, y, ys, bias, res, rs);
    }
  }
};

} // namespace mlxk
