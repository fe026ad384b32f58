// The prologue and the extra inputs of linear and the quantized matmul (rowops.h).
#include "rowops.h"

#include "parallel.h"
#include "primitives.h"

namespace mlxk {

const float* prologue_rows(const Rows& x, Prologue prologue, const float* norm, float eps, int K,
                           std::vector<float>& raw, std::vector<float>& buffer, int64_t& stride) {
  const float* p = x.materialize(raw, stride);
  if (prologue == Prologue::none && (stride >= K || x.rows == 1)) {
    return p;
  }
  buffer.resize(size_t(x.rows) * K);
  parallel_for(x.rows, std::max<int64_t>(1, 4096 / K), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = p + r * stride;
      float* out = buffer.data() + r * K;
      if (prologue == Prologue::rms_norm) {
        rms_norm_row(out, row, norm, K, eps);
      } else if (prologue == Prologue::silu_gate_halves) {
        silu_gate_row(out, row, row + K, K);
      } else {
        std::copy(row, row + K, out);
      }
    }
  });
  stride = K;
  return buffer.data();
}

RowOpsInputs::RowOpsInputs(const std::vector<mx::array>& inputs, size_t first, const RowOps& ops)
    : residual(inputs[0]) {
  size_t next = first;
  if (ops.has_bias) {
    bias = inputs[next++].data<float>();
  }
  if (ops.has_residual) {
    residual = Rows(inputs[next++]);
  }
  if (ops.prologue == Prologue::rms_norm) {
    norm = inputs[next].data<float>();
  }
  for (size_t i = first; i < inputs.size(); ++i) {
    bool is_residual = ops.has_residual && i == first + (ops.has_bias ? 1 : 0);
    if (!is_residual && !inputs[i].flags().row_contiguous) {
      throw std::invalid_argument("the bias and norm weight must be row-contiguous");
    }
  }
}

void push_row_ops(std::vector<mx::array>& inputs, const RowOps& ops, const mx::Shape& out_shape, int K,
                  const std::optional<mx::array>& bias, const std::optional<mx::array>& residual,
                  const std::optional<mx::array>& norm, const char* op) {
  std::string name(op);
  if (bias.has_value() != ops.has_bias || residual.has_value() != ops.has_residual ||
      norm.has_value() != (ops.prologue == Prologue::rms_norm)) {
    throw std::invalid_argument(name + ": the extra inputs do not match the operations");
  }
  if (bias) {
    require_float32(*bias, op);
    if (bias->ndim() != 1 || bias->shape(0) != out_shape.back()) {
      throw std::invalid_argument(name + ": the bias must be [N]");
    }
    inputs.push_back(*bias);
  }
  if (residual) {
    require_float32(*residual, op);
    if (residual->shape() != out_shape) {
      throw std::invalid_argument(name + ": the residual must have the output's shape");
    }
    inputs.push_back(*residual);
  }
  if (norm) {
    require_float32(*norm, op);
    if (norm->ndim() != 1 || norm->shape(0) != K) {
      throw std::invalid_argument(name + ": the norm weight must be [K]");
    }
    inputs.push_back(*norm);
  }
}

} // namespace mlxk
