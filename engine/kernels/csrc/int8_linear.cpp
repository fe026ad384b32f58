// The packed 8-bit product on AVX-512 VNNI (vpdpbusd): the encoder's int8 precision, in blocks of 32 k as ggml's Q8_0 (each block of a weight column and of an
// input row symmetric with its own scale, max |v| / 127, codes rounded to nearest). W is
// quantized once (int8_pack) and packed in panels of 32 columns by 4 consecutive k, with each
// column's block scales and 128 x its block code sums. Each call quantizes x and stores the
// codes offset by 128 as unsigned bytes, which vpdpbusd multiplies by the signed weight codes;
// a block's integer sum less 128 x the column's code sum is the exact integer dot product,
// scaled by the two blocks' scales into float32 sums. A micro-kernel holds 6 rows x 32
// columns. Without AVX-512 VNNI at build time only int8_available() is meaningful (false).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "packed_linear.h"
#include "parallel.h"

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define MLXK_INT8 1
#endif

namespace mlxk {

namespace {

constexpr int kNr = 32;      // output columns per panel
constexpr int kBlock = 32;  // k per scale
constexpr int kMc = 48;      // rows per thread chunk

int padded(int K) {
  return (K + kBlock - 1) / kBlock * kBlock;
}

int8_t code(float v, float inv) {
  return int8_t(std::max(-127.0f, std::min(127.0f, std::nearbyint(v * inv))));
}

#if defined(MLXK_INT8)
constexpr int kMr = 6;

// Packed weight: panels [p][K/4][32][4] int8, then per panel and block 128 x the code sums
// [p][b][32] int32, then the block scales [p][b][32] float.
struct Packed {
  const int8_t* codes;
  const int32_t* sums;
  const float* scales;
};

Packed view(const uint8_t* raw, int N, int K) {
  int panels = (N + kNr - 1) / kNr, Kp = padded(K), blocks = Kp / kBlock;
  const int8_t* codes = reinterpret_cast<const int8_t*>(raw);
  const int32_t* sums = reinterpret_cast<const int32_t*>(raw + size_t(panels) * Kp * kNr);
  const float* scales = reinterpret_cast<const float*>(sums + size_t(panels) * blocks * kNr);
  return {codes, sums, scales};
}

template <int R>
void micro(const uint8_t* a, int64_t lda, const float* ascale, int blocks, const int8_t* b, const int32_t* sums,
           const float* wscale, float* y, int64_t ldy, const float* res, const Epilogue& e, int n0, int N) {
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) {
    acc[r][0] = _mm512_setzero_ps();
    acc[r][1] = _mm512_setzero_ps();
  }
  for (int blk = 0; blk < blocks; ++blk) {
    __m512i dot[R][2];
    for (int r = 0; r < R; ++r) {
      dot[r][0] = _mm512_setzero_si512();
      dot[r][1] = _mm512_setzero_si512();
    }
    const int8_t* bb = b + int64_t(blk) * (kBlock / 4) * kNr * 4;
    const uint8_t* ab = a + int64_t(blk) * kBlock;
    for (int q = 0; q < kBlock / 4; ++q) {
      __m512i b0 = _mm512_loadu_si512(bb + q * kNr * 4);
      __m512i b1 = _mm512_loadu_si512(bb + q * kNr * 4 + 64);
      for (int r = 0; r < R; ++r) {
        int32_t four;
        std::memcpy(&four, ab + r * lda + 4 * q, 4);
        __m512i av = _mm512_set1_epi32(four);
        dot[r][0] = _mm512_dpbusd_epi32(dot[r][0], av, b0);
        dot[r][1] = _mm512_dpbusd_epi32(dot[r][1], av, b1);
      }
    }
    __m512i s0 = _mm512_loadu_si512(sums + int64_t(blk) * kNr), s1 = _mm512_loadu_si512(sums + int64_t(blk) * kNr + 16);
    __m512 w0 = _mm512_loadu_ps(wscale + int64_t(blk) * kNr), w1 = _mm512_loadu_ps(wscale + int64_t(blk) * kNr + 16);
    for (int r = 0; r < R; ++r) {
      __m512 d = _mm512_set1_ps(ascale[r * blocks + blk]);
      acc[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(dot[r][0], s0)), _mm512_mul_ps(d, w0),
                                  acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(dot[r][1], s1)), _mm512_mul_ps(d, w1),
                                  acc[r][1]);
    }
  }
  store_tile<R>(acc, y, ldy, res, e, n0, N);
}

