// Two ways to score a block, one online softmax and one values product:
// * many rows (prefill): the block's queries transposed once ([D][rows]), so a
//   score tile is keys x rows with the rows in SIMD lanes and every key element
//   broadcast (no transposed copy of the keys);
// * few rows (decode): each key row dotted with each query row along D.
#include "attention_kernel.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "attention_values.h"
#include "quant_codes.h"
#include "quantized.h"
#include "simd.h"

namespace mlxk {

namespace {

constexpr int kNR = 2;                 // row vectors per block (lanes kernel)
constexpr int kRows = kNR * kW;        // rows per block
constexpr int kKB = 64;                // keys per block
constexpr int kMK = kW >= 16 ? 8 : 4;  // keys per score tile (lanes kernel)
constexpr int kDotRows = 8;            // blocks of at most this many rows use dot

inline int round_up(int n, int m) {
  return (n + m - 1) / m * m;
}

struct Scratch {
  std::vector<float> q, s, m, l, corr, corr2, kpack, vpack;
};
thread_local Scratch tl;

// Scores of keys x rows: st[j * kRows + row] = sum_d k[j][d] * qt[d][row].
void lanes_scores(const float* qt, int D, const float* k, int64_t kstride, int nk, float* st) {
  for (int jt = 0; jt < nk; jt += kMK) {
    int nj = std::min(kMK, nk - jt);
    const float* kr[kMK];
    for (int jj = 0; jj < kMK; ++jj) {
      kr[jj] = k + (jt + std::min(jj, nj - 1)) * kstride;
    }
    vf acc[kMK][kNR];
    for (int jj = 0; jj < kMK; ++jj) {
      for (int c = 0; c < kNR; ++c) {
        acc[jj][c] = splat(0.0f);
      }
    }
    for (int d = 0; d < D; ++d) {
      vf qv[kNR];
      for (int c = 0; c < kNR; ++c) {
        qv[c] = load(qt + d * kRows + c * kW);
      }
      for (int jj = 0; jj < kMK; ++jj) {
        float kd = kr[jj][d];
        for (int c = 0; c < kNR; ++c) {
          acc[jj][c] += kd * qv[c];
        }
      }
    }
    for (int jj = 0; jj < nj; ++jj) {
      for (int c = 0; c < kNR; ++c) {
        store(st + (jt + jj) * kRows + c * kW, acc[jj][c]);
      }
    }
  }
}

#if defined(__AVX512F__)
// The sums of 16 vectors, v[j]'s in lane j: pairs, then fours within 128-bit blocks, then
// across blocks (15 adds where 16 horizontal sums take 64).
inline __m512 sums16(const __m512* v) {
  __m512 t[8], u[4];
  for (int i = 0; i < 8; ++i) {
    t[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  }
  for (int i = 0; i < 4; ++i) {
    u[i] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * i], t[2 * i + 1], 0x44),
                         _mm512_shuffle_ps(t[2 * i], t[2 * i + 1], 0xEE));
  }
  const __m512 x01 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x44), _mm512_shuffle_f32x4(u[0], u[1], 0xEE));
  const __m512 x23 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x44), _mm512_shuffle_f32x4(u[2], u[3], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_f32x4(x01, x23, 0x88), _mm512_shuffle_f32x4(x01, x23, 0xDD));
}
#endif

