// The attention primitive: splits the work into blocks of query rows (and, for
// decode with few rows, ranges of keys merged afterwards) spread over threads.
// Its output [B, Hq, L, Dv] is laid out as [B, L, Hq, Dv], so the usual
// transpose(0, 2, 1, 3).reshape(B, L, -1) that follows costs no copy.
#include <algorithm>
#include <cmath>
#include <vector>

#include "arrays.h"
#include "attention_kernel.h"
#include "parallel.h"
#include "primitives.h"
#include "simd.h"

namespace mlxk {

namespace {

mx::array::Flags flags_for(const mx::Shape& shape, const mx::Strides& strides) {
  mx::array::Flags f;
  f.contiguous = true;
  int64_t row = 1, col = 1;
  f.row_contiguous = f.col_contiguous = true;
  for (int i = int(shape.size()) - 1, j = 0; i >= 0; --i, ++j) {
    if (shape[i] != 1 && strides[i] != row) {
      f.row_contiguous = false;
    }
    row *= shape[i];
    int c = j;  // column-major: axis c from the front
    if (shape[c] != 1 && strides[c] != col) {
      f.col_contiguous = false;
    }
    col *= shape[c];
  }
  return f;
}

struct Plan {
  int blocks;  // row blocks per kv head
  int rows_per_block;
  int splits;  // key ranges per row block
};

Plan plan(const AttnProblem& p) {
  int rows = p.L * p.rep();
  int rb = attention_block_rows();
  Plan out{(rows + rb - 1) / rb, 0, 1};
  out.rows_per_block = (rows + out.blocks - 1) / out.blocks;
  int tasks = p.B * p.Hk * out.blocks;
  int want = 2 * max_threads();
  if (tasks < want && p.S >= 512) {
    out.splits = std::min((want + tasks - 1) / tasks, p.S / 256);
  }
  return out;
}

void finish_row(const AttnProblem& p, float* out, const int64_t* os, int b, int hk, int i,
                const float* acc, float l) {
  float* o = out + b * os[0] + p.row_head(hk, i) * os[1] + p.row_pos(i) * os[2];
  float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int d = 0; d < p.Dv; ++d) {
    o[d] = acc[d] * inv;
  }
}

void run(const AttnProblem& p, float* out, const int64_t* os) {
  Plan pl = plan(p);
  int rows = p.L * p.rep();
  int dvp = (p.Dv + kW - 1) / kW * kW;
  int64_t ntasks = int64_t(p.B) * p.Hk * pl.blocks * pl.splits;
  int64_t per_task = int64_t(pl.rows_per_block) * (dvp + 2);
  std::vector<float> partials(size_t(ntasks * per_task));
  auto partial = [&](int64_t t) {
    float* base = partials.data() + t * per_task;
    int64_t n = pl.rows_per_block;
    return Partial{base + n * dvp, base + n * dvp + n, base, dvp};
  };
  auto block_of = [&](int64_t t) {
    int split = int(t % pl.splits);
    int64_t rest = t / pl.splits;
    int blk = int(rest % pl.blocks);
    int bh = int(rest / pl.blocks);
    int i0 = blk * pl.rows_per_block;
    int i1 = std::min(rows, i0 + pl.rows_per_block);
    int s0 = int(int64_t(p.S) * split / pl.splits);
    int s1 = int(int64_t(p.S) * (split + 1) / pl.splits);
    return RowBlock{bh / p.Hk, bh % p.Hk, i0, i1, s0, s1};
  };
  parallel_tasks(ntasks, [&](int64_t t) {
    RowBlock blk = block_of(t);
    Partial part = partial(t);
    attend_block(p, blk, part);
    if (pl.splits == 1) {
      for (int i = blk.i0; i < blk.i1; ++i) {
        int r = i - blk.i0;
        finish_row(p, out, os, blk.b, blk.hk, i, part.acc + r * dvp, part.l[r]);
      }
    }
  });
  if (pl.splits == 1) {
    return;
  }
  parallel_tasks(ntasks / pl.splits, [&](int64_t g) {
    RowBlock blk = block_of(g * pl.splits);
    std::vector<float> acc(size_t(p.Dv));
    for (int i = blk.i0; i < blk.i1; ++i) {
      int r = i - blk.i0;
      float m = kNegInf, l = 0.0f;
      for (int sp = 0; sp < pl.splits; ++sp) {
        m = std::max(m, partial(g * pl.splits + sp).m[r]);
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int sp = 0; sp < pl.splits && m != kNegInf; ++sp) {
        Partial part = partial(g * pl.splits + sp);
        float w = part.m[r] == kNegInf ? 0.0f : std::exp(part.m[r] - m);
        l += part.l[r] * w;
        for (int d = 0; d < p.Dv; ++d) {
          acc[d] += part.acc[r * dvp + d] * w;
        }
      }
      finish_row(p, out, os, blk.b, blk.hk, i, acc.data(), l);
    }
  });
}

// A 4-D array whose last axis is contiguous, as a pointer and its strides over the
// first three axes (copied into `buf` when the last axis is strided).
template <class T>
const T* head_rows(const mx::array& a, std::vector<T>& buf, int64_t st[3]) {
  const int64_t B = a.shape(0), H = a.shape(1), S = a.shape(2), W = a.shape(3);
  if (a.strides(3) == 1 || W == 1) {
    for (int i = 0; i < 3; ++i) {
      st[i] = a.strides(i);
    }
    return a.data<T>();
  }
  buf.resize(size_t(B * H * S * W));
  const T* src = a.data<T>();
  T* dst = buf.data();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < S; ++t)
        for (int64_t w = 0; w < W; ++w)
          *dst++ = src[b * a.strides(0) + h * a.strides(1) + t * a.strides(2) + w * a.strides(3)];
  st[0] = H * S * W;
  st[1] = S * W;
  st[2] = W;
  return buf.data();
}

