// The integer-dot matvec (int_matvec.h). Codes are read a chunk of a row at a time:
// 64 bytes holding 128 values for 4 bits (low nibbles the even ones, high nibbles the
// odd ones) or 64 for 8 bits; 8 * bits bytes of bit stream holding 64 values for 5 and 6
// bits, unpacked to bytes first. The limbs of x are laid out to meet them byte for byte, so one
// vpdpbusd adds four code x limb products into each 32-bit lane; per chunk a lane's
// three limb sums combine exactly as a * 2^14 + b * 2^7 + c in 32 bits (|limb| <= 127),
// then turn into one float scaled by the block's u / 2^14 and the lane's group scale.
#include "int_matvec.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "parallel.h"
#include "rowops.h"

namespace mlxk {

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)

bool int_matvec_built() {
  return true;
}

namespace {

constexpr int kBlock = 32;   // values sharing a limb scale u
constexpr int kChunk = 64;   // limb bytes per chunk and limb (per nibble half for 4 bits)

// Code bytes of a chunk: 64 for 4 bits (128 values) and 8 bits, 8 * BITS for 5 and 6 (64 values).
template <int BITS>
constexpr int chunk_bytes() {
  return BITS == 4 ? kChunk : 8 * BITS;
}

#if defined(__AVX512VBMI__)
constexpr bool kPackedCodes = true;  // 5- and 6-bit bit streams unpacked to bytes in registers
// 64 codes of BITS (5 or 6) bits as bytes: the 8 codes of each BITS-byte run go to one
// 64-bit lane (a byte permute), where a multishift picks each code's 8 bits from its offset.
template <int BITS>
inline __m512i packed_to_bytes(__m512i raw) {
  alignas(64) static const auto tables = [] {
    struct { uint8_t spread[64], shifts[64]; } t{};
    for (int g = 0; g < 8; ++g) {
      for (int j = 0; j < 8; ++j) {
        t.spread[8 * g + j] = uint8_t(g * BITS + j);
        t.shifts[8 * g + j] = uint8_t(j * BITS);
      }
    }
    return t;
  }();
  const __m512i spread = _mm512_permutexvar_epi8(_mm512_load_si512(tables.spread), raw);
  return _mm512_and_si512(_mm512_multishift_epi64_epi8(_mm512_load_si512(tables.shifts), spread),
                          _mm512_set1_epi8(char((1 << BITS) - 1)));
}
#else
constexpr bool kPackedCodes = false;
#endif
constexpr int kAheadBytes = 2048;  // rows run contiguous: the bytes this far on are asked for ahead of use

// The three limbs of 16 values v (= x / u) as bytes, a then b then c. Each is the nearest
// integer within [-127, 127]: the bound keeps a chunk's combined lane sum (4 products of
// codes up to 255) inside 32 bits; a clamped limb's excess goes to the next.
inline void limb_bytes(__m512 v, int8_t* a_at, int8_t* b_at, int8_t* c_at) {
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f), radix = _mm512_set1_ps(128.0f);
  const auto nearest = [&](__m512 t) {
    return _mm512_min_ps(hi, _mm512_max_ps(lo, _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
  };
  const __m512 a = nearest(v), r = _mm512_mul_ps(_mm512_sub_ps(v, a), radix);
  const __m512 b = nearest(r), c = nearest(_mm512_mul_ps(_mm512_sub_ps(r, b), radix));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(a_at), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(a)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(b_at), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(b)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(c_at), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(c)));
}

// x as limbs, chunk by chunk in the codes' order: per chunk and limb 64 bytes (8 bits),
// or 64 for the even values then 64 for the odd ones (4 bits); per chunk and lane the
// factor u / 2^14 of the lane's block (0 past K); per weight group the sum of x. Held in
// the calling thread's scratch: valid until that thread builds the next Limbs.
struct Limbs {
  int per_chunk;  // values per chunk: 128 or 64
  int chunks;
  int span;        // limb bytes per chunk and limb
  int8_t* bytes;   // chunks * limbs(3) * span
  float* factor;   // chunks * 16
  float* sums;     // w.groups()

