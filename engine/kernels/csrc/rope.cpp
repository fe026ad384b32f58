// RoPE as one primitive (MLX's CPU backend runs mx.fast.rope as ~18 ops), with
// mx.fast.rope's exact results; and the fused form over a qkv projection that
// splits it into heads, applies per-head RMSNorm (Qwen3's q/k norms) and RoPE,
// and writes q, k, v in [B, H, L, D] for attention and the KV cache in one step, or
// writes k and v straight into a float KV cache's buffers (qkv_rope_append).
#include <optional>
#include <vector>

#include "arrays.h"
#include "exact.h"
#include "parallel.h"
#include "primitives.h"
#include "qkv.h"

namespace mlxk {

namespace {

float position(const int32_t* offsets, int n_offsets, int b, int t, float scale) {
  float pos = static_cast<float>(t) + static_cast<float>(offsets[n_offsets == 1 ? 0 : b]);
  return pos * scale;
}

// dims == 0 (qkv_rope only): split the heads, no rotation.
void check_rope(const RopeParams& p, const mx::array& inv_freqs, const mx::array& offsets) {
  require_float32(inv_freqs, "rope (inv_freqs)");
  if (p.dims < 0 || p.dims % 2 || inv_freqs.ndim() != 1 || inv_freqs.shape(0) != p.dims / 2) {
    throw std::invalid_argument("rope: dims must be even and inv_freqs [dims / 2]");
  }
  if (offsets.dtype() != mx::int32 || offsets.ndim() != 1) {
    throw std::invalid_argument("rope: offsets must be int32 [1] or [batch]");
  }
}

} // namespace

void Rope::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& enc = encoder(stream(), inputs, outputs);
  const auto& x = inputs[0];
  int B = x.shape(0), T = x.shape(-2), D = x.shape(-1);
  int N = x.ndim() == 4 ? x.shape(1) : 1;
  enc.dispatch([p = p_, xd = Dense4(x), inv = inputs[1].data<float>(), off = inputs[2].data<int32_t>(),
                n_off = int(inputs[2].size()), o = outputs[0].data<float>(), B, N, T, D]() {
    std::vector<float> buf;
    int64_t s[4];
    const float* xp = xd.get(buf, s);
    int half = p.dims / 2;
    parallel_for(int64_t(B) * T, std::max(1, 2048 / (N * D)), [&](int64_t r0, int64_t r1) {
      std::vector<float> c(half), sn(half);
      for (int64_t r = r0; r < r1; ++r) {
        int b = int(r / T), t = int(r % T);
        exact::angles(position(off, n_off, b, t, p.scale), inv, half, c.data(), sn.data());
        for (int n = 0; n < N; ++n) {
          const float* src = xp + b * s[0] + n * s[1] + t * s[2];
          float* dst = o + ((int64_t(b) * N + n) * T + t) * D;
          exact::rope(src, dst, D, p.dims, p.traditional, c.data(), sn.data());
        }
      }
    });
  });
}

bool Rope::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const Rope&>(other).p_;
  return p_.dims == o.dims && p_.traditional == o.traditional && p_.scale == o.scale;
}

void split_qkv(const RopeParams& p, const QkvHeads& h, const QkvInputs& in, const float* x, int64_t stride, int B,
               int L, HeadsOut q, HeadsOut k, HeadsOut v) {
  int D = h.head_dim, half = p.dims / 2;
  int cols = (h.q_heads + 2 * h.kv_heads) * D;
  parallel_for(int64_t(B) * L, std::max(1, 4096 / cols), [&](int64_t r0, int64_t r1) {
    std::vector<float> c(half), sn(half), tmp(D);
    for (int64_t r = r0; r < r1; ++r) {
      int b = int(r / L), l = int(r % L);
      const float* row = x + r * stride;
      exact::angles(position(in.off, in.n_off, b, l, p.scale), in.inv, half, c.data(), sn.data());
      auto rope_heads = [&](const float* src, const HeadsOut& out, int heads, const float* norm) {
        for (int hh = 0; hh < heads; ++hh) {
          const float* x_in = src + hh * D;
          if (norm) {
            exact::rms_norm(x_in, norm, tmp.data(), D, h.eps);
            x_in = tmp.data();
          }
          exact::rope(x_in, out.at(b, heads, hh, l, D), D, p.dims, p.traditional, c.data(), sn.data());
        }
      };
      rope_heads(row, q, h.q_heads, in.qn);
      rope_heads(row + int64_t(h.q_heads) * D, k, h.kv_heads, in.kn);
      const float* vs = row + int64_t(h.q_heads + h.kv_heads) * D;
      for (int hh = 0; hh < h.kv_heads; ++hh) {
        std::copy(vs + hh * D, vs + (hh + 1) * D, v.at(b, h.kv_heads, hh, l, D));
      }
    }
  });
}


