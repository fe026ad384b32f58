// One input row against 4- or 8-bit affine weights through integer dot products
// (AVX-512 VNNI): x is split per block of 32 values into three signed 8-bit limbs,
// x ~ u * (a + b / 2^7 + c / 2^14) with u a power of two per block, so each value is
// within 2^-21 of its block's largest (float32 keeps 24 bits of its own), and the
// codes meet the limbs as bytes, 64 products per instruction, never as floats.
#pragma once

#include <vector>

#include "quantized.h"

namespace mlxk {

// Whether this build has the integer path (the target has AVX-512 VNNI and BW).
bool int_matvec_built();
// Built, and not turned off by MLX_GRPC_INT_MATVEC=off (read once): the float kernels
// then take every row.
bool int_matvec_enabled();
// The code widths the path takes here: 4 and 8, and 5 and 6 where the target also has
// AVX-512 VBMI (their bit streams unpacked to bytes); none when not enabled.
std::vector<int> int_matvec_bits();

// y[n] = x . dequantize(w)[n] (+ bias[n]) (+ res[n]) for every n; x has w.K values.
// False (nothing written) where the path does not apply: not built, bits not taken, a group
// size that does not tile a chunk, or x not finite.
bool int_matvec(const QMat& w, const float* x, float* y, const float* bias, const float* res);

} // namespace mlxk
