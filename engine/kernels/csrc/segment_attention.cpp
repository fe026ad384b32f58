// Attention over packed sequences for the encoder: each segment's queries attend all of its own
// keys (no mask, no causality), as whole score rows. For a block of up to 48 query rows of one
// (segment, head): the scores Q K^T by the float32 micro-kernel on the segment's keys packed in
// panels of 32; each row's softmax (its max, exp(scale * (s - max)), their sum); the weighted
// values by the same micro-kernel on the value rows, divided by the sum. Needs AVX-512 and a
// value width that is a multiple of 32; a row's result never depends on the rows beside it.
#include <algorithm>
#include <stdexcept>
#include <vector>

#include "arrays.h"
#include "f32_tile.h"
#include "parallel.h"
#include "primitives.h"
#include "simd.h"

namespace mlxk {

namespace {

#if defined(__AVX512F__)
constexpr int kBlockRows = 48;

struct Scratch {
  std::vector<float> keys, scores;
};
thread_local Scratch tls;

struct Heads {
  const float* q;
  const float* k;
  const float* v;
  int64_t qs[4], ks[4], vs[4];
  int H, D, Dv;
  float scale;
};

// Query rows [r0, r1) of the segment at [start, start + L), one head, into out [N, H * Dv], with
// the segment's keys packed in `keys`.
void attend_rows(const Heads& a, const float* keys, int head, int start, int L, int r0, int r1, float* out) {
  int Lp = (L + 31) / 32 * 32, n = r1 - r0;
  tls.scores.resize(size_t(kBlockRows) * Lp);
  float* s = tls.scores.data();
  const __m512 scale = _mm512_set1_ps(a.scale);
  const float* qh = a.q + head * a.qs[1] + int64_t(start + r0) * a.qs[2];
  f32_row_tiles(0, n, [&](int64_t i, auto rows) {
    constexpr int R = decltype(rows)::value;
    for (int p = 0; p < Lp / 32; ++p) {
      __m512 acc[R][2];
      f32_tile<R>(qh + i * a.qs[2], a.qs[2], keys + int64_t(p) * a.D * 32, 32, a.D, acc);
      for (int r = 0; r < R; ++r) {
        _mm512_storeu_ps(s + (i + r) * Lp + p * 32, acc[r][0]);
        _mm512_storeu_ps(s + (i + r) * Lp + p * 32 + 16, acc[r][1]);
      }
    }
  });
  float inv[kBlockRows];
  for (int i = 0; i < n; ++i) {
    float* sr = s + int64_t(i) * Lp;
    __m512 mv = _mm512_set1_ps(kNegInf);
    for (int t = 0; t < L; t += 16) {
      __mmask16 lanes = L - t >= 16 ? __mmask16(0xffff) : __mmask16((1u << (L - t)) - 1);
      mv = _mm512_max_ps(mv, _mm512_mask_loadu_ps(_mm512_set1_ps(kNegInf), lanes, sr + t));
    }
    __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mv)), sum = _mm512_setzero_ps();
    for (int t = 0; t < L; t += 16) {  // lanes past L: exp(-inf) = 0
      __mmask16 lanes = L - t >= 16 ? __mmask16(0xffff) : __mmask16((1u << (L - t)) - 1);
      __m512 x = _mm512_mask_loadu_ps(_mm512_set1_ps(kNegInf), lanes, sr + t);
      __m512 e = (__m512)vexp((vf)_mm512_mul_ps(_mm512_sub_ps(x, m), scale));
      _mm512_mask_storeu_ps(sr + t, lanes, e);
      sum = _mm512_add_ps(sum, e);
    }
    inv[i] = 1.0f / _mm512_reduce_add_ps(sum);
  }
  const float* vh = a.v + head * a.vs[1] + int64_t(start) * a.vs[2];
  int64_t ldo = int64_t(a.H) * a.Dv;
  f32_row_tiles(0, n, [&](int64_t i, auto rows) {
    constexpr int R = decltype(rows)::value;
    for (int c = 0; c < a.Dv; c += 32) {
      __m512 acc[R][2];
      f32_tile<R>(s + i * Lp, Lp, vh + c, a.vs[2], L, acc);
      for (int r = 0; r < R; ++r) {
        __m512 w = _mm512_set1_ps(inv[i + r]);
        float* o = out + (start + r0 + i + r) * ldo + head * a.Dv + c;
        _mm512_storeu_ps(o, _mm512_mul_ps(acc[r][0], w));
        _mm512_storeu_ps(o + 16, _mm512_mul_ps(acc[r][1], w));
      }
    }
  });
}
// One head of the segment at [start, start + L): its keys packed once (panel t / 32, row d,
// column t % 32; zero past L), then its query rows a block at a time.
void attend_segment(const Heads& a, int head, int start, int L, float* out) {
  int Lp = (L + 31) / 32 * 32;
  tls.keys.resize(size_t(Lp) * a.D);
  float* keys = tls.keys.data();
  const float* kh = a.k + head * a.ks[1] + int64_t(start) * a.ks[2];
  for (int t = 0; t < Lp; ++t) {
    float* col = keys + int64_t(t / 32) * a.D * 32 + t % 32;
    for (int d = 0; d < a.D; ++d) {
      col[d * 32] = t < L ? kh[t * a.ks[2] + d] : 0.0f;
    }
  }
  for (int r0 = 0; r0 < L; r0 += kBlockRows) {
    attend_rows(a, keys, head, start, L, r0, std::min(L, r0 + kBlockRows), out);
  }
}
#endif

} // namespace

