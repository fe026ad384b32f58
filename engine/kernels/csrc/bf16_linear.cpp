// y = x W^T (+ bias) (+ residual) with bfloat16 products and float32 sums, on AVX-512 BF16's
// vdpbf16ps: the embedding precision bf16. W is packed once (bf16_pack): panels of 32 output
// columns, each k pair of a column two adjacent bf16 values, so one 64-byte load holds a k
// pair of 16 columns; x is rounded to bf16 (nearest even) per call. A micro-kernel holds 8
// rows x 32 columns in 16 accumulators; threads take chunks of 64 rows, which stay in cache
// while every panel passes by. Without AVX-512 BF16 at build time only bf16_available() is
// meaningful (false): the Python side then keeps ggml's product.
#include <cstring>
#include <vector>

#include "arrays.h"
#include "parallel.h"
#include "primitives.h"

#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif

namespace mlxk {

namespace {

constexpr int kNr = 32;  // output columns per panel
constexpr int kMr = 8;   // rows per micro-kernel
constexpr int kMc = 64;  // rows per thread chunk

uint16_t to_bf16(float f) {  // round to nearest even, as vcvtne2ps2bf16 does; NaN stays NaN
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return uint16_t((u >> 16) | 64);
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

#if defined(__AVX512BF16__)
template <int R>
void micro(const uint32_t* a, int64_t lda, const uint16_t* b, int kp_count, float* y, int64_t ldy,
           const float* bias, const float* res, int64_t rs, int n0, int N) {
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) {
    acc[r][0] = _mm512_setzero_ps();
    acc[r][1] = _mm512_setzero_ps();
  }
  for (int kp = 0; kp < kp_count; ++kp) {
    __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + int64_t(kp) * 2 * kNr);
    __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + int64_t(kp) * 2 * kNr + kNr);
    for (int r = 0; r < R; ++r) {
      __m512bh av = (__m512bh)_mm512_set1_epi32(int(a[r * lda + kp]));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
    }
  }
  int left = N - n0;
  __mmask16 m0 = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
  __mmask16 m1 = left >= 32 ? __mmask16(0xffff) : left <= 16 ? __mmask16(0) : __mmask16((1u << (left - 16)) - 1);
  __m512 c0 = bias ? _mm512_maskz_loadu_ps(m0, bias + n0) : _mm512_setzero_ps();
  __m512 c1 = bias ? _mm512_maskz_loadu_ps(m1, bias + n0 + 16) : _mm512_setzero_ps();
  for (int r = 0; r < R; ++r) {
    __m512 v0 = _mm512_add_ps(acc[r][0], c0), v1 = _mm512_add_ps(acc[r][1], c1);
    if (res) {
      v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, res + r * rs + n0));
      v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, res + r * rs + n0 + 16));
    }
    _mm512_mask_storeu_ps(y + r * ldy + n0, m0, v0);
    _mm512_mask_storeu_ps(y + r * ldy + n0 + 16, m1, v1);
  }
}

// x rows as bf16 pairs (one uint32 per k pair, zero-padded past K).
void round_rows(const float* x, int64_t xs, int64_t M, int K, int kp_count, uint32_t* out) {
  parallel_for(M, 16, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      const float* xr = x + m * xs;
      uint32_t* o = out + m * kp_count;
      int kp = 0;
      for (; 2 * kp + 32 <= K; kp += 16) {
        __m512bh c = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(xr + 2 * kp + 16), _mm512_loadu_ps(xr + 2 * kp));
        _mm512_storeu_si512(o + kp, (__m512i)c);
      }
      for (; kp < kp_count; ++kp) {
        uint32_t lo = to_bf16(xr[2 * kp]), hi = 2 * kp + 1 < K ? to_bf16(xr[2 * kp + 1]) : 0;
        o[kp] = lo | (hi << 16);
      }
    }
  });
}

void bf16_rows(const uint16_t* w, int N, int K, const float* x, int64_t xs, int64_t M, float* y,
               const float* bias, const float* res, int64_t rs) {
  int kp_count = (K + 1) / 2, panels = (N + kNr - 1) / kNr;
  std::vector<uint32_t> xb(size_t(M) * kp_count);
  round_rows(x, xs, M, K, kp_count, xb.data());
  int64_t chunks = (M + kMc - 1) / kMc;
  parallel_tasks(chunks, [&](int64_t c) {
    int64_t m0 = c * kMc, m1 = std::min<int64_t>(M, m0 + kMc);
    for (int p = 0; p < panels; ++p) {
      const uint16_t* b = w + int64_t(p) * kp_count * 2 * kNr;
      for (int64_t m = m0; m < m1;) {
        const uint32_t* a = xb.data() + m * kp_count;
        float* yr = y + m * N;
        const float* rr = res ? res + m * rs : nullptr;
        switch (std::min<int64_t>(kMr, m1 - m)) {
          case 8: micro<8>(a, kp_count, b, kp_count, yr, N, bias, rr, rs, p * kNr, N); m += 8; break;
          case 4: case 5: case 6: case 7:
            micro<4>(a, kp_count, b, kp_count, yr, N, bias, rr, rs, p * kNr, N); m += 4; break;
          default: micro<1>(a, kp_count, b, kp_count, yr, N, bias, rr, rs, p * kNr, N); m += 1; break;
        }
      }
    }
  });
}
#endif

} // namespace

