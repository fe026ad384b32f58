// The encoder's packed products: y = act(x W^T + bias + residual) with W packed once per kind
// into panels of 32 output columns (f32: float32 FMAs; bf16: vdpbf16ps; int8: vpdpbusd on Q8_0
// blocks). One MLX primitive (PackedLinear, packed_linear.cpp) runs every kind; each kind's file
// holds its packing and its rows, and all share the epilogue below, applied to a micro-kernel's
// sums before they are stored. Each output is one sum in a fixed order, so a row's result never
// depends on the rows beside it.
#pragma once

#include <cstdint>
#include <string>

#include "simd.h"

namespace mlxk {

enum class PackedKind : int { f32 = 0, bf16 = 1, int8 = 2 };
enum PackedAct : int { kActNone = 0, kActGeluErf = 1, kActGeluTanh = 2 };

struct Epilogue {
  const float* bias;  // [N], or null
  int64_t rs;         // row stride of the residual
  int act;            // PackedAct
};

// Each kind: whether this build has it, its packed size, packing W [N, K] (row-major) into a
// zeroed buffer of that size, and rows [0, M) of x (row stride xs) into y [M, N]; res, when not
// null, is the residual of row 0 (row r at res + r * e.rs).
#define MLXK_PACKED_KIND(k)                                                                         \
  bool k##_available();                                                                             \
  size_t k##_packed_bytes(int N, int K);                                                            \
  void k##_pack(const float* w, int N, int K, uint8_t* out);                                        \
  void k##_rows(const uint8_t* packed, int N, int K, const float* x, int64_t xs, int64_t M, float* y, \
                const float* res, const Epilogue& e);
MLXK_PACKED_KIND(f32)
MLXK_PACKED_KIND(bf16)
MLXK_PACKED_KIND(int8)
#undef MLXK_PACKED_KIND

#if defined(__AVX512F__)
inline __m512 activate(__m512 v, int act) {
  if (act == kActGeluErf) {
    return (__m512)gelu_erf_v((vf)v);
  }
  return act == kActGeluTanh ? (__m512)gelu_tanh_v((vf)v) : v;
}

// Stores R rows x 32 columns of sums (row r's two vectors) at y + r * ldy + n0 through the
// epilogue; columns at or past N are neither read nor written.
template <int R>
inline void store_tile(__m512 (&acc)[R][2], float* y, int64_t ldy, const float* res, const Epilogue& e, int n0,
                       int N) {
  int left = N - n0;
  __mmask16 m0 = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
  __mmask16 m1 = left >= 32 ? __mmask16(0xffff) : left <= 16 ? __mmask16(0) : __mmask16((1u << (left - 16)) - 1);
  __m512 c0 = e.bias ? _mm512_maskz_loadu_ps(m0, e.bias + n0) : _mm512_setzero_ps();
  __m512 c1 = e.bias ? _mm512_maskz_loadu_ps(m1, e.bias + n0 + 16) : _mm512_setzero_ps();
  for (int r = 0; r < R; ++r) {
    __m512 v0 = _mm512_add_ps(acc[r][0], c0), v1 = _mm512_add_ps(acc[r][1], c1);
    if (res) {
      v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, res + r * e.rs + n0));
      v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, res + r * e.rs + n0 + 16));
    }
    if (e.act != kActNone) {
      v0 = activate(v0, e.act);
      v1 = activate(v1, e.act);
    }
    _mm512_mask_storeu_ps(y + r * ldy + n0, m0, v0);
    _mm512_mask_storeu_ps(y + r * ldy + n0 + 16, m1, v1);
  }
}
#endif

} // namespace mlxk