// Scores of rows x keys: s[r * kKB + j] = q[r] . k[j] (q rows padded to nv vectors).
void dot_scores(const float* q, int nrows, int nv, const float* k, int64_t kstride, int nk,
                float* s) {
  int j0 = 0;
#if defined(__AVX512F__)
  for (; j0 + 16 <= nk; j0 += 16) {  // 16 keys a row at a time, their dots summed together
    for (int r = 0; r < nrows; ++r) {
      const float* qr = q + r * nv * kW;
      __m512 acc[16];
      for (int j = 0; j < 16; ++j) {
        const float* kr = k + (j0 + j) * kstride;
        acc[j] = _mm512_mul_ps(_mm512_loadu_ps(qr), _mm512_loadu_ps(kr));
        for (int c = 1; c < nv; ++c) {
          acc[j] = _mm512_fmadd_ps(_mm512_loadu_ps(qr + c * kW), _mm512_loadu_ps(kr + c * kW), acc[j]);
        }
      }
      _mm512_storeu_ps(s + r * kKB + j0, sums16(acc));
    }
  }
#endif
  for (int j = j0; j < nk; ++j) {
    const float* kr = k + j * kstride;
    for (int r = 0; r < nrows; ++r) {
      const float* qr = q + r * nv * kW;
      vf a = load(qr) * load(kr);
      for (int c = 1; c < nv; ++c) {
        a += load(qr + c * kW) * load(kr + c * kW);
      }
      s[r * kKB + j] = hsum(a);
    }
  }
}

// Online softmax step, rows in lanes: st becomes exp(score - new max).
void lanes_softmax(float* st, int nk, float* m, float* l, float* corr) {
  for (int c = 0; c < kNR; ++c) {
    vf mo = load(m + c * kW);
    vf mn = mo;
    for (int j = 0; j < nk; ++j) {
      mn = vmax(mn, load(st + j * kRows + c * kW));
    }
    vf mu = mn == kNegInf ? splat(0.0f) : mn;
    vf sum = splat(0.0f);
    for (int j = 0; j < nk; ++j) {
      float* p = st + j * kRows + c * kW;
      vf e = vexp(load(p) - mu);
      store(p, e);
      sum += e;
    }
    vf cr = vexp(mo - mu);
    store(l + c * kW, load(l + c * kW) * cr + sum);
    store(m + c * kW, mn);
    store(corr + c * kW, cr);
  }
}

// Online softmax step, keys in lanes (s padded with -inf to a multiple of kW).
void rows_softmax(float* s, int nrows, int nk, float* m, float* l, float* corr) {
  int nkp = round_up(nk, kW);
  for (int r = 0; r < nrows; ++r) {
    float* row = s + r * kKB;
    vf mv = splat(kNegInf);
    for (int j = 0; j < nkp; j += kW) {
      mv = vmax(mv, load(row + j));
    }
    float mn = std::max(m[r], hmax(mv));
    float mu = mn == kNegInf ? 0.0f : mn;
    vf sum = splat(0.0f);
    for (int j = 0; j < nkp; j += kW) {
      vf e = vexp(load(row + j) - mu);
      store(row + j, e);
      sum += e;
    }
    corr[r] = m[r] == kNegInf ? 0.0f : std::exp(m[r] - mu);
    l[r] = l[r] * corr[r] + hsum(sum);
    m[r] = mn;
  }
}

// Causal/window ranges and the array mask, for keys [k0, k0 + nk).
void apply_masks(const AttnProblem& p, const RowBlock& blk, float* sc, int64_t rs, int64_t js,
                 int nrows, int k0, int nk) {
  bool array = p.mask_bool || p.mask_add;
  if (!array && k0 >= p.key_lo(blk.i1 - 1) && k0 + nk <= p.key_hi(blk.i0)) {
    return;  // every row sees every key of the block
  }
  for (int r = 0; r < nrows; ++r) {
    int i = blk.i0 + r;
    int lo = p.key_lo(i), hi = p.key_hi(i);
    int64_t off = blk.b * p.ms[0] + p.row_head(blk.hk, i) * p.ms[1] + p.row_pos(i) * p.ms[2];
    for (int j = 0; j < nk; ++j) {
      int key = k0 + j;
      float& x = sc[r * rs + j * js];
      if (key < lo || key >= hi) {
        x = kNegInf;
      } else if (p.mask_bool) {
        x = p.mask_bool[off + key * p.ms[3]] ? x : kNegInf;
      } else if (p.mask_add) {
        x += p.mask_add[off + key * p.ms[3]];
      }
    }
  }
}