struct QuantBuffers {
  std::vector<uint32_t> codes;
  std::vector<float> scales, biases;
};

QuantRows quant_rows_of(const mx::array& c, const mx::array& s, const mx::array& b, QuantBuffers& buf) {
  QuantRows q;
  int64_t cs[3];
  q.codes = reinterpret_cast<const uint8_t*>(head_rows(c, buf.codes, cs));
  for (int i = 0; i < 3; ++i) {
    q.cs[i] = cs[i] * 4;  // uint32 elements to bytes
  }
  q.scales = head_rows(s, buf.scales, q.ss);
  q.biases = head_rows(b, buf.biases, q.bs);
  return q;
}

} // namespace

void attention_run(const AttnProblem& p, float* out, const int64_t* os) {
  run(p, out, os);
}

void Attention::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  const auto& q = inputs[0];
  const auto& k = inputs[1];
  const auto& v = inputs[p_.bits ? 4 : 2];
  auto& out = outputs[0];
  const int dv = p_.bits ? int(v.shape(3)) * 32 / p_.bits : int(v.shape(3));
  const int dk = int(q.shape(3));
  AttnProblem p{q.shape(0), q.shape(1), k.shape(1), q.shape(2), p_.length >= 0 ? p_.length : k.shape(2), dk,
                dv, p_.scale, p_.causal, p_.window};
  p.bits = p_.bits;
  p.group = p_.group;
  mx::Strides os = {int64_t(p.L) * p.Hq * p.Dv, p.Dv, int64_t(p.Hq) * p.Dv, 1};
  if (p_.flat) {
    allocate(out);  // [B, L, Hq * Dv], row-contiguous: the same memory
  } else {
    out.set_data(mx::allocator::malloc(out.nbytes()), out.size(), os, flags_for(out.shape(), os));
  }
  auto& enc = encoder(stream(), inputs, outputs, false);
  const bool* mb = nullptr;
  const float* ma = nullptr;
  const int32_t* segments = p_.has_segments ? inputs.back().data<int32_t>() : nullptr;
  int n_segments = p_.has_segments ? int(inputs.back().size()) - 1 : 0;
  if (p_.has_mask) {
    const auto& m = inputs[p_.bits ? 7 : 3];
    const int lead = 4 - m.ndim();  // the mask broadcasts: its missing and size-1 axes stride 0
    for (int i = 0; i < 4; ++i) {
      p.ms[i] = i < lead || m.shape(i - lead) == 1 ? 0 : m.strides(i - lead);
    }
    (m.dtype() == mx::bool_ ? (void)(mb = m.data<bool>()) : (void)(ma = m.data<float>()));
  }
  if (p_.bits) {
    enc.dispatch([p, mb, ma, qd = Dense4(q), in = inputs, o = out.data<float>(), os]() mutable {
      std::vector<float> qb;
      QuantBuffers kb, vb;
      p.q = qd.get(qb, p.qs);
      p.kq = quant_rows_of(in[1], in[2], in[3], kb);
      p.vq = quant_rows_of(in[4], in[5], in[6], vb);
      p.mask_bool = mb;
      p.mask_add = ma;
      run(p, o, os.data());
    });
    return;
  }
  enc.dispatch([p, mb, ma, segments, n_segments, qd = Dense4(q), kd = Dense4(k), vd = Dense4(v),
                o = out.data<float>(), os]() mutable {
    std::vector<float> qb, kb, vb;
    std::vector<int32_t> lo, hi;
    p.q = qd.get(qb, p.qs);
    p.k = kd.get(kb, p.ks);
    p.v = vd.get(vb, p.vs);
    p.mask_bool = mb;
    p.mask_add = ma;
    if (segments) {
      lo.assign(p.L, 0);
      hi.assign(p.L, 0);
      for (int sg = 0; sg < n_segments; ++sg) {
        for (int t = std::max(0, segments[sg]); t < std::min(p.L, segments[sg + 1]); ++t) {
          lo[t] = segments[sg];
          hi[t] = segments[sg + 1];
        }
      }
      p.seg_lo = lo.data();
      p.seg_hi = hi.data();
    }
    run(p, o, os.data());
  });
}

