// The integer-dot matvec (int_matvec.h) where the CPU has AVX2 but not AVX-512 VNNI, for
// 4-bit codes: the AVX-512 path's limbs, chunks and lanes, each 64-byte chunk of codes taken
// as two 32-byte halves. vpmaddubsw pairs two codes with two limbs in 16 bits (2 * 15 * 127
// fits), the low and high nibbles' pairs add in 16 bits, and vpmaddwd sums them into the
// 32-bit lanes vpdpbusd gives there: four low and four high products each. 8-bit codes
// (2 * 255 * 127 does not fit 16 bits) and 5- and 6-bit ones stay on the float kernel.
#include "int_matvec.h"

#if MLXK_INT_MATVEC_AVX2

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "parallel.h"
#include "rowops.h"

namespace mlxk {

bool int_matvec_built() {
  return true;
}

namespace {

constexpr int kBlock = 32;      // values sharing a limb scale u
constexpr int kChunk = 64;      // code bytes of a chunk (128 values), and limb bytes per nibble half
constexpr int kPerChunk = 128;  // values per chunk
constexpr int kSpan = 2 * kChunk;  // limb bytes per chunk and limb: the even values, then the odd ones
constexpr int kAheadBytes = 2048;  // rows run contiguous: the bytes this far on are asked for ahead of use

// 8 floats holding integers in [-127, 127] as 8 signed bytes at `at`.
inline void store_bytes(int8_t* at, __m256 v) {
  const __m256i i = _mm256_cvtps_epi32(v);
  const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(at), _mm_packs_epi16(words, words));
}

// The three limbs of 8 values v (= x / u), as the AVX-512 path makes them: each the nearest
// integer (ties to even) within [-127, 127], a clamped limb's excess going to the next.
inline void limb_bytes(__m256 v, int8_t* a_at, int8_t* b_at, int8_t* c_at) {
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f), radix = _mm256_set1_ps(128.0f);
  const auto nearest = [&](__m256 t) {
    return _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
  };
  const __m256 a = nearest(v), r = _mm256_mul_ps(_mm256_sub_ps(v, a), radix);
  const __m256 b = nearest(r), c = nearest(_mm256_mul_ps(_mm256_sub_ps(r, b), radix));
  store_bytes(a_at, a);
  store_bytes(b_at, b);
  store_bytes(c_at, c);
}

inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// x as limbs in the codes' order: per chunk and limb the 64 even values' bytes, then the 64
// odd ones'; per chunk and lane (8 values each) the factor u / 2^14 of the lane's block (0
// past K); per weight group the sum of x. Held in the calling thread's scratch.
struct Limbs {
  int chunks;
  int8_t* bytes;  // chunks * 3 * kSpan
  float* factor;  // chunks * 16
  float* sums;    // w.groups()