namespace {

// split_qkv over qkv as it is laid out (gathered first when its rows are not evenly strided).
void split_rows(const RopeParams& p, const QkvHeads& h, const QkvInputs& in, const Rows& rows, int B, int L,
                HeadsOut q, HeadsOut k, HeadsOut v) {
  std::vector<float> buf;
  int64_t stride;
  const float* x = rows.materialize(buf, stride);
  split_qkv(p, h, in, x, stride, B, L, q, k, v);
}

} // namespace

void QkvRope::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  const auto& qkv = inputs[0];
  int B = qkv.shape(0), L = qkv.shape(1);
  Rows rows(qkv);
  QkvInputs in{inputs[1].data<float>(), inputs[2].data<int32_t>(), int(inputs[2].size()),
               h_.has_norm ? inputs[3].data<float>() : nullptr, h_.has_norm ? inputs[4].data<float>() : nullptr};
  if (at_ < 0) {
    auto& enc = encoder(stream(), inputs, outputs);
    enc.dispatch([p = p_, h = h_, in, rows, B, L, q = HeadsOut{outputs[0].data<float>(), L, 0},
                  k = HeadsOut{outputs[1].data<float>(), L, 0}, v = HeadsOut{outputs[2].data<float>(), L, 0}]() {
      split_rows(p, h, in, rows, B, L, q, k, v);
    });
    return;
  }
  // Appending: the last two inputs are the cache's key and value buffers [B, Hk, capacity, D],
  // taken over (or copied) by outputs 1 and 2; output 3 is offsets + L.
  release_sibling_inputs(inputs, outputs);
  const auto& keys = inputs[inputs.size() - 2];
  const auto& values = inputs[inputs.size() - 1];
  auto& enc = mx::cpu::get_command_encoder(stream());
  for (const auto& a : inputs) {
    enc.set_input_array(a);
  }
  allocate(outputs[0]);
  allocate(outputs[3]);
  bool copy_k = take_or_allocate(keys, outputs[1]);
  bool copy_v = take_or_allocate(values, outputs[2]);
  for (auto& o : outputs) {
    enc.set_output_array(o);
  }
  int64_t cap = keys.shape(2);
  enc.dispatch([p = p_, h = h_, in, rows, B, L, q = HeadsOut{outputs[0].data<float>(), L, 0},
                k = HeadsOut{outputs[1].data<float>(), cap, at_}, v = HeadsOut{outputs[2].data<float>(), cap, at_},
                kin = copy_k ? std::optional<Strided4>(Strided4(keys)) : std::nullopt,
                vin = copy_v ? std::optional<Strided4>(Strided4(values)) : std::nullopt,
                next = outputs[3].data<int32_t>()]() {
    if (kin) {
      kin->copy_to(k.data);
    }
    if (vin) {
      vin->copy_to(v.data);
    }
    split_rows(p, h, in, rows, B, L, q, k, v);
    for (int i = 0; i < in.n_off; ++i) {
      next[i] = in.off[i] + L;
    }
  });
}

bool QkvRope::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const QkvRope&>(other);
  return p_.dims == o.p_.dims && p_.traditional == o.p_.traditional && p_.scale == o.p_.scale &&
         h_.q_heads == o.h_.q_heads && h_.kv_heads == o.h_.kv_heads &&
         h_.head_dim == o.h_.head_dim && h_.has_norm == o.h_.has_norm && h_.eps == o.h_.eps && at_ == o.at_;
}