// x rows as unsigned codes (signed code + 128, zero past K) and a scale per row and block.
void quantize_rows(const float* x, int64_t xs, int64_t M, int K, int Kp, uint8_t* codes, float* scales) {
  int blocks = Kp / kBlock;
  parallel_for(M, 16, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      const float* xr = x + m * xs;
      int blk = 0;
      for (; (blk + 1) * kBlock <= K; ++blk) {  // whole blocks: two vectors of 16
        int k0 = blk * kBlock;
        __m512 v0 = _mm512_loadu_ps(xr + k0), v1 = _mm512_loadu_ps(xr + k0 + 16);
        float most = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        __m512 inv = _mm512_set1_ps(most > 0.0f ? 127.0f / most : 0.0f);
        scales[m * blocks + blk] = most / 127.0f;
        // nearest even, as std::nearbyint; |code| <= 127, so the saturating narrowing is exact
        __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, inv)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, inv));
        __m128i b0 = _mm512_cvtsepi32_epi8(q0), b1 = _mm512_cvtsepi32_epi8(q1), off = _mm_set1_epi8(char(0x80));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + m * Kp + k0), _mm_xor_si128(b0, off));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + m * Kp + k0 + 16), _mm_xor_si128(b1, off));
      }
      for (; blk < blocks; ++blk) {
        int k0 = blk * kBlock, k1 = std::min(K, k0 + kBlock);
        float most = 0.0f;
        for (int k = k0; k < k1; ++k) {
          most = std::max(most, std::fabs(xr[k]));
        }
        float d = most / 127.0f, inv = most > 0.0f ? 127.0f / most : 0.0f;
        scales[m * blocks + blk] = d;
        uint8_t* o = codes + m * Kp + k0;
        for (int k = k0; k < k0 + kBlock; ++k) {
          o[k - k0] = uint8_t(int(k < k1 ? code(xr[k], inv) : 0) + 128);
        }
      }
    }
  });
}

#endif

} // namespace

bool int8_available() {
#if defined(MLXK_INT8)
  return true;
#else
  return false;
#endif
}

size_t int8_packed_bytes(int N, int K) {
  int Kp = padded(K), blocks = Kp / kBlock, panels = (N + kNr - 1) / kNr;
  return size_t(panels) * Kp * kNr + 2 * size_t(panels) * blocks * kNr * 4;
}

void int8_pack(const float* src, int N, int K, uint8_t* out) {
  int Kp = padded(K), blocks = Kp / kBlock, panels = (N + kNr - 1) / kNr;
  size_t code_bytes = size_t(panels) * Kp * kNr, sum_bytes = size_t(panels) * blocks * kNr * 4;
  auto* codes = reinterpret_cast<int8_t*>(out);
  auto* sums = reinterpret_cast<int32_t*>(out + code_bytes);
  auto* scales = reinterpret_cast<float*>(out + code_bytes + sum_bytes);
  for (int n = 0; n < N; ++n) {
    const float* row = src + int64_t(n) * K;
    int p = n / kNr, j = n % kNr;
    for (int blk = 0; blk * kBlock < K; ++blk) {
      int k0 = blk * kBlock, k1 = std::min(K, k0 + kBlock);
      float most = 0.0f;
      for (int k = k0; k < k1; ++k) {
        most = std::max(most, std::fabs(row[k]));
      }
      float inv = most > 0.0f ? 127.0f / most : 0.0f;
      scales[(int64_t(p) * blocks + blk) * kNr + j] = most / 127.0f;
      for (int k = k0; k < k1; ++k) {
        int8_t q = code(row[k], inv);
        codes[((int64_t(p) * (Kp / 4) + k / 4) * kNr + j) * 4 + k % 4] = q;
        sums[(int64_t(p) * blocks + blk) * kNr + j] += 128 * q;
      }
    }
  }
}

void int8_rows(const uint8_t* raw, int N, int K, const float* x, int64_t xs, int64_t M, float* y,
               const float* res, const Epilogue& e) {
#if defined(MLXK_INT8)
  int Kp = padded(K), blocks = Kp / kBlock, panels = (N + kNr - 1) / kNr;
  Packed w = view(raw, N, K);
  std::vector<uint8_t> codes(size_t(M) * Kp);
  std::vector<float> scales(size_t(M) * blocks);
  quantize_rows(x, xs, M, K, Kp, codes.data(), scales.data());
  int64_t chunks = (M + kMc - 1) / kMc;
  parallel_tasks(chunks, [&](int64_t c) {
    int64_t m0 = c * kMc, m1 = std::min<int64_t>(M, m0 + kMc);
    for (int p = 0; p < panels; ++p) {
      const int8_t* b = w.codes + int64_t(p) * Kp * kNr;
      const int32_t* sums = w.sums + int64_t(p) * blocks * kNr;
      const float* wscale = w.scales + int64_t(p) * blocks * kNr;
      for (int64_t m = m0; m < m1;) {
        const uint8_t* a = codes.data() + m * Kp;
        const float* d = scales.data() + m * blocks;
        float* yr = y + m * N;
        const float* rr = res ? res + m * e.rs : nullptr;
        if (m1 - m >= kMr) {
          micro<kMr>(a, Kp, d, blocks, b, sums, wscale, yr, N, rr, e, p * kNr, N);
          m += kMr;
        } else {
          micro<1>(a, Kp, d, blocks, b, sums, wscale, yr, N, rr, e, p * kNr, N);
          m += 1;
        }
      }
    }
  });
#else
  (void)raw, (void)N, (void)K, (void)x, (void)xs, (void)M, (void)y, (void)res, (void)e;
#endif
}

} // namespace mlxk
