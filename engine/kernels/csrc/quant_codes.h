// kW codes of MLX's affine quantization (8 or 4 bits) as floats, for the kernels that
// read quantized rows (dequantize.cpp, attention_kernel.cpp).
#pragma once

#include <cstdint>
#include <cstring>

#include "simd.h"

namespace mlxk::quant {

// widen: kW bytes as kW floats; codes: kW codes of a row from element k (k a multiple
// of kW) as floats.
#if defined(__AVX512F__) || defined(__AVX2__)
inline vf widen(__m128i b) {
#if defined(__AVX512F__)
  return (vf)_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
#else
  return (vf)_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
#endif
}
#endif

inline vf codes(const uint8_t* wr, int k, int bits) {
#if defined(__AVX512F__) || defined(__AVX2__)
  if (bits == 8) {
    return widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wr + k)));
  }
  // kW / 2 bytes hold kW nibbles, element 2i low: widen bytes to 16 bits, then
  // the low nibble stays in the low byte and the high one moves to the high byte.
  __m128i v;
  if (kW == 16) {
    v = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(wr + k / 2)));
  } else {
    int32_t four;
    std::memcpy(&four, wr + k / 2, 4);
    v = _mm_cvtepu8_epi16(_mm_cvtsi32_si128(four));
  }
  __m128i mask = _mm_set1_epi16(0x0F);
  v = _mm_or_si128(_mm_and_si128(v, mask), _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(v, 4), mask), 8));
  return widen(v);
#else
  vf out;
  for (int i = 0; i < kW; ++i) {
    int e = k + i;
    out[i] = float(bits == 8 ? wr[e] : (wr[e / 2] >> (4 * (e & 1))) & 0xF);
  }
  return out;
#endif
}

} // namespace mlxk::quant