mx::array rope(const mx::array& x, const RopeParams& p, const mx::array& inv_freqs,
               const mx::array& offsets, mx::StreamOrDevice s) {
  require_float32(x, "rope");
  check_rope(p, inv_freqs, offsets);
  if (p.dims == 0) {
    throw std::invalid_argument("rope: dims must be positive");
  }
  if (x.ndim() != 3 && x.ndim() != 4) {
    throw std::invalid_argument("rope: x must be [B, T, D] or [B, N, T, D]");
  }
  if (p.dims > x.shape(-1) || (offsets.size() != 1 && offsets.size() != size_t(x.shape(0)))) {
    throw std::invalid_argument("rope: dims beyond the last axis, or offsets not [1] or [B]");
  }
  return mx::array(x.shape(), mx::float32, std::make_shared<Rope>(mx::to_stream(s), p),
                   {x, inv_freqs, offsets});
}

namespace {

// qkv_rope's inputs, checked: qkv, inv_freqs, offsets, then the norm weights when given.
std::vector<mx::array> qkv_inputs(const mx::array& qkv, const RopeParams& p, const QkvHeads& h,
                                  const mx::array& inv_freqs, const mx::array& offsets,
                                  const std::optional<mx::array>& q_norm, const std::optional<mx::array>& k_norm) {
  require_float32(qkv, "qkv_rope");
  check_rope(p, inv_freqs, offsets);
  int D = h.head_dim;
  if (qkv.ndim() != 3 || qkv.shape(-1) != (h.q_heads + 2 * h.kv_heads) * D || p.dims > D) {
    throw std::invalid_argument("qkv_rope: qkv must be [B, L, (q_heads + 2 kv_heads) head_dim]");
  }
  if (offsets.size() != 1 && offsets.size() != size_t(qkv.shape(0))) {
    throw std::invalid_argument("qkv_rope: offsets must be [1] or [B]");
  }
  if (q_norm.has_value() != h.has_norm || k_norm.has_value() != h.has_norm) {
    throw std::invalid_argument("qkv_rope: pass both q and k norm weights, or neither");
  }
  std::vector<mx::array> inputs = {qkv, inv_freqs, offsets};
  if (h.has_norm) {
    inputs.push_back(*q_norm);
    inputs.push_back(*k_norm);
  }
  return inputs;
}

} // namespace

std::vector<mx::array> qkv_rope(const mx::array& qkv, const RopeParams& p, const QkvHeads& h,
                                const mx::array& inv_freqs, const mx::array& offsets,
                                const std::optional<mx::array>& q_norm,
                                const std::optional<mx::array>& k_norm, mx::StreamOrDevice s) {
  auto inputs = qkv_inputs(qkv, p, h, inv_freqs, offsets, q_norm, k_norm);
  int B = qkv.shape(0), L = qkv.shape(1), D = h.head_dim;
  return mx::array::make_arrays({{B, h.q_heads, L, D}, {B, h.kv_heads, L, D}, {B, h.kv_heads, L, D}},
                                {mx::float32, mx::float32, mx::float32},
                                std::make_shared<QkvRope>(mx::to_stream(s), p, h), inputs);
}

std::vector<mx::array> qkv_rope_append(const mx::array& qkv, const RopeParams& p, const QkvHeads& h,
                                       const mx::array& inv_freqs, const mx::array& offsets,
                                       const std::optional<mx::array>& q_norm,
                                       const std::optional<mx::array>& k_norm, const mx::array& keys,
                                       const mx::array& values, int at, mx::StreamOrDevice s) {
  auto inputs = qkv_inputs(qkv, p, h, inv_freqs, offsets, q_norm, k_norm);
  int B = qkv.shape(0), L = qkv.shape(1), D = h.head_dim;
  for (const auto* buf : {&keys, &values}) {
    require_float32(*buf, "qkv_rope_append (keys, values)");
    if (buf->ndim() != 4 || buf->shape(0) != B || buf->shape(1) != h.kv_heads || buf->shape(3) != D ||
        buf->shape(2) != keys.shape(2)) {
      throw std::invalid_argument("qkv_rope_append: keys and values must be [B, kv_heads, capacity, head_dim]");
    }
  }
  if (at < 0 || at + L > keys.shape(2)) {
    throw std::invalid_argument("qkv_rope_append: rows [at, at + L) do not fit the buffers");
  }
  inputs.push_back(keys);
  inputs.push_back(values);
  return mx::array::make_arrays({{B, h.q_heads, L, D}, keys.shape(), values.shape(), offsets.shape()},
                                {mx::float32, mx::float32, mx::float32, mx::int32},
                                std::make_shared<QkvRope>(mx::to_stream(s), p, h, at), inputs);
}

} // namespace mlxk
