// Matrix-vector products straight from MLX's affine-quantized weights (8, 6, 5 or 4 bits,
// groups along K): w[n][k] = scale[n][g] * q[n][k] + bias[n][g]. Per row n,
//   y[n] = sum_g scale[n][g] * (x_g . q_g) + bias[n][g] * sum(x_g),
// so a weight is read once as bytes and turned into floats in registers, for up
// to kMaxRows input rows at a time. 4-bit weights pack element 2t of a byte pair
// in the low nibble: x is split into even and odd elements once, so the nibbles
// need no shuffling; 5- and 6-bit codes are unpacked in registers (quant_codes.h).
#include <vector>

#include "arrays.h"
#include "int_matvec.h"
#include "quantized.h"
#include "parallel.h"
#include "primitives.h"
#include "product.h"
#include "quant_codes.h"
#include "simd.h"

namespace mlxk {

namespace {

constexpr int kMaxRows = 4;
constexpr int kTiledRows = 12;  // more rows than this: tiles through the BLAS
constexpr int kSliceBytes = 16 << 10;  // weight bytes a slice keeps in cache for every input row
constexpr int kAheadBytes = 2048;  // how far ahead of the weights in use they are prefetched

// kW bytes as kW floats, and kW bytes as their low and high nibbles. Written with
// intrinsics where they exist: GCC lowers a widening __builtin_convertvector from
// bytes to one scalar move per lane, which made these kernels compute-bound.
#if defined(__AVX512F__)
inline vf widen(__m128i b) {
  return (vf)_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
}
inline __m128i load_bytes(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
#elif defined(__AVX2__)
inline vf widen(__m128i b) {
  return (vf)_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
}
inline __m128i load_bytes(const uint8_t* p) {
  return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
}
#endif

inline vf bytes_to_float(const uint8_t* p) {
#if defined(__AVX512F__) || defined(__AVX2__)
  return widen(load_bytes(p));
#else
  vf v;
  for (int i = 0; i < kW; ++i) {
    v[i] = float(p[i]);
  }
  return v;
#endif
}

inline void nibbles_to_float(const uint8_t* p, vf& lo, vf& hi) {
#if defined(__AVX512F__) || defined(__AVX2__)
  __m128i b = load_bytes(p), mask = _mm_set1_epi8(0x0F);
  lo = widen(_mm_and_si128(b, mask));
  hi = widen(_mm_and_si128(_mm_srli_epi16(b, 4), mask));
#else
  for (int i = 0; i < kW; ++i) {
    lo[i] = float(p[i] & 0xF);
    hi[i] = float(p[i] >> 4);
  }
#endif
}

// Rows m of x as the kernels read them: for 4 bits, even then odd elements of
// each group; for 5 and 6 bits, scaled to meet codes read unshifted; per group
// sums (of x as given) for the bias term.
struct XPrep {
  std::vector<float> x, sums;
  XPrep(const float* x_in, int64_t stride, int rows, const QMat& w)
      : x(size_t(rows) * w.K), sums(size_t(rows) * w.groups()) {
    int g = w.group, half = g / 2;
    for (int m = 0; m < rows; ++m) {
      const float* xr = x_in + m * stride;
      float* out = x.data() + size_t(m) * w.K;
      for (int gi = 0; gi < w.groups(); ++gi) {
        const float* src = xr + gi * g;
        float s = 0.0f;
        for (int t = 0; t < g; ++t) {
          s += src[t];
          if (w.bits == 4) {
            out[gi * g + (t & 1) * half + t / 2] = src[t];
          } else if (w.bits == 5 || w.bits == 6) {
            out[gi * g + t] = src[t] * quant::unshift(gi * g + t, w.bits);
          } else {
            out[gi * g + t] = src[t];
          }
        }
        sums[size_t(m) * w.groups() + gi] = s;
      }
    }
  }
};

// Where the outputs go and what is added to them (bias [N], residual rows).
struct Out {
  float* y;
  const float* bias;
  const float* res;
  int64_t rs;
  int64_t ys;  // y's row stride
};

// Outputs [n0, n0 + NB) for input rows [m0, m0 + R): NB x R independent
// accumulator chains, so the FMAs do not wait on each other's latency.
template <int BITS, int R, int NB>
void block_kernel(const QMat& w, const XPrep& xp, int m0, int n0, const Out& o) {
  const int G = w.group, ng = w.groups();
  const int K = w.K;
  vf total[NB][R];
  const uint8_t* rows[NB];
  for (int j = 0; j < NB; ++j) {
    rows[j] = w.w + (n0 + j) * w.row_bytes();
    for (int r = 0; r < R; ++r) {
      total[j][r] = splat(0.0f);
    }
  }
  for (int gi = 0; gi < ng; ++gi) {
    vf acc[NB][R];
    for (int j = 0; j < NB; ++j) {
      for (int r = 0; r < R; ++r) {
        acc[j][r] = splat(0.0f);
      }
    }
    const float* xg = xp.x.data() + size_t(m0) * K + gi * G;
    for (int j = 0; j < NB; ++j) {  // weights stream from memory (rows run contiguous): ask ahead of use
      const uint8_t* ahead = rows[j] + gi * G * BITS / 8 + kAheadBytes;
      for (int c = 0; c < G * BITS / 8; c += 64) {
        __builtin_prefetch(ahead + c);
      }
    }
    if constexpr (BITS != 4) {
      for (int t = 0; t < G; t += kW) {
        vf xv[R];
        for (int r = 0; r < R; ++r) {
          xv[r] = load(xg + size_t(r) * K + t);
        }
        for (int j = 0; j < NB; ++j) {
          vf wf;
          if constexpr (BITS == 8) {
            wf = bytes_to_float(rows[j] + gi * G + t);
          } else {
            wf = quant::unshifted_codes<BITS>(rows[j], gi * G + t);
          }
          for (int r = 0; r < R; ++r) {
            acc[j][r] += wf * xv[r];
          }
        }
      }
    } else {
      const int half = G / 2;
      for (int t = 0; t < half; t += kW) {
        vf xl[R], xh[R];
        for (int r = 0; r < R; ++r) {
          xl[r] = load(xg + size_t(r) * K + t);
          xh[r] = load(xg + size_t(r) * K + half + t);
        }
        for (int j = 0; j < NB; ++j) {
          vf lo, hi;
          nibbles_to_float(rows[j] + gi * half + t, lo, hi);
          for (int r = 0; r < R; ++r) {
            acc[j][r] += lo * xl[r] + hi * xh[r];
          }
        }
      }
    }
    for (int j = 0; j < NB; ++j) {
      const float sc = w.scale(int64_t(n0 + j) * ng + gi);
      for (int r = 0; r < R; ++r) {
        total[j][r] += sc * acc[j][r];
      }
    }
  }
  for (int j = 0; j < NB; ++j) {
    for (int r = 0; r < R; ++r) {
      const float* res = o.res ? o.res + (m0 + r) * o.rs : nullptr;
      const float bias = w.bias_dot(n0 + j, xp.sums.data() + size_t(m0 + r) * ng);
      o.y[int64_t(m0 + r) * o.ys + n0 + j] = finish(hsum(total[j][r]) + bias, o.bias, res, n0 + j);
    }
  }
}

// Outputs [n0, n1) for input rows [m0, m0 + R): four at a time, then one by one.
template <int BITS, int R>
void rows_kernel(const QMat& w, const XPrep& xp, int m0, int n0, int n1, const Out& o) {
  constexpr int NB = R <= 2 ? 4 : 2;
  int n = n0;
  for (; n + NB <= n1; n += NB) {
    block_kernel<BITS, R, NB>(w, xp, m0, n, o);
  }
  for (; n < n1; ++n) {
    block_kernel<BITS, R, 1>(w, xp, m0, n, o);
  }
}

// Every input row against the weights a slice of rows at a time: the slice's bytes come
// from memory once and stay in cache for each block of kMaxRows input rows. A row's
// arithmetic is the same whatever else shares the call, so its outputs do not depend on
// the row count up to kTiledRows.
template <int BITS>
void qmv(const QMat& w, const XPrep& xp, int rows, const Out& o) {
  int64_t grain = std::max<int64_t>(16, (1 << 16) / std::max(1, w.K));
  const int slice = rows <= kMaxRows ? w.N : std::max(4, int(kSliceBytes * 8 / (int64_t(w.K) * BITS)) / 4 * 4);
  parallel_for(w.N, grain, [&](int64_t a, int64_t b) {
    for (int n0 = int(a); n0 < int(b); n0 += slice) {
      const int n1 = std::min(int(b), n0 + slice);
      for (int m = 0; m < rows; m += kMaxRows) {
        switch (std::min(kMaxRows, rows - m)) {
          case 1: rows_kernel<BITS, 1>(w, xp, m, n0, n1, o); break;
          case 2: rows_kernel<BITS, 2>(w, xp, m, n0, n1, o); break;
          case 3: rows_kernel<BITS, 3>(w, xp, m, n0, n1, o); break;
          default: rows_kernel<BITS, 4>(w, xp, m, n0, n1, o); break;
        }
      }
    }
  });
}

// More rows than a matvec pass takes: each thread takes a range of weight rows and, a
// tile at a time, dequantizes it into its own buffer (kept in its core's cache) and
// multiplies it by all of x through the BLAS (single-threaded inside the threads' region),
// so the codes are converted once per call and no tile crosses cores.
void tiled(const QMat& w, const float* x, int64_t xs, int rows, const Out& o) {
  const int T = std::max(16, (1 << 16) / std::max(1, w.K) / 16 * 16);  // ~256 KiB of floats
  float beta = 0.0f;
  if (o.bias || o.res) {
    beta = 1.0f;
    for (int m = 0; m < rows; ++m) {
      for (int n = 0; n < w.N; ++n) {
        o.y[int64_t(m) * o.ys + n] = (o.bias ? o.bias[n] : 0.0f) + (o.res ? o.res[m * o.rs + n] : 0.0f);
      }
    }
  }
  parallel_for(w.N, 16, [&](int64_t a, int64_t b) {
    static thread_local std::vector<float> store;
    float* tile = grown(store, size_t(T) * w.K);
    for (int64_t n0 = a; n0 < b; n0 += T) {
      const int n1 = int(std::min<int64_t>(b, n0 + T));
      dequantize_rows(w, tile, n0, n1);
      sgemm_nt(rows, n1 - int(n0), w.K, x, int(xs), tile, w.K, beta, o.y + n0, int(o.ys));
    }
  });
}

} // namespace

void quantized_rows(const QMat& w, const float* x, int64_t xs, int rows, float* y, int64_t ys, const float* bias,
                    const float* res, int64_t rs) {
  Out o{y, bias, res, rs, ys};
  if (rows > kTiledRows && blas_available()) {
    tiled(w, x, xs, rows, o);
    return;
  }
  if (rows == 1 && int_matvec_enabled() && int_matvec(w, x, y, bias, res)) {
    return;
  }
  XPrep prep(x, xs, rows, w);
  switch (w.bits) {
    case 8: qmv<8>(w, prep, rows, o); break;
    case 6: qmv<6>(w, prep, rows, o); break;
    case 5: qmv<5>(w, prep, rows, o); break;
    default: qmv<4>(w, prep, rows, o); break;
  }
}

void QuantizedMatmul::eval_cpu(const std::vector<mx::array>& inputs,
                               std::vector<mx::array>& outputs) {
  auto& out = outputs[0];
  auto& enc = encoder(stream(), inputs, outputs);
  for (int i = 1; i < 4; ++i) {
    if (!inputs[i].flags().row_contiguous) {
      throw std::invalid_argument("quantized_matmul: weights must be row-contiguous");
    }
  }
  enc.dispatch([x = Rows(inputs[0]), extra = RowOpsInputs(inputs, 4, ops_), ops = ops_,
                w = qmat(inputs, group_size_, bits_), y = out.data<float>()]() {
    std::vector<float> raw, buffer, rb;
    int64_t stride, rs = 0;
    const float* xp = prologue_rows(x, ops.prologue, extra.norm, ops.eps, w.K, raw, buffer, stride);
    const float* res = ops.has_residual ? extra.residual.materialize(rb, rs) : nullptr;
    quantized_rows(w, xp, stride, int(x.rows), y, w.N, extra.bias, res, rs);
  });
}

bool QuantizedMatmul::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const QuantizedMatmul&>(other);
  return group_size_ == o.group_size_ && bits_ == o.bits_ && ops_ == o.ops_;
}

mx::array quantized_matmul(const mx::array& x, const mx::array& w, const mx::array& scales,
                           const mx::array& biases, int group_size, int bits, RowOps ops,
                           const std::optional<mx::array>& bias, const std::optional<mx::array>& residual,
                           const std::optional<mx::array>& norm, mx::StreamOrDevice s) {
  check_quantized(w, scales, biases, group_size, bits);
  require_float32(x, "quantized_matmul");
  int K = w.shape(1) * 32 / bits;
  int in = ops.prologue == Prologue::silu_gate_halves ? 2 * K : K;
  if (x.ndim() < 1 || x.shape(-1) != in) {
    throw std::invalid_argument("quantized_matmul: x's last axis must equal K (2K for silu_gate_halves)");
  }
  mx::Shape shape = x.shape();
  shape.back() = w.shape(0);
  std::vector<mx::array> inputs = {x, w, scales, biases};
  push_row_ops(inputs, ops, shape, K, bias, residual, norm, "quantized_matmul");
  auto prim = std::make_shared<QuantizedMatmul>(mx::to_stream(s), group_size, bits, ops);
  return mx::array(shape, mx::float32, prim, inputs);
}

} // namespace mlxk
