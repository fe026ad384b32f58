// The packed float32 product on AVX-512 FMAs: the encoder's f32 precision. W is packed once in
// panels of 32 output columns, k-major (two 64-byte loads hold one k of 32 columns); x is read
// in place. A micro-kernel (f32_tile.h) holds 12 rows x 32 columns in 24 accumulators; threads
// take chunks of 48 rows, which stay in cache while every panel passes by.
#include <algorithm>

#include "f32_tile.h"
#include "packed_linear.h"
#include "parallel.h"

namespace mlxk {

namespace {

constexpr int kNr = 32;  // output columns per panel
constexpr int kMc = 48;  // rows per thread chunk

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
      f32_row_tiles(m0, m1, [&](int64_t m, auto rows) {
        constexpr int R = decltype(rows)::value;
        __m512 acc[R][2];
        f32_tile<R>(x + m * xs, xs, b, kNr, K, acc);
        store_tile<R>(acc, y + m * N, N, res ? res + m * e.rs : nullptr, e, p * kNr, N);
      });
    }
  });
#else
  (void)packed, (void)N, (void)K, (void)x, (void)xs, (void)M, (void)y, (void)res, (void)e;
#endif
}

} // namespace mlxk
