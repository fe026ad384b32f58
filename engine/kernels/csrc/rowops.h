// What the matrix products do around the product itself, shared by linear and the
// quantized matmul: a prologue on each input row, then + bias and + residual.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "arrays.h"

namespace mlxk {

// What linear applies to each row of x first.
enum class Prologue { none, rms_norm, silu_gate_halves };

struct RowOps {
  Prologue prologue;
  float eps;  // rms_norm's
  bool has_bias, has_residual;
  bool operator==(const RowOps& o) const {
    return prologue == o.prologue && eps == o.eps && has_bias == o.has_bias && has_residual == o.has_residual;
  }
};

// The rows to multiply, K each: x itself, or prologue(x) written to `buffer` (also
// when x's rows overlap, as broadcast rows do: sgemm needs a real leading dimension).
const float* prologue_rows(const Rows& x, Prologue prologue, const float* norm, float eps, int K,
                           std::vector<float>& raw, std::vector<float>& buffer, int64_t& stride);

// The extra inputs of a product after its fixed ones (from `first` on), validated:
// bias [N], residual [..., N] (any layout), norm [K]; the data pointers.
struct RowOpsInputs {
  const float* bias = nullptr;
  Rows residual;
  const float* norm = nullptr;
  RowOpsInputs(const std::vector<mx::array>& inputs, size_t first, const RowOps& ops);
};

// Adds the extra inputs of `ops` to `inputs` after checking them (op construction).
void push_row_ops(std::vector<mx::array>& inputs, const RowOps& ops, const mx::Shape& out_shape, int K,
                  const std::optional<mx::array>& bias, const std::optional<mx::array>& residual,
                  const std::optional<mx::array>& norm, const char* op);

// y[r][n] + bias[n] + residual[r][n] for the output rows (after the product).
inline float finish(float acc, const float* bias, const float* res, int64_t n) {
  acc += bias ? bias[n] : 0.0f;
  return acc + (res ? res[n] : 0.0f);
}

} // namespace mlxk
