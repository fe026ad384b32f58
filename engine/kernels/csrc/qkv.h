// Splitting a fused qkv projection into heads (rope.cpp): per-head RMSNorm of q and k
// (when given), RoPE, and each head written where its HeadsOut says (a KV cache's
// buffers at its next row, or fresh [B, H, L, D] arrays).
#pragma once

#include <cstdint>

#include "primitives.h"

namespace mlxk {

// Where head hh of (batch b, position l) goes: data + ((b * heads + hh) * T + t0 + l) * D.
struct HeadsOut {
  float* data;
  int64_t T, t0;
  float* at(int64_t b, int heads, int hh, int64_t l, int D) const {
    return data + ((b * heads + hh) * T + t0 + l) * D;
  }
};

struct QkvInputs {
  const float* inv;  // inverse frequencies [dims / 2]
  const int32_t* off;  // positions of each batch row's first token: [1] or [B]
  int n_off;
  const float* qn;  // per-head norm weights, or null
  const float* kn;
};

// Runs inside dispatched work: row r = b * L + l of x (`stride` apart, (Hq + 2 Hk) * D
// each) normed and rotated into q and k, copied into v.
void split_qkv(const RopeParams& p, const QkvHeads& h, const QkvInputs& in, const float* x, int64_t stride, int B,
               int L, HeadsOut q, HeadsOut k, HeadsOut v);

} // namespace mlxk
