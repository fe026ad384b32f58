// kW codes of MLX's affine quantization (8, 6, 5 or 4 bits) as floats, for the kernels
// that read quantized rows (quantized.cpp, dequantize.cpp, attention_kernel.cpp).
//
// MLX packs 5- and 6-bit codes as one little-endian bit stream per row: code k of a
// row occupies bits [k * bits, (k + 1) * bits) of the row's bytes. For k a multiple of
// kW (>= 8 where SIMD is used) that start is a whole byte, k * bits / 8.
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

// Per 32-bit lane i of a vector of kW codes of BITS bits: the index of the byte holding
// code i's lowest bit (every byte of the lane takes it or the next one: a code starts at
// bit <= 7 of its byte and BITS <= 6, so it lies in two bytes), the mask of the code's
// bits where they lie, and 2^-that position.
template <int BITS>
struct BitLanes {
  alignas(64) uint8_t index[4 * kW];
  alignas(64) int32_t mask[kW];
  alignas(64) float unit[kW];
  constexpr BitLanes() : index{}, mask{}, unit{} {
    for (int i = 0; i < kW; ++i) {
      const int byte = i * BITS / 8, shift = i * BITS % 8;
      mask[i] = ((1 << BITS) - 1) << shift;
      unit[i] = 1.0f / float(1 << shift);
      for (int j = 0; j < 4; ++j) {
        index[4 * i + j] = uint8_t(j == 0 ? byte : byte + 1);
      }
    }
  }
};

// 2^-(k * bits % 8): what scales element k of x so that a code read unshifted (code
// << (k * bits % 8), see unshifted_codes) gives the same product (a power of two:
// exact unless x lies within 2^7 of float32's subnormals).
inline float unshift(int64_t k, int bits) {
  return 1.0f / float(1 << (k * bits % 8));
}

#if (defined(__AVX512BW__) && defined(__AVX512VL__)) || (defined(__AVX2__) && !defined(__AVX512F__))
// kW codes of BITS (5 or 6) bits of a packed row from element k (k a multiple of kW), each
// left at the bit it starts at in its two bytes: lane i holds code << ((k + i) * BITS % 8)
// as a float (exact). Reads no byte outside the row (the last codes end the buffer).
template <int BITS>
inline vf unshifted_codes(const uint8_t* row, int64_t k) {
  static_assert(BITS == 5 || BITS == 6, "unshifted_codes: 5 or 6 bits");
  static constexpr BitLanes<BITS> L{};
  constexpr int kBytes = kW * BITS / 8;
#if defined(__AVX512BW__)
  __m128i raw = _mm_maskz_loadu_epi8(__mmask16((1u << kBytes) - 1), row + k * BITS / 8);
  __m512i index = _mm512_load_si512(L.index);
#if defined(__AVX512VBMI__)
  __m512i bytes = _mm512_permutexvar_epi8(index, _mm512_castsi128_si512(raw));
#else
  __m512i bytes = _mm512_shuffle_epi8(_mm512_broadcast_i32x4(raw), index);
#endif
  return (vf)_mm512_cvtepi32_ps(_mm512_and_si512(bytes, _mm512_load_si512(L.mask)));
#else
  // One 8-byte load (the codes' kBytes and the bytes before them, or after them at a row's
  // start: a row holds at least 8 bytes), shifted down to the codes: no partial copy,
  // whose narrow stores would stall the broadcast that reads them back.
  const int64_t before = k == 0 ? 0 : 8 - kBytes;
  uint64_t raw;
  std::memcpy(&raw, row + k * BITS / 8 - before, 8);
  raw >>= 8 * before;
  const __m256i index = _mm256_load_si256(reinterpret_cast<const __m256i*>(L.index));
  const __m256i mask = _mm256_load_si256(reinterpret_cast<const __m256i*>(L.mask));
  return (vf)_mm256_cvtepi32_ps(_mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi64x(int64_t(raw)), index), mask));
#endif
}

// The same codes as floats (each times its lane's 2^-position: exact).
template <int BITS>
inline vf packed_codes(const uint8_t* row, int64_t k) {
  static constexpr BitLanes<BITS> L{};
  return unshifted_codes<BITS>(row, k) * load(L.unit);
}
#else
template <int BITS>
inline vf packed_codes(const uint8_t* row, int64_t k) {
  static_assert(BITS == 5 || BITS == 6, "packed_codes: 5 or 6 bits");
  vf out;
  for (int i = 0; i < kW; ++i) {
    const int64_t bit = (k + i) * BITS;
    uint32_t v = row[bit >> 3];
    if ((bit & 7) + BITS > 8) {
      v |= uint32_t(row[(bit >> 3) + 1]) << 8;
    }
    out[i] = float((v >> (bit & 7)) & ((1 << BITS) - 1));
  }
  return out;
}

template <int BITS>
inline vf unshifted_codes(const uint8_t* row, int64_t k) {
  vf v = packed_codes<BITS>(row, k);
  for (int i = 0; i < kW; ++i) {
    v[i] *= float(1 << ((k + i) * BITS % 8));
  }
  return v;
}
#endif

inline vf codes(const uint8_t* wr, int k, int bits) {
  if (bits == 5) {
    return packed_codes<5>(wr, k);
  }
  if (bits == 6) {
    return packed_codes<6>(wr, k);
  }
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
