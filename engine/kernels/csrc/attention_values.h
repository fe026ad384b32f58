// The values product of the attention kernel: acc rows += P . V, the accumulators
// of up to MR rows x NV vectors kept in registers (templates per head size).
#pragma once

#include <algorithm>
#include <cstdint>

#include "simd.h"

namespace mlxk::attention_values {

constexpr int kRegs = kW >= 16 ? 28 : 14;

// acc rows += P . V for up to MR rows, NV vectors per value row (kept in registers).
template <int NV, int MR>
void pv_tile(float* acc, int64_t astride, const float* P, int64_t prs, int64_t pjs,
             const float* corr, int nrows, const float* v, int64_t vstride, int nk) {
  vf o[MR][NV];
  for (int r = 0; r < MR; ++r) {
    for (int c = 0; c < NV; ++c) {
      o[r][c] = r < nrows ? load(acc + r * astride + c * kW) * corr[r] : splat(0.0f);
    }
  }
  for (int j = 0; j < nk; ++j) {
    const float* vr = v + j * vstride;
    vf vj[NV];
    for (int c = 0; c < NV; ++c) {
      vj[c] = load(vr + c * kW);
    }
    for (int r = 0; r < MR; ++r) {
      float pr = P[r * prs + j * pjs];
      for (int c = 0; c < NV; ++c) {
        o[r][c] += pr * vj[c];
      }
    }
  }
  for (int r = 0; r < nrows; ++r) {
    for (int c = 0; c < NV; ++c) {
      store(acc + r * astride + c * kW, o[r][c]);
    }
  }
}

template <int NV>
void pv_rows(float* acc, int64_t astride, const float* P, int64_t prs, int64_t pjs,
             const float* corr, int nrows, const float* v, int64_t vstride, int nk, int) {
  constexpr int MR = std::max(1, std::min(4, (kRegs - NV) / NV));
  for (int r = 0; r < nrows; r += MR) {  // as many rows as there are (decode blocks have few)
    const int n = std::min(MR, nrows - r);
    float* a = acc + r * astride;
    const float* pr = P + r * prs;
    if (n == MR) {
      pv_tile<NV, MR>(a, astride, pr, prs, pjs, corr + r, n, v, vstride, nk);
    } else if (n == 3) {
      pv_tile<NV, std::min(3, MR)>(a, astride, pr, prs, pjs, corr + r, n, v, vstride, nk);
    } else if (n == 2) {
      pv_tile<NV, std::min(2, MR)>(a, astride, pr, prs, pjs, corr + r, n, v, vstride, nk);
    } else {
      pv_tile<NV, 1>(a, astride, pr, prs, pjs, corr + r, n, v, vstride, nk);
    }
  }
}

inline void pv_generic(float* acc, int64_t astride, const float* P, int64_t prs, int64_t pjs,
                const float* corr, int nrows, const float* v, int64_t vstride, int nk, int nv) {
  for (int r = 0; r < nrows; ++r) {
    float* a = acc + r * astride;
    for (int c = 0; c < nv; ++c) {
      store(a + c * kW, load(a + c * kW) * corr[r]);
    }
    for (int j = 0; j < nk; ++j) {
      float pr = P[r * prs + j * pjs];
      for (int c = 0; c < nv; ++c) {
        store(a + c * kW, load(a + c * kW) + pr * load(v + j * vstride + c * kW));
      }
    }
  }
}

using PvFn = void (*)(float*, int64_t, const float*, int64_t, int64_t, const float*, int,
                      const float*, int64_t, int, int);

inline PvFn pv_for(int nv) {
  switch (nv) {
    case 1: return pv_rows<1>;
    case 2: return pv_rows<2>;
    case 3: return pv_rows<3>;
    case 4: return pv_rows<4>;
    case 5: return pv_rows<5>;
    case 6: return pv_rows<6>;
    case 8: return pv_rows<8>;
    default: return pv_generic;
  }
}

} // namespace mlxk::attention_values
