// y = x W^T (+ bias) (+ residual) as one primitive, where nn.Linear on a 3-D input
// schedules four (flatten, transpose, matmul, unflatten) and the residual add a
// fifth. A few rows (decode): a SIMD matrix-vector kernel over the threads, four
// weight rows at a time. More rows: the process's CBLAS sgemm (the BLAS loaded
// before mlx, found with dlsym), with the bias and residual as its C operand.
#include <dlfcn.h>

#include "arrays.h"
#include "parallel.h"
#include "primitives.h"
#include "product.h"
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
        y[r * ys + n + i] = finish(s, bias, res ? res + r * rs : nullptr, n + i);
      }
    }
  }
  for (; n < n1; ++n) {
    for (int r = 0; r < R; ++r) {
      float s = 0.0f;
      for (int k = 0; k < K; ++k) {
        s += w[int64_t(n) * K + k] * x[r * xs + k];
      }
      y[r * ys + n] = finish(s, bias, res ? res + r * rs : nullptr, n);
    }
  }
}

struct Problem {
  const float *x, *w, *bias, *res;
  int64_t xs, rs;
  int M, N, K;
  float* y;
  int64_t ys;  // y's row stride
};

void small(const Problem& p) {
  int64_t grain = std::max<int64_t>(4, (1 << 14) / std::max(1, p.K));
  parallel_for((p.N + 3) / 4, grain, [&](int64_t b0, int64_t b1) {
    int n0 = int(b0 * 4), n1 = std::min(p.N, int(b1 * 4));
    for (int m = 0; m < p.M; m += 4) {
      const float* x = p.x + m * p.xs;
      float* y = p.y + m * p.ys;
      const float* res = p.res ? p.res + m * p.rs : nullptr;
      switch (std::min(4, p.M - m)) {
        case 1: matvec_rows<1>(x, p.xs, p.w, p.K, n0, n1, y, p.ys, p.bias, res, p.rs); break;
        case 2: matvec_rows<2>(x, p.xs, p.w, p.K, n0, n1, y, p.ys, p.bias, res, p.rs); break;
        case 3: matvec_rows<3>(x, p.xs, p.w, p.K, n0, n1, y, p.ys, p.bias, res, p.rs); break;
        default: matvec_rows<4>(x, p.xs, p.w, p.K, n0, n1, y, p.ys, p.bias, res, p.rs); break;
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
        p.y[m * p.ys + n] = (p.bias ? p.bias[n] : 0.0f) + (p.res ? p.res[m * p.rs + n] : 0.0f);
      }
    }
  }
  // CblasRowMajor = 101, CblasNoTrans = 111, CblasTrans = 112
  global_sgemm()(101, 111, 112, p.M, p.N, p.K, 1.0f, p.x, int(p.xs), p.w, p.K, beta, p.y, int(p.ys));
}

} // namespace

void float_rows(const float* w, int N, int K, const float* x, int64_t xs, int rows, float* y, int64_t ys,
                const float* bias, const float* res, int64_t rs) {
  Problem p{x, w, bias, res, xs, rs, rows, N, K, y, ys};
  (p.M <= kSmallRows || !global_sgemm()) ? small(p) : large(p);
}

bool blas_available() {
  return global_sgemm() != nullptr;
}

void sgemm_nt(int M, int N, int K, const float* x, int ldx, const float* w, int ldw, float beta, float* y,
              int ldy) {
  global_sgemm()(101, 111, 112, M, N, K, 1.0f, x, ldx, w, ldw, beta, y, ldy);
}

void Linear::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& out = outputs[0];
  auto& enc = encoder(stream(), inputs, outputs);
  const auto& w = inputs[1];
  if (!w.flags().row_contiguous) {
    throw std::invalid_argument("linear: the weight must be row-contiguous");
  }
  enc.dispatch([x = Rows(inputs[0]), extra = RowOpsInputs(inputs, 2, ops_), ops = ops_, wp = w.data<float>(),
                N = w.shape(0), K = w.shape(1), y = out.data<float>()]() {
    std::vector<float> raw, buffer, rb;
    int64_t xs, rs = 0;
    const float* xp = prologue_rows(x, ops.prologue, extra.norm, ops.eps, K, raw, buffer, xs);
    const float* res = ops.has_residual ? extra.residual.materialize(rb, rs) : nullptr;
    float_rows(wp, N, K, xp, xs, int(x.rows), y, N, extra.bias, res, rs);
  });
}

bool Linear::is_equivalent(const mx::Primitive& other) const {
  return ops_ == static_cast<const Linear&>(other).ops_;
}

mx::array linear(const mx::array& x, const mx::array& w, RowOps ops, const std::optional<mx::array>& bias,
                 const std::optional<mx::array>& residual, const std::optional<mx::array>& norm,
                 mx::StreamOrDevice s) {
  require_float32(x, "linear");
  require_float32(w, "linear (weight)");
  int K = w.ndim() == 2 ? w.shape(1) : -1;
  int in = ops.prologue == Prologue::silu_gate_halves ? 2 * K : K;
  if (x.ndim() < 1 || w.ndim() != 2 || x.shape(-1) != in) {
    throw std::invalid_argument("linear: x [..., K] (or [..., 2K] for silu_gate_halves) and weight [N, K]");
  }
  mx::Shape shape = x.shape();
  shape.back() = w.shape(0);
  std::vector<mx::array> inputs = {x, w};
  push_row_ops(inputs, ops, shape, K, bias, residual, norm, "linear");
  return mx::array(shape, mx::float32, std::make_shared<Linear>(mx::to_stream(s), ops), inputs);
}

} // namespace mlxk
