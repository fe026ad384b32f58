// Row helpers that reproduce MLX's CPU results bit for bit, for the steps where
// that is cheap: RMSNorm/LayerNorm (sequential float sums, mean = sum * (1/n),
// 1 / sqrt) and RoPE (MLX's Cephes sin/cos with fused multiply-adds, then
// separately rounded products). Files including this are compiled with
// -ffp-contract=off so no other multiply-add gets fused.
#pragma once

#include <cmath>
#include <cstdint>

namespace mlxk::exact {

// MLX's sin (Sine) or cos of x, as its CPU backend computes them.
template <bool Sine>
inline float sincos(float in) {
  if (std::fabs(in) > 8388608.0f) {
    return Sine ? std::sin(in) : std::cos(in);
  }
  bool sign_sin = in < 0;
  float x = std::fabs(in);
  float y = x * 1.27323954473516f;
  uint32_t emm2 = static_cast<uint32_t>(y);
  emm2 = (emm2 + 1) & ~1u;
  y = static_cast<float>(emm2);
  bool poly = (emm2 & 2) != 0;
  x = std::fma(y, -0.78515625f, x);
  x = std::fma(y, -2.4187564849853515625e-4f, x);
  x = std::fma(y, -3.77489497744594108e-8f, x);
  sign_sin = sign_sin ^ ((emm2 & 4) != 0);
  bool sign_cos = ((emm2 - 2) & 4) != 0;
  float z = x * x;
  float y1 = std::fma(z, 2.443315711809948e-5f, -1.388731625493765e-3f);
  float y2 = std::fma(z, -1.9515295891e-4f, 8.3321608736e-3f);
  y1 = std::fma(y1, z, 4.166664568298827e-2f);
  y2 = std::fma(y2, z, -1.6666654611e-1f);
  y1 = y1 * z;
  y2 = y2 * z;
  y1 = y1 * z;
  y2 = std::fma(x, y2, x);
  y1 = std::fma(z, -0.5f, y1);
  y1 = y1 + 1.0f;
  if (Sine) {
    float ys = poly ? y1 : y2;
    return sign_sin ? -ys : ys;
  }
  float yc = poly ? y2 : y1;
  return sign_cos ? yc : -yc;
}

// cos and sin of position * inv_freq[i] for i < half (MLX: positions are
// (t + offset) * scale in float32, theta = position * inv_freq).
inline void angles(float position, const float* inv_freq, int half, float* cos_out, float* sin_out) {
  for (int i = 0; i < half; ++i) {
    float theta = position * inv_freq[i];
    cos_out[i] = sincos<false>(theta);
    sin_out[i] = sincos<true>(theta);
  }
}

// RoPE of one head vector (the first `dims` of `n` elements rotate, the rest copy).
inline void rope(const float* x, float* out, int n, int dims, bool traditional, const float* c,
                 const float* s) {
  int half = dims / 2;
  for (int i = 0; i < half; ++i) {
    int a = traditional ? 2 * i : i;
    int b = traditional ? 2 * i + 1 : i + half;
    float x1 = x[a], x2 = x[b];
    out[a] = x1 * c[i] - x2 * s[i];
    out[b] = x1 * s[i] + x2 * c[i];
  }
  for (int i = dims; i < n; ++i) {
    out[i] = x[i];
  }
}

// 1 / sqrt(mean(x^2) + eps), the sum taken in order as MLX's CPU reduction does.
inline float rms_scale(const float* x, int n, float eps) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) {
    float sq = x[i] * x[i];
    sum = sum + sq;
  }
  float inv_n = static_cast<float>(1.0 / n);
  return 1.0f / std::sqrt(sum * inv_n + eps);
}

// out = (x * rms_scale) * w; w may be null (no weight).
inline void rms_norm(const float* x, const float* w, float* out, int n, float eps) {
  float r = rms_scale(x, n, eps);
  for (int i = 0; i < n; ++i) {
    float y = x[i] * r;
    out[i] = w ? y * w[i] : y;
  }
}

// out = ((x - mean) * 1 / sqrt(var + eps)) * w + b; w, b may be null.
inline void layer_norm(const float* x, const float* w, const float* b, float* out, int n, float eps) {
  float inv_n = static_cast<float>(1.0 / n);
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) {
    sum = sum + x[i];
  }
  float mu = sum * inv_n;
  float var = 0.0f;
  for (int i = 0; i < n; ++i) {
    float d = x[i] - mu;
    float sq = d * d;
    var = var + sq;
  }
  float r = 1.0f / std::sqrt(var * inv_n + eps);
  for (int i = 0; i < n; ++i) {
    float y = (x[i] - mu) * r;
    y = w ? y * w[i] : y;
    out[i] = b ? y + b[i] : y;
  }
}

} // namespace mlxk::exact