bool bf16_available() {
#if defined(__AVX512BF16__)
  return true;
#else
  return false;
#endif
}

mx::array bf16_pack(const mx::array& w_in) {
  require_float32(w_in, "bf16_pack");
  if (w_in.ndim() != 2) {
    throw std::invalid_argument("bf16_pack: the weight is [N, K]");
  }
  mx::array w = mx::contiguous(w_in);
  w.eval();
  int N = w.shape(0), K = w.shape(1), kp_count = (K + 1) / 2, panels = (N + kNr - 1) / kNr;
  std::vector<uint16_t> out(size_t(panels) * kp_count * 2 * kNr, 0);
  const float* src = w.data<float>();
  for (int p = 0; p < panels; ++p) {
    for (int kp = 0; kp < kp_count; ++kp) {
      for (int j = 0; j < kNr; ++j) {
        int n = p * kNr + j;
        for (int t = 0; t < 2; ++t) {
          int k = 2 * kp + t;
          float v = n < N && k < K ? src[int64_t(n) * K + k] : 0.0f;
          out[((size_t(p) * kp_count + kp) * kNr + j) * 2 + t] = to_bf16(v);
        }
      }
    }
  }
  return mx::array(out.begin(), mx::Shape{panels, kp_count, 2 * kNr}, mx::uint16);
}

void Bf16Linear::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
#if defined(__AVX512BF16__)
  auto& out = outputs[0];
  auto& enc = encoder(stream(), inputs, outputs);
  const float* bias = has_bias_ ? inputs[2].data<float>() : nullptr;
  std::optional<Rows> residual;
  if (has_residual_) {
    residual.emplace(inputs[has_bias_ ? 3 : 2]);
  }
  enc.dispatch([x = Rows(inputs[0]), wp = inputs[1].data<uint16_t>(), N = n_, K = k_, bias, residual,
                y = out.data<float>()]() {
    std::vector<float> xb, rb;
    int64_t xs = 0, rs = 0;
    const float* xp = x.materialize(xb, xs);
    const float* res = residual ? residual->materialize(rb, rs) : nullptr;
    bf16_rows(wp, N, K, xp, xs, x.rows, y, bias, res, rs);
  });
#else
  throw std::runtime_error("bf16_linear: built without AVX-512 BF16");
#endif
}

bool Bf16Linear::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const Bf16Linear&>(other);
  return n_ == o.n_ && k_ == o.k_ && has_bias_ == o.has_bias_ && has_residual_ == o.has_residual_;
}

mx::array bf16_linear(const mx::array& x, const mx::array& packed, int N, const std::optional<mx::array>& bias,
                      const std::optional<mx::array>& residual, mx::StreamOrDevice s) {
  require_float32(x, "bf16_linear");
  if (!bf16_available()) {
    throw std::invalid_argument("bf16_linear: the kernels were built without AVX-512 BF16");
  }
  int K = x.ndim() ? x.shape(-1) : 0, kp_count = (K + 1) / 2, panels = (N + kNr - 1) / kNr;
  if (packed.dtype() != mx::uint16 || packed.ndim() != 3 || packed.shape(0) != panels ||
      packed.shape(1) != kp_count || packed.shape(2) != 2 * kNr) {
    throw std::invalid_argument("bf16_linear: packed is bf16_pack's output for a weight [N, K] with x [..., K]");
  }
  mx::Shape shape = x.shape();
  shape.back() = N;
  std::vector<mx::array> inputs = {x, mx::contiguous(packed)};
  if (bias) {
    require_float32(*bias, "bf16_linear (bias)");
    if (bias->size() != size_t(N)) {
      throw std::invalid_argument("bf16_linear: bias [N]");
    }
    inputs.push_back(mx::contiguous(*bias));
  }
  if (residual) {
    require_float32(*residual, "bf16_linear (residual)");
    inputs.push_back(mx::broadcast_to(*residual, shape));
  }
  return mx::array(shape, mx::float32,
                   std::make_shared<Bf16Linear>(mx::to_stream(s), N, K, bias.has_value(), residual.has_value()),
                   inputs);
}

} // namespace mlxk
