// The packed float32 product on AVX-512 FMAs: the encoder's f32 precision. W is packed once in
// panels of 32 output columns, k-major (two 64-byte loads hold one k of 32 columns); x is read
// in place. A micro-kernel holds 12 rows x 32 columns in 24 accumulators; threads take chunks
// of 48 rows, which stay in cache while every panel passes by. Each output sums k in order.
#include <algorithm>
#include <cstring>

#include "packed_linear.h"
#include "parallel.h"

namespace mlxk {

namespace {

constexpr int kNr = 32;  // output columns per panel
constexpr int kMc = 48;  // rows per thread chunk

#if defined(__AVX512F__)
template <int R>
void micro(const float* a, int64_t lda, const float* b, int K, float* y, int64_t ldy, const float* res,
           const Epilogue& e, int n0, int N) {
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) {
    acc[r][0] = _mm512_setzero_ps();
    acc[r][1] = _mm512_setzero_ps();
  }
  for (int k = 0; k < K; ++k) {
    __m512 b0 = _mm512_loadu_ps(b + int64_t(k) * kNr), b1 = _mm512_loadu_ps(b + int64_t(k) * kNr + 16);
    for (int r = 0; r < R; ++r) {
      __m512 av = _mm512_set1_ps(a[r * lda + k]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
    }
  }
  store_tile<R>(acc, y, ldy, res, e, n0, N);
}
#endif

} // namespace

bool f32_available() {
#if defined(__AVX512F__)
  return true;
#else
  return false;
#endif
}

size_t f32_packed_bytes(int N, int K) {
  return size_t((N + kNr - 1) / kNr) * K * kNr * sizeof(float);
}

void f32_pack(const float* w, int N, int K, uint8_t* out) {
  float* o = reinterpret_cast<float*>(out);
  for (int n = 0; n < N; ++n) {
    int p = n / kNr, j = n % kNr;
    for (int k = 0; k < K; ++k) {
      o[(int64_t(p) * K + k) * kNr + j] = w[int64_t(n) * K + k];
    }
  }
}

void f32_rows(const uint8_t* packed, int N, int K, const float* x, int64_t xs, int64_t M, float* y,
              const float* res, const Epilogue& e) {
#if defined(__AVX512F__)
  const float* w = reinterpret_cast<const float*>(packed);
  int panels = (N + kNr - 1) / kNr;
  int64_t chunks = (M + kMc - 1) / kMc;
  parallel_tasks(chunks, [&](int64_t c) {
    int64_t m0 = c * kMc, m1 = std::min<int64_t>(M, m0 + kMc);
    for (int p = 0; p < panels; ++p) {
      const float* b = w + int64_t(p) * K * kNr;
      for (int64_t m = m0; m < m1;) {
        const float* a = x + m * xs;
        float* yr = y + m * N;
        const float* rr = res ? res + m * e.rs : nullptr;
        int64_t left = m1 - m;
        if (left >= 12) {
          micro<12>(a, xs, b, K, yr, N, rr, e, p * kNr, N);
          m += 12;
        } else if (left >= 8) {
          micro<8>(a, xs, b, K, yr, N, rr, e, p * kNr, N);
          m += 8;
        } else if (left >= 4) {
          micro<4>(a, xs, b, K, yr, N, rr, e, p * kNr, N);
          m += 4;
        } else {
          micro<1>(a, xs, b, K, yr, N, rr, e, p * kNr, N);
          m += 1;
        }
      }
    }
  });
#else
  (void)packed, (void)N, (void)K, (void)x, (void)xs, (void)M, (void)y, (void)res, (void)e;
#endif
}

} // namespace mlxk