bool Attention::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const Attention&>(other).p_;
  return p_.scale == o.scale && p_.causal == o.causal && p_.window == o.window &&
         p_.has_mask == o.has_mask && p_.flat == o.flat && p_.has_segments == o.has_segments &&
         p_.bits == o.bits && p_.group == o.group && p_.length == o.length;
}

namespace {

// The mask as given, once it is bool or float32 and broadcasts to [B, Hq, L, S].
mx::array checked_mask(const mx::array& mask, const mx::Shape& full, const char* op) {
  if (mask.dtype() != mx::bool_ && mask.dtype() != mx::float32) {
    throw std::invalid_argument(std::string(op) + ": the mask must be bool or float32");
  }
  bool fits = mask.ndim() <= 4;
  for (int i = 0; fits && i < mask.ndim(); ++i) {
    int d = mask.shape(mask.ndim() - 1 - i);
    fits = d == 1 || d == full[3 - i];
  }
  if (!fits) {
    throw std::invalid_argument(std::string(op) + ": the mask does not broadcast to [B, Hq, L, S]");
  }
  return mask;
}

} // namespace

mx::array attention(const mx::array& q, const mx::array& k, const mx::array& v, float scale,
                    bool causal, int window, const std::optional<mx::array>& mask, bool flat,
                    const std::optional<mx::array>& segments, int length, mx::StreamOrDevice s) {
  for (const auto* a : {&q, &k, &v}) {
    require_float32(*a, "attention");
    if (a->ndim() != 4) {
      throw std::invalid_argument("attention: q, k and v must be 4-D");
    }
  }
  if (k.shape(0) != q.shape(0) || v.shape(0) != q.shape(0) || k.shape(3) != q.shape(3) ||
      v.shape(1) != k.shape(1) || v.shape(2) != k.shape(2) || q.shape(1) % k.shape(1) != 0) {
    throw std::invalid_argument("attention: incompatible q, k, v shapes");
  }
  if (length > k.shape(2)) {
    throw std::invalid_argument("attention: length exceeds the keys held");
  }
  const int S = length >= 0 ? length : k.shape(2);
  auto stream = mx::to_stream(s);
  std::vector<mx::array> inputs = {q, k, v};
  if (mask) {
    inputs.push_back(checked_mask(*mask, {q.shape(0), q.shape(1), q.shape(2), S}, "attention"));
  }
  if (segments) {
    if (segments->dtype() != mx::int32 || segments->ndim() != 1 || q.shape(0) != 1 || q.shape(2) != S) {
      throw std::invalid_argument("attention: segments (int32 starts and end) need B == 1, L == S");
    }
    inputs.push_back(*segments);
  }
  mx::Shape shape = {q.shape(0), q.shape(1), q.shape(2), v.shape(3)};
  if (flat) {
    shape = {q.shape(0), q.shape(2), q.shape(1) * v.shape(3)};
  }
  AttentionParams params{scale, causal, window, mask.has_value(), flat, segments.has_value(), 0, 0, length};
  return mx::array(shape, mx::float32, std::make_shared<Attention>(stream, params), inputs);
}

