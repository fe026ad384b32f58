// y = x W^T (+ bias) (+ residual) as one primitive, where nn.Linear on a 3-D input
// schedules four (flatten, transpose, matmul, unflatten) and the residual add a
// fifth. A few rows (decode): a SIMD matrix-vector kernel over the threads, four
// weight rows at a time. More rows: the process's CBLAS sgemm (the BLAS loaded
// before mlx, found with dlsym), with the bias and residual as its C operand.
#include <dlfcn.h>

#include "arrays.h"
#include "parallel.h"
#include "primitives.h"
#include "simd.h"

namespace mlxk {

namespace {

constexpr int kSmallRows = 16;

using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                       float, float*, int);

Sgemm global_sgemm() {
  static Sgemm fn = reinterpret_cast<Sgemm>(dlsym(RTLD_DEFAULT, "cblas_sgemm"));
  return fn;
}

// Rows [m0, m0 + R) of y for weight rows [n0, n1), four at a time.
template <int R>
void matvec_rows(const float* x, int64_t xs, const float* w, int K, int n0, int n1, float* y,
                 int64_t ys, const float* bias, const float* res, int64_t rs) {
  int n = n0;
  for (; n + 4 <= n1; n += 4) {
    vf acc[4][R];
    for (int i = 0; i < 4; ++i) {
      for (int r = 0; r < R; ++r) {
        acc[i][r] = splat(0.0f);
      }
    }
    const float* wr = w + int64_t(n) * K;
    int k = 0;
    for (; k + kW <= K; k += kW) {
      vf xv[R];
      for (int r = 0; r < R; ++r) {
        xv[r] = load(x + r * xs + k);
      }
      for (int i = 0; i < 4; ++i) {
        vf wv = load(wr + int64_t(i) * K + k);
        for (int r = 0; r < R; ++r) {
          acc[i][r] += wv * xv[r];
        }
      }
    }
    for (int i = 0; i < 4; ++i) {
      for (int r = 0; r < R; ++r) {
        float s = hsum(acc[i][r]);
        for (int kk = k; kk < K; ++kk) {
          s += wr[int64_t(i) * K + kk] * x[r * xs + kk];
        }
        s += bias ? bias[n + i] : 0.0f;
        y[r * ys + n + i] = s + (res ? res[r * rs + n + i] : 0.0f);
      }
    }
  }
  for (; n < n1; ++n) {
    for (int r = 0; r < R; ++r) {
      float s = 0.0f;
      for (int k = 0; k < K; ++k) {
        s += w[int64_t(n) * K + k] * x[r * xs + k];
      }
      s += bias ? bias[n] : 0.0f;
      y[r * ys + n] = s + (res ? res[r * rs + n] : 0.0f);
    }
  }
}

struct Problem {
  const float *x, *w, *bias, *res;
  int64_t xs, rs;
  int M, N, K;
  float* y;
};

void small(const Problem& p) {
  int64_t grain = std::max<int64_t>(4, (1 << 14) / std::max(1, p.K));
  parallel_for((p.N + 3) / 4, grain, [&](int64_t b0, int64_t b1) {
    int n0 = int(b0 * 4), n1 = std::min(p.N, int(b1 * 4));
    for (int m = 0; m < p.M; m += 4) {
      const float* x = p.x + m * p.xs;
      float* y = p.y + int64_t(m) * p.N;
      const float* res = p.res ? p.res + m * p.rs : nullptr;
      switch (std::min(4, p.M - m)) {
        case 1: matvec_rows<1>(x, p.xs, p.w, p.K, n0, n1, y, p.N, p.bias, res, p.rs); break;
        case 2: matvec_rows<2>(x, p.xs, p.w, p.K, n0, n1, y, p.N, p.bias, res, p.rs); break;
        case 3: matvec_rows<3>(x, p.xs, p.w, p.K, n0, n1, y, p.N, p.bias, res, p.rs); break;
        default: matvec_rows<4>(x, p.xs, p.w, p.K, n0, n1, y, p.N, p.bias, res, p.rs); break;
      }
    }
  });
}

void large(const Problem& p) {
  float beta = 0.0f;
  if (p.bias || p.res) {
    beta = 1.0f;
    for (int m = 0; m < p.M; ++m) {
      for (int n = 0; n < p.N; ++n) {
        p.y[int64_t(m) * p.N + n] = (p.bias ? p.bias[n] : 0.0f) + (p.res ? p.res[m * p.rs + n] : 0.0f);
      }
    }
  }
  // CblasRowMajor = 101, CblasNoTrans = 111, CblasTrans = 112
  global_sgemm()(101, 111, 112, p.M, p.N, p.K, 1.0f, p.x, int(p.xs), p.w, p.K, beta, p.y, p.N);
}

} // namespace