// Rows of k or v for keys [k0, k0 + nk), padded to whole vectors when needed.
const float* key_rows(const float* base, int64_t stride, int dim, int k0, int nk,
                      std::vector<float>& pack, int64_t& out_stride) {
  const float* first = base + k0 * stride;
  if (dim % kW == 0) {
    out_stride = stride;
    return first;
  }
  int dp = round_up(dim, kW);
  float* dst = grown(pack, size_t(nk) * dp);
  for (int j = 0; j < nk; ++j) {
    std::copy(first + j * stride, first + j * stride + dim, dst + j * dp);
    std::fill(dst + j * dp + dim, dst + (j + 1) * dp, 0.0f);
  }
  out_stride = dp;
  return dst;
}

// Rows [k0, k0 + nk) of quantized keys or values of (b, h), dequantized (dim a
// multiple of kW: no padding).
const float* quant_rows(const AttnProblem& p, const QuantRows& q, int b, int h, int dim, int k0, int nk,
                        std::vector<float>& pack, int64_t& out_stride) {
  float* dst = grown(pack, size_t(nk) * dim);
  for (int j = 0; j < nk; ++j) {
    const int64_t t = k0 + j;
    QMat m{q.codes + b * q.cs[0] + h * q.cs[1] + t * q.cs[2], q.scales + b * q.ss[0] + h * q.ss[1] + t * q.ss[2],
           q.biases + b * q.bs[0] + h * q.bs[1] + t * q.bs[2], 1, dim, p.group, p.bits};
    dequantize_rows(m, dst + int64_t(j) * dim, 0, 1);
  }
  out_stride = dim;
  return dst;
}

// Scores of rows x quantized keys, without a dequantized copy: each vector of codes is
// widened and scaled once for all the rows, q . (scale c + bias) = q . (scale c) +
// bias sum(q over the group); `qsum` holds those sums (rows x groups).
void quant_dot_scores(const AttnProblem& p, const QuantRows& qk, int b, int h, const float* q, int nrows,
                      const float* qsum, int k0, int nk, float* s) {
  const int D = p.D, G = D / p.group, nv = D / kW;
  const uint8_t* codes = qk.codes + b * qk.cs[0] + h * qk.cs[1] + k0 * qk.cs[2];
  const float* scales = qk.scales + b * qk.ss[0] + h * qk.ss[1] + k0 * qk.ss[2];
  const float* biases = qk.biases + b * qk.bs[0] + h * qk.bs[1] + k0 * qk.bs[2];
  for (int j = 0; j < nk; ++j) {
    const uint8_t* cr = codes + j * qk.cs[2];
    const float* sc = scales + j * qk.ss[2];
    const float* bi = biases + j * qk.bs[2];
    vf acc[kDotRows];
    for (int r = 0; r < nrows; ++r) {
      acc[r] = splat(0.0f);
    }
    for (int c = 0; c < nv; ++c) {
      vf x = quant::codes(cr, c * kW, p.bits) * splat(sc[c * kW / p.group]);
      for (int r = 0; r < nrows; ++r) {
        acc[r] += load(q + r * D + c * kW) * x;
      }
    }
    for (int r = 0; r < nrows; ++r) {
      float bias = 0.0f;
      for (int g = 0; g < G; ++g) {
        bias += bi[g] * qsum[r * G + g];
      }
      s[r * kKB + j] = hsum(acc[r]) + bias;
    }
  }
}

const float* query_row(const AttnProblem& p, const RowBlock& blk, int i) {
  return p.q + blk.b * p.qs[0] + p.row_head(blk.hk, i) * p.qs[1] + p.row_pos(i) * p.qs[2];
}

} // namespace

int attention_block_rows() {
  return kRows;
}

