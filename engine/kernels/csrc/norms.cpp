// RMSNorm and LayerNorm over the last axis: one primitive where MLX's CPU backend
// runs six to nine, with the same rounding (exact.h).
#include "exact.h"
#include "primitives.h"
#include "rowmap.h"

namespace mlxk {

namespace {

const float* optional_data(const std::vector<mx::array>& inputs, size_t i, bool present) {
  return present ? inputs[i].data<float>() : nullptr;
}

void check_param(const std::optional<mx::array>& p, const mx::array& x, const char* op) {
  if (p) {
    require_float32(*p, op);
    if (p->ndim() != 1 || p->shape(0) != x.shape(-1)) {
      throw std::invalid_argument(std::string(op) + ": weight/bias must be [last axis of x]");
    }
  }
}

} // namespace

void rms_norm_row(float* out, const float* x, const float* w, int n, float eps) {
  exact::rms_norm(x, w, out, n, eps);
}

void RmsNorm::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  const float* w = optional_data(inputs, 1, has_weight_);
  float eps = eps_;
  map_rows(stream(), inputs, outputs, [w, eps](float* o, const float* x, int n) {
    exact::rms_norm(x, w, o, n, eps);
  });
}

bool RmsNorm::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const RmsNorm&>(other);
  return eps_ == o.eps_ && has_weight_ == o.has_weight_;
}

void LayerNorm::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  const float* w = optional_data(inputs, 1, has_weight_);
  const float* b = optional_data(inputs, has_weight_ ? 2 : 1, has_bias_);
  float eps = eps_;
  map_rows(stream(), inputs, outputs, [w, b, eps](float* o, const float* x, int n) {
    exact::layer_norm(x, w, b, o, n, eps);
  });
}

bool LayerNorm::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const LayerNorm&>(other);
  return eps_ == o.eps_ && has_weight_ == o.has_weight_ && has_bias_ == o.has_bias_;
}

mx::array rms_norm(const mx::array& x, const std::optional<mx::array>& weight, float eps,
                   mx::StreamOrDevice s) {
  require_float32(x, "rms_norm");
  check_param(weight, x, "rms_norm");
  std::vector<mx::array> inputs = {x};
  if (weight) {
    inputs.push_back(*weight);
  }
  return mx::array(x.shape(), mx::float32,
                   std::make_shared<RmsNorm>(mx::to_stream(s), eps, weight.has_value()), inputs);
}

mx::array layer_norm(const mx::array& x, const std::optional<mx::array>& weight,
                     const std::optional<mx::array>& bias, float eps, mx::StreamOrDevice s) {
  require_float32(x, "layer_norm");
  check_param(weight, x, "layer_norm");
  check_param(bias, x, "layer_norm");
  std::vector<mx::array> inputs = {x};
  for (const auto* p : {&weight, &bias}) {
    if (*p) {
      inputs.push_back(**p);
    }
  }
  auto prim = std::make_shared<LayerNorm>(mx::to_stream(s), eps, weight.has_value(), bias.has_value());
  return mx::array(x.shape(), mx::float32, prim, inputs);
}

} // namespace mlxk
