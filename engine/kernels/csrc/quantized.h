// MLX's affine-quantized weights as the kernels see them (quantized.cpp, dequantize.cpp).
#pragma once

#include <cstring>
#include <vector>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "arrays.h"
#include "simd.h"

namespace mlxk {

inline float half_to_float(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  const uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000 | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    uint32_t m = man;
    do { ++e; m <<= 1; } while (!(m & 0x400));
    bits = sign | uint32_t(112 - e) << 23 | ((m & 0x3FF) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

// Scales and biases are float32, or float16 where the loader found every value exact
// in half precision (half16 set: scales and biases then point at uint16_t bits).
struct QMat {
  const uint8_t* w;  // N rows of K * bits / 8 bytes
  const float* scales;
  const float* biases;
  int N, K, group, bits;
  bool half16 = false;
  int groups() const { return K / group; }
  int64_t row_bytes() const { return int64_t(K) * bits / 8; }
  float scale(int64_t i) const { return half16 ? half_to_float(reinterpret_cast<const uint16_t*>(scales)[i]) : scales[i]; }
  float bias(int64_t i) const { return half16 ? half_to_float(reinterpret_cast<const uint16_t*>(biases)[i]) : biases[i]; }
  // sum over g of bias(n, g) * sums[g]: the bias term of output n, all groups at once.
  // Whichever width the biases have, the same arithmetic: kW lanes, then fused
  // multiply-adds one by one (explicit, so no compiler contracts one width and not the other).
  float bias_dot(int64_t n, const float* sums) const {
    const int ng = groups();
    vf acc = splat(0.0f);
    int g = 0;
    for (; g + kW <= ng; g += kW) {
      acc += biases_at(n * ng + g) * load(sums + g);
    }
    float s = hsum(acc);
    for (; g < ng; ++g) {
      s = __builtin_fmaf(bias(n * ng + g), sums[g], s);
    }
    return s;
  }
  // biases [i, i + kW) as floats.
  vf biases_at(int64_t i) const {
    if (!half16) {
      return load(biases + i);
    }
    const uint16_t* h = reinterpret_cast<const uint16_t*>(biases) + i;
#if defined(__AVX512F__)
    return (vf)_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h)));
#elif defined(__F16C__) && defined(__AVX__)
    return (vf)_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
#else
    vf v;
    for (int l = 0; l < kW; ++l) {
      v[l] = half_to_float(h[l]);
    }
    return v;
#endif
  }
};

QMat qmat(const std::vector<mx::array>& in, int group, int bits);
// Rows [n0, n1) of w as float32, row n at out + (n - n0) * K (dequantize.cpp).
void dequantize_rows(const QMat& w, float* out, int64_t n0, int64_t n1);
// y[M, N] (ld ldy) = x[M, K] w[N, K]^T + beta * y through the process's CBLAS (linear.cpp;
// only where blas_available()).
void sgemm_nt(int M, int N, int K, const float* x, int ldx, const float* w, int ldw, float beta, float* y,
              int ldy);
bool blas_available();
void check_quantized(const mx::array& w, const mx::array& scales, const mx::array& biases,
                     int group, int bits);

} // namespace mlxk