  Limbs(const QMat& w, const float* x) {
    static thread_local std::vector<int8_t> byte_store;
    static thread_local std::vector<float> factor_store, sum_store;
    chunks = (w.K + kPerChunk - 1) / kPerChunk;
    bytes = grown(byte_store, size_t(chunks) * 3 * kSpan);
    factor = grown(factor_store, size_t(chunks) * 16);
    sums = grown(sum_store, size_t(w.groups()));
    std::memset(bytes, 0, size_t(chunks) * 3 * kSpan);
    std::memset(factor, 0, size_t(chunks) * 16 * sizeof(float));
    for (int g = 0; g < w.groups(); ++g) {  // groups are multiples of 32 values
      __m256 s = _mm256_setzero_ps();
      for (int t = 0; t < w.group; t += 8) {
        s = _mm256_add_ps(s, _mm256_loadu_ps(x + g * w.group + t));
      }
      sums[g] = hsum(s);
    }
    alignas(32) float even[16], odd[16];
    for (int blk = 0; blk < w.K / kBlock; ++blk) {
      const float* xb = x + blk * kBlock;
      float m = 0.0f;
      for (int i = 0; i < kBlock; ++i) {
        m = std::fmax(m, std::fabs(xb[i]));
      }
      int e = 0;
      std::frexp(m, &e);  // m < 2^e
      const float u = m > 0.0f ? std::ldexp(1.0f, e - 7) : 0.0f;  // |x / u| < 128
      if (u == 0.0f) {
        continue;  // limbs and factors stay 0
      }
      for (int i = 0; i < 16; ++i) {
        even[i] = xb[2 * i];
        odd[i] = xb[2 * i + 1];
      }
      const int k = blk * kBlock, chunk = k / kPerChunk, at = (k % kPerChunk) / 2;
      int8_t* base = bytes + size_t(chunk) * 3 * kSpan;
      const __m256 vu = _mm256_set1_ps(u);
      for (int h = 0; h < 16; h += 8) {
        limb_bytes(_mm256_div_ps(_mm256_load_ps(even + h), vu), base + at + h, base + kSpan + at + h,
                   base + 2 * kSpan + at + h);
        limb_bytes(_mm256_div_ps(_mm256_load_ps(odd + h), vu), base + kChunk + at + h,
                   base + kSpan + kChunk + at + h, base + 2 * kSpan + kChunk + at + h);
      }
      for (int j = at / 4; j < (at + kBlock / 2) / 4; ++j) {  // a lane: 4 code bytes, 8 values
        factor[size_t(chunk) * 16 + j] = std::ldexp(u, -14);
      }
    }
  }
  const int8_t* limb(int chunk, int which, int odd) const {
    return bytes + (size_t(chunk) * 3 + which) * kSpan + odd * kChunk;
  }
};

// The group scales of a chunk's lanes: lane l (of 16, two halves of 8) reads group first[c] +
// l * 8 / group of a row, worked out once per call.
struct ScaleLanes {
  __m256i idx[2];
  int* first;  // in the calling thread's scratch, as Limbs
  int* valid;
  ScaleLanes(const QMat& w, int chunks) {
    static thread_local std::vector<int> first_store, valid_store;
    first = grown(first_store, size_t(chunks));
    valid = grown(valid_store, size_t(chunks));
    const int spans = std::max(1, kPerChunk / w.group);  // groups a chunk spans (1: a group spans it)
    alignas(32) int32_t lanes[16];
    for (int l = 0; l < 16; ++l) {
      lanes[l] = spans > 1 ? l * 8 / w.group : 0;
    }
    idx[0] = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes));
    idx[1] = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes + 8));
    for (int c = 0; c < chunks; ++c) {
      first[c] = int(int64_t(c) * kPerChunk / w.group);
      valid[c] = std::min(spans, w.groups() - first[c]);
    }
  }
  // The chunk's (up to four) group scales of row n, as a vector whose lanes idx picks from.
  __m256 at(const QMat& w, int64_t n, int c) const {
    const int64_t i = n * w.groups() + first[c];
    const uint16_t* h = reinterpret_cast<const uint16_t*>(w.scales) + i;
    __m128 s;
    switch (valid[c]) {  // vector loads of exactly the scales in use
      case 4:
        s = w.half16 ? _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(h))) : _mm_loadu_ps(w.scales + i);
        break;
      case 2: {
        int32_t two;
        std::memcpy(&two, h, 4);
        s = w.half16 ? _mm_cvtph_ps(_mm_cvtsi32_si128(two))
                     : _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(w.scales + i)));
        break;
      }
      case 1:
        s = _mm_set1_ps(w.scale(i));
        break;
      default:
        s = _mm_setr_ps(w.scale(i), w.scale(i + 1), w.scale(i + 2), 0.0f);
    }
    return _mm256_castps128_ps256(s);
  }
};

// total + the lanes of sum over g of bias(n, g) * sums[g] (the bias term of output n).
inline __m256 add_bias_term(const QMat& w, int64_t n, const float* sums, __m256 total) {
  const int ng = w.groups();
  int g = 0;
  for (; g + 8 <= ng; g += 8) {
    total = _mm256_fmadd_ps((__m256)w.biases_at(n * ng + g), _mm256_loadu_ps(sums + g), total);
  }
  if (g < ng) {
    alignas(32) float b[8] = {}, s[8] = {};
    for (int i = 0; g + i < ng; ++i) {
      b[i] = w.bias(n * ng + g + i);
      s[i] = sums[g + i];
    }
    total = _mm256_fmadd_ps(_mm256_load_ps(b), _mm256_load_ps(s), total);
  }
  return total;
}