  Limbs(const QMat& w, const float* x) : per_chunk(w.bits == 4 ? 128 : 64) {
    static thread_local std::vector<int8_t> byte_store;
    static thread_local std::vector<float> factor_store, sum_store;
    chunks = (w.K + per_chunk - 1) / per_chunk;
    span = w.bits == 4 ? 2 * kChunk : kChunk;
    bytes = grown(byte_store, size_t(chunks) * 3 * span);
    factor = grown(factor_store, size_t(chunks) * 16);
    sums = grown(sum_store, size_t(w.groups()));
    std::memset(bytes, 0, size_t(chunks) * 3 * span);
    std::memset(factor, 0, size_t(chunks) * 16 * sizeof(float));
    for (int g = 0; g < w.groups(); ++g) {  // groups are multiples of 32 values
      __m512 s = _mm512_setzero_ps();
      for (int t = 0; t < w.group; t += 16) {
        s = _mm512_add_ps(s, _mm512_loadu_ps(x + g * w.group + t));
      }
      sums[g] = _mm512_reduce_add_ps(s);
    }
    // The even values of a block's two halves, then its odd ones (the 4-bit order).
    const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odds = _mm512_add_epi32(evens, _mm512_set1_epi32(1));
    const int lane_values = per_chunk / 16;  // a lane covers per_chunk / 16 values of a chunk
    for (int blk = 0; blk < w.K / kBlock; ++blk) {
      const __m512 x0 = _mm512_loadu_ps(x + blk * kBlock), x1 = _mm512_loadu_ps(x + blk * kBlock + 16);
      const float m = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
      int e = 0;
      std::frexp(m, &e);  // m < 2^e
      const float u = m > 0.0f ? std::ldexp(1.0f, e - 7) : 0.0f;  // |x / u| < 128
      if (u == 0.0f) {
        continue;  // limbs and factors stay 0
      }
      const int k = blk * kBlock, chunk = k / per_chunk, at = k % per_chunk;
      int8_t* base = bytes + size_t(chunk) * 3 * span;
      const __m512 vu = _mm512_set1_ps(u);
      if (w.bits == 4) {  // even values at at / 2, odd ones 64 bytes on
        limb_bytes(_mm512_div_ps(_mm512_permutex2var_ps(x0, evens, x1), vu), base + at / 2, base + span + at / 2,
                   base + 2 * span + at / 2);
        limb_bytes(_mm512_div_ps(_mm512_permutex2var_ps(x0, odds, x1), vu), base + kChunk + at / 2,
                   base + span + kChunk + at / 2, base + 2 * span + kChunk + at / 2);
      } else {
        limb_bytes(_mm512_div_ps(x0, vu), base + at, base + span + at, base + 2 * span + at);
        limb_bytes(_mm512_div_ps(x1, vu), base + at + 16, base + span + at + 16, base + 2 * span + at + 16);
      }
      for (int j = at / lane_values; j < (at + kBlock) / lane_values; ++j) {
        factor[size_t(chunk) * 16 + j] = std::ldexp(u, -14);
      }
    }
  }
  const __m512i* limb(int chunk, int which, int half = 0) const {
    return reinterpret_cast<const __m512i*>(bytes + (size_t(chunk) * 3 + which) * span + half * kChunk);
  }
};

// The group scales of a chunk's lanes: lane l reads group first[c] + idx[l] of a row
// (where the chunk's groups start and which are inside the row, worked out once per call).
struct ScaleLanes {
  __m512i idx;
  const int* first;
  const __mmask8* valid;
  ScaleLanes(const QMat& w, int per_chunk, int chunks) {
    static thread_local std::vector<int> first_store;
    static thread_local std::vector<__mmask8> valid_store;
    int* f = grown(first_store, size_t(chunks));
    __mmask8* v = grown(valid_store, size_t(chunks));
    const int spans = std::max(1, per_chunk / w.group);  // groups a chunk spans (1: a group spans it)
    alignas(64) int32_t lanes[16];
    for (int l = 0; l < 16; ++l) {
      lanes[l] = spans > 1 ? l * (per_chunk / 16) / w.group : 0;
    }
    idx = _mm512_load_si512(lanes);
    for (int c = 0; c < chunks; ++c) {
      f[c] = int(int64_t(c) * per_chunk / w.group);
      v[c] = __mmask8((1u << std::min(spans, w.groups() - f[c])) - 1);
    }
    first = f;
    valid = v;
  }
  __m512 at(const QMat& w, int64_t n, int c) const {
    const int64_t i = n * w.groups() + first[c];
    __m128 s;
    if (w.half16) {
      s = _mm_cvtph_ps(_mm_maskz_loadu_epi16(valid[c], reinterpret_cast<const uint16_t*>(w.scales) + i));
    } else {
      s = _mm_maskz_loadu_ps(valid[c], w.scales + i);
    }
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(s));
  }
};