void attend_block(const AttnProblem& p, const RowBlock& blk, const Partial& out) {
  int R = blk.i1 - blk.i0;
  int dvp = round_up(p.Dv, kW), dp = round_up(p.D, kW);
  float* m = grown(tl.m, kRows);
  float* l = grown(tl.l, kRows);
  float* corr = grown(tl.corr, kRows);
  std::fill(m, m + kRows, kNegInf);
  std::fill(l, l + kRows, 0.0f);
  for (int r = 0; r < R; ++r) {
    std::fill(out.acc + r * out.stride, out.acc + r * out.stride + dvp, 0.0f);
  }
  int lo = std::max(blk.s0, p.key_lo(blk.i0));
  int hi = std::min(blk.s1, p.key_hi(blk.i1 - 1));
  bool dot = R <= kDotRows;
  float* q = grown(tl.q, size_t(dot ? kDotRows * dp : p.D * kRows));
  float* s = grown(tl.s, size_t(kRows) * kKB);
  std::fill(q, q + (dot ? kDotRows * dp : p.D * kRows), 0.0f);
  for (int r = 0; r < R; ++r) {
    const float* qr = query_row(p, blk, blk.i0 + r);
    for (int d = 0; d < p.D; ++d) {
      (dot ? q[r * dp + d] : q[d * kRows + r]) = qr[d] * p.scale;
    }
  }
  std::vector<float>& qsum_buf = tl.corr2;
  if (p.bits && dot) {  // per row and group: the sum of the (scaled) query, for the biases
    const int G = p.D / p.group;
    qsum_buf.assign(size_t(R) * G, 0.0f);
    for (int r = 0; r < R; ++r) {
      for (int d = 0; d < p.D; ++d) {
        qsum_buf[r * G + d / p.group] += q[r * dp + d];
      }
    }
  }
  const int64_t kbase = blk.b * p.ks[0] + blk.hk * p.ks[1];
  const int64_t vbase = blk.b * p.vs[0] + blk.hk * p.vs[1];
  attention_values::PvFn pv = attention_values::pv_for(dvp / kW);
  for (int k0 = lo; k0 < hi; k0 += kKB) {
    int nk = std::min(kKB, hi - k0);
    int64_t vstride;
    const float* vr = p.bits ? quant_rows(p, p.vq, blk.b, blk.hk, p.Dv, k0, nk, tl.vpack, vstride)
                             : key_rows(p.v + vbase, p.vs[2], p.Dv, k0, nk, tl.vpack, vstride);
    if (dot) {
      for (int r = 0; r < R; ++r) {
        std::fill(s + r * kKB + nk, s + (r + 1) * kKB, kNegInf);
      }
      if (p.bits) {
        quant_dot_scores(p, p.kq, blk.b, blk.hk, q, R, qsum_buf.data(), k0, nk, s);
      } else {
        int64_t kstride;
        const float* kr = key_rows(p.k + kbase, p.ks[2], p.D, k0, nk, tl.kpack, kstride);
        dot_scores(q, R, dp / kW, kr, kstride, nk, s);
      }
      apply_masks(p, blk, s, kKB, 1, R, k0, nk);
      rows_softmax(s, R, nk, m, l, corr);
      pv(out.acc, out.stride, s, kKB, 1, corr, R, vr, vstride, nk, dvp / kW);
    } else {
      if (p.bits) {
        int64_t kstride;
        const float* kr = quant_rows(p, p.kq, blk.b, blk.hk, p.D, k0, nk, tl.kpack, kstride);
        lanes_scores(q, p.D, kr, kstride, nk, s);
      } else {
        lanes_scores(q, p.D, p.k + kbase + k0 * p.ks[2], p.ks[2], nk, s);
      }
      apply_masks(p, blk, s, 1, kRows, R, k0, nk);
      lanes_softmax(s, nk, m, l, corr);
      pv(out.acc, out.stride, s, 1, kRows, corr, R, vr, vstride, nk, dvp / kW);
    }
  }
  std::copy(m, m + R, out.m);
  std::copy(l, l + R, out.l);
}

} // namespace mlxk