bool blas_available() {
  return global_sgemm() != nullptr;
}

namespace {

// The rows linear multiplies: x itself, or prologue(x) in `buffer` (K per row).
const float* prepare(const Rows& x, Prologue prologue, const float* norm, float eps, int K,
                     std::vector<float>& raw, std::vector<float>& buffer, int64_t& stride) {
  const float* p = x.materialize(raw, stride);
  if (prologue == Prologue::none && (stride >= K || x.rows == 1)) {
    return p;
  }
  buffer.resize(size_t(x.rows) * K);
  parallel_for(x.rows, std::max<int64_t>(1, 4096 / K), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = p + r * stride;
      float* out = buffer.data() + r * K;
      if (prologue == Prologue::rms_norm) {
        rms_norm_row(out, row, norm, K, eps);
      } else if (prologue == Prologue::silu_gate_halves) {
        silu_gate_row(out, row, row + K, K);
      } else {  // broadcast rows (stride 0): sgemm needs a real leading dimension
        std::copy(row, row + K, out);
      }
    }
  });
  stride = K;
  return buffer.data();
}

} // namespace

void Linear::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& out = outputs[0];
  allocate(out);
  auto& enc = mx::cpu::get_command_encoder(stream());
  for (const auto& a : inputs) {
    enc.set_input_array(a);
  }
  enc.set_output_array(out);
  const auto& w = inputs[1];
  size_t next = 2;
  const float* bias = has_bias_ ? inputs[next++].data<float>() : nullptr;
  Rows res = has_residual_ ? Rows(inputs[next++]) : Rows(inputs[0]);
  const float* norm = prologue_ == Prologue::rms_norm ? inputs[next].data<float>() : nullptr;
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (!(has_residual_ && i == 2 + has_bias_) && !inputs[i].flags().row_contiguous) {
      throw std::invalid_argument("linear: the weight, bias and norm must be row-contiguous");
    }
  }
  enc.dispatch([x = Rows(inputs[0]), wp = w.data<float>(), bias, res, has_res = has_residual_, norm,
                prologue = prologue_, eps = eps_, N = w.shape(0), K = w.shape(1), y = out.data<float>()]() {
    std::vector<float> raw, buffer, rb;
    Problem p{nullptr, wp, bias, nullptr, 0, 0, int(x.rows), N, K, y};
    p.x = prepare(x, prologue, norm, eps, K, raw, buffer, p.xs);
    if (has_res) {
      p.res = res.materialize(rb, p.rs);
    }
    (p.M <= kSmallRows || !global_sgemm()) ? small(p) : large(p);
  });
}

bool Linear::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const Linear&>(other);
  return has_bias_ == o.has_bias_ && has_residual_ == o.has_residual_ && prologue_ == o.prologue_ &&
         eps_ == o.eps_;
}

mx::array linear(const mx::array& x, const mx::array& w, const std::optional<mx::array>& bias,
                 const std::optional<mx::array>& residual, Prologue prologue,
                 const std::optional<mx::array>& norm, float eps, mx::StreamOrDevice s) {
  require_float32(x, "linear");
  require_float32(w, "linear (weight)");
  int K = w.ndim() == 2 ? w.shape(1) : -1;
  int in = prologue == Prologue::silu_gate_halves ? 2 * K : K;
  if (x.ndim() < 1 || w.ndim() != 2 || x.shape(-1) != in) {
    throw std::invalid_argument("linear: x [..., K] (or [..., 2K] for silu_gate_halves) and weight [N, K]");
  }
  mx::Shape shape = x.shape();
  shape.back() = w.shape(0);
  std::vector<mx::array> inputs = {x, w};
  for (const auto* p : {&bias, &residual}) {
    if (*p) {
      require_float32(**p, "linear (bias, residual)");
      inputs.push_back(**p);
    }
  }
  if (residual && residual->shape() != shape) {
    throw std::invalid_argument("linear: the residual must have the output's shape");
  }
  if ((prologue == Prologue::rms_norm) != norm.has_value()) {
    throw std::invalid_argument("linear: the rms_norm prologue takes a norm weight, the others none");
  }
  if (norm) {
    require_float32(*norm, "linear (norm)");
    if (norm->ndim() != 1 || norm->shape(0) != K) {
      throw std::invalid_argument("linear: the norm weight must be [K]");
    }
    inputs.push_back(*norm);
  }
  auto prim = std::make_shared<Linear>(mx::to_stream(s), bias.has_value(), residual.has_value(), prologue, eps);
  return mx::array(shape, mx::float32, prim, inputs);
}

} // namespace mlxk
