// PackedLinear: the one MLX primitive over packed_linear.h's kinds; their packing and checks.
#include <stdexcept>
#include <vector>

#include "arrays.h"
#include "packed_linear.h"
#include "primitives.h"

namespace mlxk {

namespace {

struct Kind {
  const char* name;
  bool (*available)();
  size_t (*bytes)(int N, int K);
  void (*pack)(const float* w, int N, int K, uint8_t* out);
  void (*rows)(const uint8_t* packed, int N, int K, const float* x, int64_t xs, int64_t M, float* y,
               const float* res, const Epilogue& e);
};

const Kind kKinds[] = {
    {"f32", f32_available, f32_packed_bytes, f32_pack, f32_rows},
    {"bf16", bf16_available, bf16_packed_bytes, bf16_pack, bf16_rows},
    {"int8", int8_available, int8_packed_bytes, int8_pack, int8_rows},
};

int kind_index(const std::string& kind) {
  for (int i = 0; i < 3; ++i) {
    if (kind == kKinds[i].name) {
      return i;
    }
  }
  throw std::invalid_argument("packed_linear: kind is \"f32\", \"bf16\" or \"int8\", not \"" + kind + "\"");
}

int act_index(const std::string& act) {
  if (act == "none") {
    return kActNone;
  }
  if (act == "gelu") {
    return kActGeluErf;
  }
  if (act == "gelu_tanh") {
    return kActGeluTanh;
  }
  throw std::invalid_argument("packed_linear: act is \"none\", \"gelu\" or \"gelu_tanh\", not \"" + act + "\"");
}

} // namespace

bool packed_available(const std::string& kind) {
  return kKinds[kind_index(kind)].available();
}

mx::array linear_pack(const mx::array& w_in, const std::string& kind) {
  const Kind& k = kKinds[kind_index(kind)];
  require_float32(w_in, "linear_pack");
  if (w_in.ndim() != 2) {
    throw std::invalid_argument("linear_pack: the weight is [N, K]");
  }
  mx::array w = mx::contiguous(w_in);
  w.eval();
  int N = w.shape(0), K = w.shape(1);
  std::vector<uint8_t> out(k.bytes(N, K), 0);
  k.pack(w.data<float>(), N, K, out.data());
  return mx::array(out.begin(), mx::Shape{int(out.size())}, mx::uint8);
}

void PackedLinear::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& out = outputs[0];
  auto& enc = encoder(stream(), inputs, outputs);
  Epilogue e{has_bias_ ? inputs[2].data<float>() : nullptr, 0, act_};
  std::optional<Rows> residual;
  if (has_residual_) {
    residual.emplace(inputs[has_bias_ ? 3 : 2]);
  }
  enc.dispatch([x = Rows(inputs[0]), wp = inputs[1].data<uint8_t>(), rows = kKinds[kind_].rows, N = n_, K = k_,
                e, residual, y = out.data<float>()]() mutable {
    std::vector<float> xb, rb;
    int64_t xs = 0;
    const float* xp = x.materialize(xb, xs);
    const float* res = residual ? residual->materialize(rb, e.rs) : nullptr;
    rows(wp, N, K, xp, xs, x.rows, y, res, e);
  });
}

bool PackedLinear::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const PackedLinear&>(other);
  return kind_ == o.kind_ && n_ == o.n_ && k_ == o.k_ && has_bias_ == o.has_bias_ &&
         has_residual_ == o.has_residual_ && act_ == o.act_;
}

mx::array packed_linear(const mx::array& x, const mx::array& packed, const std::string& kind, int N,
                        const std::optional<mx::array>& bias, const std::optional<mx::array>& residual,
                        const std::string& act, mx::StreamOrDevice s) {
  int index = kind_index(kind), a = act_index(act);
  const Kind& k = kKinds[index];
  require_float32(x, "packed_linear");
  if (!k.available()) {
    throw std::invalid_argument(std::string("packed_linear: the kernels were built without the ") + k.name +
                                " product's instructions");
  }
  int K = x.ndim() ? x.shape(-1) : 0;
  if (N <= 0 || packed.dtype() != mx::uint8 || packed.ndim() != 1 || packed.size() != k.bytes(N, K)) {
    throw std::invalid_argument("packed_linear: packed is linear_pack's output for a weight [N, K] with x [..., K]");
  }
  mx::Shape shape = x.shape();
  shape.back() = N;
  std::vector<mx::array> inputs = {x, mx::contiguous(packed)};
  if (bias) {
    require_float32(*bias, "packed_linear (bias)");
    if (bias->size() != size_t(N)) {
      throw std::invalid_argument("packed_linear: bias [N]");
    }
    inputs.push_back(mx::contiguous(*bias));
  }
  if (residual) {
    require_float32(*residual, "packed_linear (residual)");
    inputs.push_back(mx::broadcast_to(*residual, shape));
  }
  return mx::array(shape, mx::float32,
                   std::make_shared<PackedLinear>(mx::to_stream(s), index, N, K, bias.has_value(),
                                                  residual.has_value(), a),
                   inputs);
}

} // namespace mlxk
