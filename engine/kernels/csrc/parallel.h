// Splitting work over threads with OpenMP. When Intel MKL serves MLX's matmuls its
// OpenMP runtime (libiomp5, loaded first) also provides the GNU OpenMP entry points
// this code calls, so kernels and matmuls share one team of threads instead of
// fighting over the cores.
#pragma once

#include <algorithm>
#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace mlxk {

inline int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// Calls f(begin, end) over [0, n) split into contiguous ranges, one per thread;
// runs inline when n is below 2 * grain (not worth waking a thread).
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  int64_t threads = std::min<int64_t>(max_threads(), grain > 0 ? n / grain : n);
  if (threads <= 1) {
    if (n > 0) {
      f(int64_t(0), n);
    }
    return;
  }
#ifdef _OPENMP
#pragma omp parallel num_threads(static_cast<int>(threads))
  {
    int64_t t = omp_get_thread_num();
    int64_t count = omp_get_num_threads();
    int64_t begin = n * t / count;
    int64_t end = n * (t + 1) / count;
    if (begin < end) {
      f(begin, end);
    }
  }
#else
  f(int64_t(0), n);
#endif
}

// Calls f(i) for every task i in [0, n), handed out dynamically (uneven tasks).
template <class F>
void parallel_tasks(int64_t n, F&& f) {
  int64_t threads = std::min<int64_t>(max_threads(), n);
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) {
      f(i);
    }
    return;
  }
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(static_cast<int>(threads))
  for (int64_t i = 0; i < n; ++i) {
    f(i);
  }
#else
  for (int64_t i = 0; i < n; ++i) {
    f(i);
  }
#endif
}

} // namespace mlxk
