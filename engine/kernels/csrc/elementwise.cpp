// SiLU-gate, GELU and softmax: vectorised, split over threads for large inputs.
#include <cmath>

#include "primitives.h"
#include "rowmap.h"
#include "simd.h"

namespace mlxk {

namespace {

template <class Op>
inline void map_row(float* out, const float* a, int64_t n, Op op) {
  int64_t i = 0;
  for (; i + kW <= n; i += kW) {
    store(out + i, op(load(a + i)));
  }
  if (i < n) {
    store_part(out + i, op(load_part(a + i, int(n - i), 0.0f)), int(n - i));
  }
}

inline vf silu_gate_v(vf g, vf u) {
  return g * vsigmoid(g) * u;
}

void softmax_row(float* out, const float* x, int n) {
  vf m = splat(kNegInf);
  int64_t i = 0;
  for (; i + kW <= n; i += kW) {
    m = vmax(m, load(x + i));
  }
  float mx_ = hmax(m);
  for (; i < n; ++i) {
    mx_ = std::max(mx_, x[i]);
  }
  if (mx_ == kNegInf) {
    mx_ = 0.0f;  // every input is -inf: the result is NaN, as exp(-inf - -inf)
  }
  vf sum = splat(0.0f);
  float tail = 0.0f;
  for (i = 0; i + kW <= n; i += kW) {
    vf e = vexp(load(x + i) - mx_);
    store(out + i, e);
    sum += e;
  }
  for (; i < n; ++i) {
    out[i] = std::exp(x[i] - mx_);
    tail += out[i];
  }
  float inv = 1.0f / (hsum(sum) + tail);
  for (i = 0; i + kW <= n; i += kW) {
    store(out + i, load(out + i) * inv);
  }
  for (; i < n; ++i) {
    out[i] *= inv;
  }
}

} // namespace

void silu_gate_row(float* y, const float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + kW <= n; i += kW) {
    store(y + i, silu_gate_v(load(gate + i), load(up + i)));
  }
  if (i < n) {
    int k = int(n - i);
    store_part(y + i, silu_gate_v(load_part(gate + i, k, 0.0f), load_part(up + i, k, 0.0f)), k);
  }
}

void CpuPrimitive::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) {
  throw std::runtime_error(std::string(name()) + " has only a CPU kernel");
}

void SiluGate::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& out = outputs[0];
  auto& enc = encoder(stream(), inputs, outputs);
  const auto& second = halves_ ? inputs[0] : inputs[1];
  enc.dispatch([g = Rows(inputs[0]), u = Rows(second), halves = halves_, o = out.data<float>()]() {
    std::vector<float> gb, ub;
    int64_t gs, us;
    const float* gp = g.materialize(gb, gs);
    const float* up = halves ? gp + g.cols / 2 : u.materialize(ub, us);
    us = halves ? gs : us;
    int64_t n = halves ? g.cols / 2 : g.cols;
    for_rows(g.rows, n, [&](int64_t r) { silu_gate_row(o + r * n, gp + r * gs, up + r * us, n); });
  });
}

void Gelu::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  if (approximate_) {
    map_rows(stream(), inputs, outputs, [](float* o, const float* x, int n) { map_row(o, x, n, gelu_tanh_v); });
  } else {
    map_rows(stream(), inputs, outputs, [](float* o, const float* x, int n) { map_row(o, x, n, gelu_erf_v); });
  }
}

bool SiluGate::is_equivalent(const mx::Primitive& other) const {
  return halves_ == static_cast<const SiluGate&>(other).halves_;
}

bool Gelu::is_equivalent(const mx::Primitive& other) const {
  return approximate_ == static_cast<const Gelu&>(other).approximate_;
}

void Softmax::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  map_rows(stream(), inputs, outputs, softmax_row);
}

// -- ops ---------------------------------------------------------------------------------

mx::array silu_gate(const mx::array& gate, const mx::array& up, mx::StreamOrDevice s) {
  require_float32(gate, "silu_gate");
  require_float32(up, "silu_gate");
  if (gate.shape() != up.shape()) {
    throw std::invalid_argument("silu_gate: gate and up must have the same shape");
  }
  return mx::array(gate.shape(), mx::float32, std::make_shared<SiluGate>(mx::to_stream(s), false),
                   {gate, up});
}

mx::array silu_gate_halves(const mx::array& x, mx::StreamOrDevice s) {
  require_float32(x, "silu_gate_halves");
  if (x.ndim() < 1 || x.shape(-1) % 2) {
    throw std::invalid_argument("silu_gate_halves: the last axis must have an even length");
  }
  mx::Shape shape = x.shape();
  shape.back() /= 2;
  return mx::array(shape, mx::float32, std::make_shared<SiluGate>(mx::to_stream(s), true), {x});
}

mx::array gelu(const mx::array& x, bool approximate, mx::StreamOrDevice s) {
  require_float32(x, "gelu");
  return mx::array(x.shape(), mx::float32, std::make_shared<Gelu>(mx::to_stream(s), approximate),
                   {x});
}

mx::array softmax(const mx::array& x, mx::StreamOrDevice s) {
  require_float32(x, "softmax");
  return mx::array(x.shape(), mx::float32, std::make_shared<Softmax>(mx::to_stream(s)), {x});
}

} // namespace mlxk
