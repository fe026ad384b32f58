// One input row against 4- or 8-bit affine weights through integer dot products
// (AVX-512 VNNI, int_matvec.cpp; or AVX2 for 4 bits, int_matvec_avx2.cpp): x is split
// per block of 32 values into three signed 8-bit limbs,
// x ~ u * (a + b / 2^7 + c / 2^14) with u a power of two per block, so each value is
// within 2^-21 of its block's largest (float32 keeps 24 bits of its own), and the
// codes meet the limbs as bytes, 64 products per instruction, never as floats.
#pragma once

#include <vector>

#include "quantized.h"

// Which of the two builds of the path this target takes (none: neither is built).
#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define MLXK_INT_MATVEC_AVX2 0
#elif defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
#define MLXK_INT_MATVEC_AVX2 1
#else
#define MLXK_INT_MATVEC_AVX2 0
#endif

namespace mlxk {

// Whether this build has the integer path (the target has AVX-512 VNNI and BW, or AVX2).
bool int_matvec_built();
// Built, and not turned off by MLX_GRPC_INT_MATVEC=off (read once): the float kernels
// then take every row.
bool int_matvec_enabled();
// The code widths the path takes here: with AVX-512 VNNI 4 and 8, and 5 and 6 where the
// target also has AVX-512 VBMI (their bit streams unpacked to bytes); with AVX2 4; none
// when not enabled.
std::vector<int> int_matvec_bits();

// y[n] = x . dequantize(w)[n] (+ bias[n]) (+ res[n]) for every n; x has w.K values.
// False (nothing written) where the path does not apply: not built, bits not taken, a group
// size that does not tile a chunk, or x not finite.
bool int_matvec(const QMat& w, const float* x, float* y, const float* bias, const float* res);

} // namespace mlxk
