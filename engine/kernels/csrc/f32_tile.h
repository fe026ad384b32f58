// The float32 micro-kernel shared by the packed f32 product and segment attention: R rows of a
// (row r at a + r * lda) times K rows of 32 columns of b (row k at b + k * ldb) into acc, one sum
// per output over k in order (so a row's sums never depend on the rows beside it).
#pragma once

#include <cstdint>
#include <type_traits>

#if defined(__AVX512F__)
#include <immintrin.h>

namespace mlxk {

template <int R>
inline void f32_tile(const float* a, int64_t lda, const float* b, int64_t ldb, int K, __m512 (&acc)[R][2]) {
  for (int r = 0; r < R; ++r) {
    acc[r][0] = _mm512_setzero_ps();
    acc[r][1] = _mm512_setzero_ps();
  }
  for (int k = 0; k < K; ++k) {
    __m512 b0 = _mm512_loadu_ps(b + k * ldb), b1 = _mm512_loadu_ps(b + k * ldb + 16);
    for (int r = 0; r < R; ++r) {
      __m512 av = _mm512_set1_ps(a[r * lda + k]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
    }
  }
}

// Calls f(m, std::integral_constant<int, R>) over rows [m0, m1) in tiles of 12, 8, 4 and 1 rows.
template <class F>
inline void f32_row_tiles(int64_t m0, int64_t m1, F&& f) {
  for (int64_t m = m0; m < m1;) {
    int64_t left = m1 - m;
    if (left >= 12) {
      f(m, std::integral_constant<int, 12>{});
      m += 12;
    } else if (left >= 8) {
      f(m, std::integral_constant<int, 8>{});
      m += 8;
    } else if (left >= 4) {
      f(m, std::integral_constant<int, 4>{});
      m += 4;
    } else {
      f(m, std::integral_constant<int, 1>{});
      m += 1;
    }
  }
}

} // namespace mlxk
#endif