// total + the lanes of sum over g of bias(n, g) * sums[g] (the bias term of output n),
// 16 groups at a time, the last ones under a mask: summed with the codes' lanes, not apart.
inline __m512 add_bias_term(const QMat& w, int64_t n, const float* sums, __m512 total) {
  const int ng = w.groups();
  const int64_t at = n * ng;
  for (int g = 0; g < ng; g += 16) {
    const __mmask16 m = ng - g >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (ng - g)) - 1);
    const __m512 b = w.half16 ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(
                                    m, reinterpret_cast<const uint16_t*>(w.biases) + at + g))
                              : _mm512_maskz_loadu_ps(m, w.biases + at + g);
    total = _mm512_fmadd_ps(b, _mm512_maskz_loadu_ps(m, sums + g), total);
  }
  return total;
}

// The lane sums of four vectors at once: [sum a, sum b, sum c, sum d].
inline __m128 reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const auto half = [](__m512 v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  };
  const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(half(a), half(b)), _mm256_hadd_ps(half(c), half(d)));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

template <int BITS, int NB>
void rows(const QMat& w, const Limbs& xl, const ScaleLanes& sl, int64_t n0, float* y, const float* bias,
          const float* res) {
  const int64_t rb = w.row_bytes();
  constexpr int CB = chunk_bytes<BITS>();
  const int last = xl.chunks - 1;
  const int64_t tail_bytes = rb - int64_t(last) * CB;
  const __mmask64 full = CB >= 64 ? ~0ULL : ((1ULL << CB) - 1);
  const __mmask64 tail = tail_bytes >= 64 ? ~0ULL : ((1ULL << tail_bytes) - 1);
  const __m512i low4 = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
  __m512 total[NB];
  const uint8_t* row[NB];
  for (int j = 0; j < NB; ++j) {
    total[j] = _mm512_setzero_ps();
    row[j] = w.w + (n0 + j) * rb;
  }
  for (int c = 0; c <= last; ++c) {
    const __m512 fac = _mm512_loadu_ps(xl.factor + size_t(c) * 16);
    __m512i xa0 = _mm512_loadu_si512(xl.limb(c, 0)), xb0 = _mm512_loadu_si512(xl.limb(c, 1));
    __m512i xc0 = _mm512_loadu_si512(xl.limb(c, 2));
    __m512i xa1 = zero, xb1 = zero, xc1 = zero;
    if constexpr (BITS == 4) {
      xa1 = _mm512_loadu_si512(xl.limb(c, 0, 1));
      xb1 = _mm512_loadu_si512(xl.limb(c, 1, 1));
      xc1 = _mm512_loadu_si512(xl.limb(c, 2, 1));
    }
    for (int j = 0; j < NB; ++j) {
      const uint8_t* p = row[j] + int64_t(c) * CB;
      __builtin_prefetch(p + kAheadBytes);
      __m512i codes;
      if constexpr (BITS == 4 || BITS == 8) {
        codes = c < last ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(tail, p);
      } else {
        codes = packed_to_bytes<BITS>(_mm512_maskz_loadu_epi8(c < last ? full : tail, p));
      }
      __m512i a, b, cc;
      if constexpr (BITS == 4) {
        const __m512i lo = _mm512_and_si512(codes, low4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(codes, 4), low4);
        a = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, lo, xa0), hi, xa1);
        b = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, lo, xb0), hi, xb1);
        cc = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, lo, xc0), hi, xc1);
      } else {
        a = _mm512_dpbusd_epi32(zero, codes, xa0);
        b = _mm512_dpbusd_epi32(zero, codes, xb0);
        cc = _mm512_dpbusd_epi32(zero, codes, xc0);
      }
      const __m512i comb = _mm512_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(a, 14), _mm512_slli_epi32(b, 7)), cc);
      const __m512 scale = _mm512_mul_ps(fac, sl.at(w, n0 + j, c));
      total[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(comb), scale, total[j]);
    }
  }
  for (int j = 0; j < NB; ++j) {
    total[j] = add_bias_term(w, n0 + j, xl.sums, total[j]);
  }
  if constexpr (NB == 4) {
    alignas(16) float sums[4];
    _mm_store_ps(sums, reduce4(total[0], total[1], total[2], total[3]));
    for (int j = 0; j < 4; ++j) {
      y[n0 + j] = finish(sums[j], bias, res, n0 + j);
    }
  } else {
    for (int j = 0; j < NB; ++j) {
      y[n0 + j] = finish(_mm512_reduce_add_ps(total[j]), bias, res, n0 + j);
    }
  }
}

