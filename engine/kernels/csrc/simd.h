// Portable SIMD for the CPU kernels: GCC/Clang vector extensions, so one source
// compiles to AVX-512, AVX2 or NEON/SSE depending on the target (-march=native by
// default, see CMakeLists.txt). Vectorised exp, sigmoid and erfc are accurate to a
// few float32 ulps (Cephes-style range reduction and polynomials).
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

namespace mlxk {

#if defined(__AVX512F__)
inline constexpr int kW = 16;
#elif defined(__AVX__)
inline constexpr int kW = 8;
#else
inline constexpr int kW = 4;
#endif

typedef float vf __attribute__((vector_size(kW * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(kW * sizeof(int32_t))));

inline vf splat(float x) {
  return vf{} + x;
}
inline vf load(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof(vf));
  return v;
}
inline void store(float* p, vf v) {
  std::memcpy(p, &v, sizeof(vf));
}
// The first n (< kW) lanes from p; the rest are `fill`.
inline vf load_part(const float* p, int n, float fill) {
  vf v = splat(fill);
  for (int i = 0; i < n; ++i) {
    v[i] = p[i];
  }
  return v;
}
inline void store_part(float* p, vf v, int n) {
  for (int i = 0; i < n; ++i) {
    p[i] = v[i];
  }
}
inline vf vmax(vf a, vf b) {
  return a > b ? a : b;
}
inline vf vmin(vf a, vf b) {
  return a < b ? a : b;
}
#if defined(__AVX512F__) || defined(__AVX__)
#if defined(__AVX512F__)
inline __m256 half_sum(vf v, bool max) {
  __m256 lo, hi;
  std::memcpy(&lo, &v, sizeof(lo));
  std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof(lo), sizeof(hi));
  return max ? _mm256_max_ps(lo, hi) : _mm256_add_ps(lo, hi);
}
#else
inline __m256 half_sum(vf v, bool) {
  return reinterpret_cast<__m256>(v);
}
#endif
inline __m128 combine(__m128 a, __m128 b, bool max) {
  return max ? _mm_max_ps(a, b) : _mm_add_ps(a, b);
}
// The sum (or max) of the lanes.
inline float reduce(vf v, bool max) {
  __m256 x = half_sum(v, max);
  __m128 s = combine(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1), max);
  s = combine(s, _mm_movehl_ps(s, s), max);
  s = combine(s, _mm_movehdup_ps(s), max);
  return _mm_cvtss_f32(s);
}
inline float hsum(vf v) {
  return reduce(v, false);
}
inline float hmax(vf v) {
  return reduce(v, true);
}
#else
inline float hsum(vf v) {
  float s = 0.0f;
  for (int i = 0; i < kW; ++i) {
    s += v[i];
  }
  return s;
}
inline float hmax(vf v) {
  float m = v[0];
  for (int i = 1; i < kW; ++i) {
    m = v[i] > m ? v[i] : m;
  }
  return m;
}
#endif

// exp(x); 0 below the float range, clamped above it.
inline vf vexp(vf x) {
  const vf hi = splat(88.3762626647949f);
  const vf lo = splat(-87.3365447504f);
  vf z = vmin(x, hi);
  vf kf = z * 1.44269504088896341f;
  vi k = __builtin_convertvector(kf + (kf >= 0 ? splat(0.5f) : splat(-0.5f)), vi);
  vf n = __builtin_convertvector(k, vf);
  vf r = z - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  vf p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  vf y = p * (r * r) + r + 1.0f;
  // 2^k in two halves, so k = 128 (y < 1 near the top) and k = -127 stay exact.
  vi k1 = k >> 1;
  vi k2 = k - k1;
  vf s1, s2;
  vi e1 = (k1 + 127) << 23, e2 = (k2 + 127) << 23;
  std::memcpy(&s1, &e1, sizeof(vf));
  std::memcpy(&s2, &e2, sizeof(vf));
  y = y * s1 * s2;
  return x < lo ? splat(0.0f) : y;
}

// 1 / (1 + exp(-x)), accurate at both tails.
inline vf vsigmoid(vf x) {
  vf e = vexp(x > 0 ? -x : x);  // in (0, 1]
  vf s = 1.0f / (1.0f + e);
  return x > 0 ? s : e * s;
}

// erfc(x) for x >= 0 (Numerical Recipes' Chebyshev fit, fractional error < 1.2e-7).
inline vf verfc_pos(vf x) {
  vf t = 1.0f / (1.0f + 0.5f * x);
  vf p = splat(0.17087277f);
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  return t * vexp(p - x * x);
}

inline vf gelu_erf_v(vf x) {
  // 0.5 x (1 + erf(x / sqrt 2)), through erfc so neither tail cancels.
  vf z = (x > 0 ? x : -x) * 0.70710678118654752f;
  vf c = verfc_pos(z);
  return x > 0 ? x - 0.5f * x * c : 0.5f * x * c;
}

inline vf gelu_tanh_v(vf x) {
  // 0.5 x (1 + tanh(y)) == x * sigmoid(2y), y = sqrt(2/pi) (x + 0.044715 x^3).
  vf y = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return x * vsigmoid(2.0f * y);
}

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

} // namespace mlxk