// The 32-bit lanes of 32 code bytes against the even (lo) and odd (hi) limb bytes.
inline __m256i lane_dot(__m256i lo, __m256i hi, const int8_t* even, const int8_t* odd) {
  const __m256i pairs = _mm256_add_epi16(
      _mm256_maddubs_epi16(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(even))),
      _mm256_maddubs_epi16(hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(odd))));
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

template <int NB>
void rows(const QMat& w, const Limbs& xl, const ScaleLanes& sl, int64_t n0, float* y, const float* bias,
          const float* res) {
  const int64_t rb = w.row_bytes();
  const int last = xl.chunks - 1;
  const int64_t tail_bytes = rb - int64_t(last) * kChunk;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  alignas(32) uint8_t tail[NB][kChunk];  // the last chunk's bytes, zero past the row
  __m256 total[NB][2];
  const uint8_t* row[NB];
  for (int j = 0; j < NB; ++j) {
    total[j][0] = total[j][1] = _mm256_setzero_ps();
    row[j] = w.w + (n0 + j) * rb;
    std::memset(tail[j], 0, kChunk);
    std::memcpy(tail[j], row[j] + int64_t(last) * kChunk, size_t(tail_bytes));
  }
  for (int c = 0; c <= last; ++c) {
    for (int j = 0; j < NB; ++j) {
      const uint8_t* p = c < last ? row[j] + int64_t(c) * kChunk : tail[j];
      __builtin_prefetch(p + kAheadBytes);
      const __m256 scales = sl.at(w, n0 + j, c);
      for (int h = 0; h < 2; ++h) {
        const __m256i codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * h));
        const __m256i lo = _mm256_and_si256(codes, low4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(codes, 4), low4);
        const __m256i a = lane_dot(lo, hi, xl.limb(c, 0, 0) + 32 * h, xl.limb(c, 0, 1) + 32 * h);
        const __m256i b = lane_dot(lo, hi, xl.limb(c, 1, 0) + 32 * h, xl.limb(c, 1, 1) + 32 * h);
        const __m256i cc = lane_dot(lo, hi, xl.limb(c, 2, 0) + 32 * h, xl.limb(c, 2, 1) + 32 * h);
        const __m256i comb =
            _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(a, 14), _mm256_slli_epi32(b, 7)), cc);
        const __m256 scale = _mm256_mul_ps(_mm256_loadu_ps(xl.factor + size_t(c) * 16 + 8 * h),
                                           _mm256_permutevar8x32_ps(scales, sl.idx[h]));
        total[j][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(comb), scale, total[j][h]);
      }
    }
  }
  for (int j = 0; j < NB; ++j) {
    const __m256 t = add_bias_term(w, n0 + j, xl.sums, _mm256_add_ps(total[j][0], total[j][1]));
    y[n0 + j] = finish(hsum(t), bias, res, n0 + j);
  }
}

void run(const QMat& w, const Limbs& xl, float* y, const float* bias, const float* res) {
  const ScaleLanes sl(w, xl.chunks);
  const int64_t grain = std::max<int64_t>(16, (1 << 16) / std::max(1, w.K));
  parallel_for(w.N, grain, [&](int64_t n0, int64_t n1) {
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4) {
      rows<4>(w, xl, sl, n, y, bias, res);
    }
    for (; n < n1; ++n) {
      rows<1>(w, xl, sl, n, y, bias, res);
    }
  });
}

} // namespace

bool int_matvec(const QMat& w, const float* x, float* y, const float* bias, const float* res) {
  if (w.bits != 4 || w.group % kBlock != 0 || (kPerChunk % w.group != 0 && w.group % kPerChunk != 0)) {
    return false;
  }
  for (int k = 0; k < w.K; ++k) {
    if (!std::isfinite(x[k])) {  // the float path carries infinities and NaNs as they are
      return false;
    }
  }
  const Limbs xl(w, x);
  run(w, xl, y, bias, res);
  return true;
}

} // namespace mlxk

#endif