template <int BITS>
void run(const QMat& w, const Limbs& xl, float* y, const float* bias, const float* res) {
  const ScaleLanes sl(w, xl.per_chunk, xl.chunks);
  const int64_t grain = std::max<int64_t>(16, (1 << 16) / std::max(1, w.K));
  parallel_for(w.N, grain, [&](int64_t n0, int64_t n1) {
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4) {
      rows<BITS, 4>(w, xl, sl, n, y, bias, res);
    }
    for (; n < n1; ++n) {
      rows<BITS, 1>(w, xl, sl, n, y, bias, res);
    }
  });
}

} // namespace

bool int_matvec(const QMat& w, const float* x, float* y, const float* bias, const float* res) {
  const int per_chunk = w.bits == 4 ? 128 : 64;
  const bool packed = w.bits == 5 || w.bits == 6;
  if ((w.bits != 4 && w.bits != 8 && !(packed && kPackedCodes)) || w.group % kBlock != 0 ||
      (per_chunk % w.group != 0 && w.group % per_chunk != 0)) {
    return false;
  }
  __mmask16 odd = 0;  // lanes holding an infinity or a NaN (x - x is then NaN)
  int k = 0;
  for (; k + 16 <= w.K; k += 16) {
    const __m512 v = _mm512_loadu_ps(x + k);
    odd |= _mm512_cmp_ps_mask(_mm512_sub_ps(v, v), _mm512_setzero_ps(), _CMP_NEQ_UQ);
  }
  for (; k < w.K; ++k) {
    odd |= !std::isfinite(x[k]);
  }
  if (odd) {  // the float path carries infinities and NaNs as they are
    return false;
  }
  const Limbs xl(w, x);
  switch (w.bits) {
    case 4: run<4>(w, xl, y, bias, res); break;
    case 8: run<8>(w, xl, y, bias, res); break;
#if defined(__AVX512VBMI__)
    case 5: run<5>(w, xl, y, bias, res); break;
    case 6: run<6>(w, xl, y, bias, res); break;
#endif
  }
  return true;
}

#elif !MLXK_INT_MATVEC_AVX2  // int_matvec_avx2.cpp has the AVX2 path

bool int_matvec_built() {
  return false;
}

bool int_matvec(const QMat&, const float*, float*, const float*, const float*) {
  return false;
}

#endif

std::vector<int> int_matvec_bits() {
  if (!int_matvec_enabled()) {
    return {};
  }
#if MLXK_INT_MATVEC_AVX2
  return {4};
#elif defined(__AVX512VBMI__)
  return {4, 5, 6, 8};
#else
  return {4, 8};
#endif
}

bool int_matvec_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("MLX_GRPC_INT_MATVEC");
    return int_matvec_built() && !(v && std::strcmp(v, "off") == 0);
  }();
  return enabled;
}

} // namespace mlxk
