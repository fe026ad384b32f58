// The packed bfloat16 product (float32 sums) on AVX-512 BF16's vdpbf16ps: the encoder's bf16
// precision. W is packed once (bf16_pack): panels of 32 output
// columns, each k pair of a column two adjacent bf16 values, so one 64-byte load holds a k
// pair of 16 columns; x is rounded to bf16 (nearest even) per call. A micro-kernel holds 8
// rows x 32 columns in 16 accumulators; threads take chunks of 64 rows, which stay in cache
// while every panel passes by. Without AVX-512 BF16 at build time only bf16_available() is
// meaningful (false): the Python side then keeps ggml's product.
#include <algorithm>
#include <cstring>
#include <vector>

#include "packed_linear.h"
#include "parallel.h"

namespace mlxk {

namespace {

constexpr int kNr = 32;  // output columns per panel
constexpr int kMr = 8;   // rows per micro-kernel
constexpr int kMc = 64;  // rows per thread chunk

uint16_t to_bf16(float f) {  // round to nearest even, as vcvtne2ps2bf16 does; NaN stays NaN
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return uint16_t((u >> 16) | 64);
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

#if defined(__AVX512BF16__)
template <int R>
void micro(const uint32_t* a, int64_t lda, const uint16_t* b, int kp_count, float* y, int64_t ldy,
           const float* res, const Epilogue& e, int n0, int N) {
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) {
    acc[r][0] = _mm512_setzero_ps();
    acc[r][1] = _mm512_setzero_ps();
  }
  for (int kp = 0; kp < kp_count; ++kp) {
    __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + int64_t(kp) * 2 * kNr);
    __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + int64_t(kp) * 2 * kNr + kNr);
    for (int r = 0; r < R; ++r) {
      __m512bh av = (__m512bh)_mm512_set1_epi32(int(a[r * lda + kp]));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
    }
  }
  store_tile<R>(acc, y, ldy, res, e, n0, N);
}

// x rows as bf16 pairs (one uint32 per k pair, zero-padded past K).
void round_rows(const float* x, int64_t xs, int64_t M, int K, int kp_count, uint32_t* out) {
  parallel_for(M, 16, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      const float* xr = x + m * xs;
      uint32_t* o = out + m * kp_count;
      int kp = 0;
      for (; 2 * kp + 32 <= K; kp += 16) {
        __m512bh c = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(xr + 2 * kp + 16), _mm512_loadu_ps(xr + 2 * kp));
        _mm512_storeu_si512(o + kp, (__m512i)c);
      }
      for (; kp < kp_count; ++kp) {
        uint32_t lo = to_bf16(xr[2 * kp]), hi = 2 * kp + 1 < K ? to_bf16(xr[2 * kp + 1]) : 0;
        o[kp] = lo | (hi << 16);
      }
    }
  });
}

#endif

} // namespace

bool bf16_available() {
#if defined(__AVX512BF16__)
  return true;
#else
  return false;
#endif
}

size_t bf16_packed_bytes(int N, int K) {
  return size_t((N + kNr - 1) / kNr) * ((K + 1) / 2) * 2 * kNr * sizeof(uint16_t);
}

void bf16_pack(const float* src, int N, int K, uint8_t* raw) {
  uint16_t* out = reinterpret_cast<uint16_t*>(raw);
  int kp_count = (K + 1) / 2;
  for (int n = 0; n < N; ++n) {
    int p = n / kNr, j = n % kNr;
    for (int k = 0; k < K; ++k) {
      out[((size_t(p) * kp_count + k / 2) * kNr + j) * 2 + k % 2] = to_bf16(src[int64_t(n) * K + k]);
    }
  }
}

void bf16_rows(const uint8_t* packed, int N, int K, const float* x, int64_t xs, int64_t M, float* y,
               const float* res, const Epilogue& e) {
#if defined(__AVX512BF16__)
  const uint16_t* w = reinterpret_cast<const uint16_t*>(packed);
  int kp_count = (K + 1) / 2, panels = (N + kNr - 1) / kNr;
  std::vector<uint32_t> xb(size_t(M) * kp_count);
  round_rows(x, xs, M, K, kp_count, xb.data());
  int64_t chunks = (M + kMc - 1) / kMc;
  parallel_tasks(chunks, [&](int64_t c) {
    int64_t m0 = c * kMc, m1 = std::min<int64_t>(M, m0 + kMc);
    for (int p = 0; p < panels; ++p) {
      const uint16_t* b = w + int64_t(p) * kp_count * 2 * kNr;
      for (int64_t m = m0; m < m1;) {
        const uint32_t* a = xb.data() + m * kp_count;
        float* yr = y + m * N;
        const float* rr = res ? res + m * e.rs : nullptr;
        switch (std::min<int64_t>(kMr, m1 - m)) {
          case 8: micro<8>(a, kp_count, b, kp_count, yr, N, rr, e, p * kNr, N); m += 8; break;
          case 4: case 5: case 6: case 7:
            micro<4>(a, kp_count, b, kp_count, yr, N, rr, e, p * kNr, N); m += 4; break;
          default: micro<1>(a, kp_count, b, kp_count, yr, N, rr, e, p * kNr, N); m += 1; break;
        }
      }
    }
  });
#else
  (void)packed, (void)N, (void)K, (void)x, (void)xs, (void)M, (void)y, (void)res, (void)e;
#endif
}

} // namespace mlxk