bool segment_attention_available() {
#if defined(__AVX512F__)
  return true;
#else
  return false;
#endif
}

void SegmentAttention::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
#if defined(__AVX512F__)
  auto& out = outputs[0];
  auto& enc = encoder(stream(), inputs, outputs);
  const auto& q = inputs[0];
  Heads a{nullptr, nullptr, nullptr, {}, {}, {}, int(q.shape(1)), int(q.shape(3)), int(inputs[2].shape(3)), scale_};
  const int32_t* seg = inputs[3].data<int32_t>();
  std::vector<int32_t> segments(seg, seg + inputs[3].size());
  enc.dispatch([a, segments, qd = Dense4(inputs[0]), kd = Dense4(inputs[1]), vd = Dense4(inputs[2]),
                o = out.data<float>()]() mutable {
    std::vector<float> qb, kb, vb;
    a.q = qd.get(qb, a.qs);
    a.k = kd.get(kb, a.ks);
    a.v = vd.get(vb, a.vs);
    int64_t count = int64_t(segments.size() - 1) * a.H;
    parallel_tasks(count, [&](int64_t t) {
      int g = int(t / a.H), head = int(t % a.H);
      attend_segment(a, head, segments[g], segments[g + 1] - segments[g], o);
    });
  });
#else
  (void)inputs, (void)outputs;
  throw std::runtime_error("segment_attention: built without AVX-512");
#endif
}

bool SegmentAttention::is_equivalent(const mx::Primitive& other) const {
  return scale_ == static_cast<const SegmentAttention&>(other).scale_;
}

mx::array segment_attention(const mx::array& q, const mx::array& k, const mx::array& v, float scale,
                            const mx::array& segments, mx::StreamOrDevice s) {
  if (!segment_attention_available()) {
    throw std::invalid_argument("segment_attention: the kernels were built without AVX-512");
  }
  for (const auto* a : {&q, &k, &v}) {
    require_float32(*a, "segment_attention");
    if (a->ndim() != 4 || a->shape(0) != 1) {
      throw std::invalid_argument("segment_attention: q, k and v are [1, heads, tokens, dim]");
    }
  }
  int H = q.shape(1), N = q.shape(2), Dv = v.shape(3);
  if (k.shape(1) != H || v.shape(1) != H || k.shape(2) != N || v.shape(2) != N || k.shape(3) != q.shape(3)) {
    throw std::invalid_argument("segment_attention: q, k and v need the same heads and tokens, q and k the same dim");
  }
  if (Dv % 32 != 0 || !(scale > 0.0f)) {
    throw std::invalid_argument("segment_attention: the value dim is a multiple of 32 and the scale positive");
  }
  if (segments.dtype() != mx::int32 || segments.ndim() != 1 || segments.size() < 2) {
    throw std::invalid_argument("segment_attention: segments are int32 starts and the end");
  }
  mx::array seg = mx::contiguous(segments);
  seg.eval();
  const int32_t* p = seg.data<int32_t>();
  bool covers = p[0] == 0 && p[seg.size() - 1] == N;
  for (size_t i = 0; covers && i + 1 < seg.size(); ++i) {
    covers = p[i + 1] > p[i];
  }
  if (!covers) {
    throw std::invalid_argument("segment_attention: segments rise strictly from 0 to the token count");
  }
  return mx::array({1, N, H * Dv}, mx::float32, std::make_shared<SegmentAttention>(mx::to_stream(s), scale),
                   {q, k, v, seg});
}

} // namespace mlxk