mx::array attention_quantized(const mx::array& q, const std::vector<mx::array>& k,
                              const std::vector<mx::array>& v, int group, int bits, float scale,
                              bool causal, const std::optional<mx::array>& mask, bool flat, int length,
                              mx::StreamOrDevice s) {
  require_float32(q, "attention_quantized");
  if (k.size() != 3 || v.size() != 3) {
    throw std::invalid_argument("attention_quantized: keys and values are (codes, scales, biases)");
  }
  if (bits != 8 && bits != 4) {
    throw std::invalid_argument("attention_quantized: bits must be 8 or 4");
  }
  if (group <= 0 || group % (2 * kW) != 0) {
    throw std::invalid_argument("attention_quantized: unsupported group size");
  }
  if (q.ndim() != 4) {
    throw std::invalid_argument("attention_quantized: q must be 4-D");
  }
  const int D = q.shape(3);
  for (const auto* part : {&k, &v}) {
    const auto& c = (*part)[0];
    if (c.dtype() != mx::uint32 || c.ndim() != 4 || c.shape(0) != q.shape(0) ||
        q.shape(1) % c.shape(1) != 0 || c.shape(2) != k[0].shape(2) || c.shape(1) != k[0].shape(1)) {
      throw std::invalid_argument("attention_quantized: codes must be uint32 [B, Hk, S, D * bits / 32]");
    }
    int dim = int(c.shape(3)) * 32 / bits;
    if (dim % group != 0) {
      throw std::invalid_argument("attention_quantized: the head size is not a multiple of the group");
    }
    mx::Shape groups = {c.shape(0), c.shape(1), c.shape(2), dim / group};
    for (int i = 1; i < 3; ++i) {
      require_float32((*part)[i], "attention_quantized (scales, biases)");
      if ((*part)[i].shape() != groups) {
        throw std::invalid_argument("attention_quantized: scales/biases do not match the codes");
      }
    }
  }
  if (int(k[0].shape(3)) * 32 / bits != D) {
    throw std::invalid_argument("attention_quantized: keys and queries differ in head size");
  }
  auto stream = mx::to_stream(s);
  std::vector<mx::array> inputs = {q, k[0], k[1], k[2], v[0], v[1], v[2]};
  if (length > k[0].shape(2)) {
    throw std::invalid_argument("attention_quantized: length exceeds the keys held");
  }
  const int S = length >= 0 ? length : k[0].shape(2), Dv = int(v[0].shape(3)) * 32 / bits;
  if (mask) {
    inputs.push_back(checked_mask(*mask, {q.shape(0), q.shape(1), q.shape(2), S}, "attention_quantized"));
  }
  mx::Shape shape = {q.shape(0), q.shape(1), q.shape(2), Dv};
  if (flat) {
    shape = {q.shape(0), q.shape(2), q.shape(1) * Dv};
  }
  AttentionParams params{scale, causal, 0, mask.has_value(), flat, false, bits, group, length};
  return mx::array(shape, mx::float32, std::make_shared<Attention>(stream, params), inputs);
}

} // namespace mlxk
