// A C surface over ggml's CPU backend for the kernels' llama numerics, built by
// engine/kernels/ggml_build.py against the pinned ggml and opened by ggml_products.cpp.
// One product is a one-node ggml graph (mul_mat) over the caller's memory, computed on one
// persistent ggml threadpool: ggml picks its own kernels (tinyBLAS tiles, its chunked
// vec_dot), exactly as llama.cpp's CPU backend does for the same tensors.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"

namespace {

std::mutex g_mutex;  // one product at a time: the threadpool and buffers are shared
ggml_threadpool* g_pool = nullptr;
int g_threads = 1;
std::vector<uint8_t> g_context;  // tensor and graph headers (no_alloc)
std::vector<uint8_t> g_work;     // the quantized activations and ggml's scratch

bool valid_type(int type) {
  return type >= 0 && type < GGML_TYPE_COUNT && ggml_get_type_traits_cpu(ggml_type(type))->vec_dot != nullptr &&
         ggml_get_type_traits(ggml_type(type))->blck_size > 0;
}

}  // namespace

extern "C" {

// Once per process: ggml's tables and a threadpool of n_threads (no polling while idle).
// ggml's tiled K-quant kernels serve every row count, not only batches of 8 or more: a
// row's result then never depends on how many rows share the product.
int mlxk_ggml_open(int n_threads) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_pool != nullptr) {
    return 0;
  }
  setenv("GGML_CPU_TILED_MM_FORCE", "1", 1);  // read once, at ggml's first product
  ggml_cpu_init();
  g_threads = n_threads > 0 ? n_threads : 1;
  ggml_threadpool_params params = ggml_threadpool_params_default(g_threads);
  params.poll = 0;
  g_pool = ggml_threadpool_new(&params);
  g_context.resize(ggml_tensor_overhead() * 4 + ggml_graph_overhead() + 1024);
  return g_pool != nullptr ? 0 : -1;
}

// The type a weight type's dot product takes activations in; -1 where ggml has no dot product.
int mlxk_ggml_vec_dot_type(int type) {
  return valid_type(type) ? int(ggml_get_type_traits_cpu(ggml_type(type))->vec_dot_type) : -1;
}

// Bytes of a row of k values of `type` (k a multiple of its block); -1 where not.
int64_t mlxk_ggml_row_bytes(int type, int64_t k) {
  if (type < 0 || type >= GGML_TYPE_COUNT || k <= 0 || k % ggml_blck_size(ggml_type(type)) != 0) {
    return -1;
  }
  return int64_t(ggml_row_size(ggml_type(type), k));
}

// y [m, n] = x [m, k] @ w^T, w [n, row_bytes(type, k)] in ggml's blocks; 0 on success.
int mlxk_ggml_matmul(int type, const void* w, int64_t n, int64_t k, const float* x, int64_t m, float* y) {
  if (!valid_type(type) || mlxk_ggml_row_bytes(type, k) < 0) {
    return -2;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_pool == nullptr) {
    return -1;
  }
  ggml_init_params init = {g_context.size(), g_context.data(), true};
  ggml_context* ctx = ggml_init(init);
  ggml_tensor* weights = ggml_new_tensor_2d(ctx, ggml_type(type), k, n);
  weights->data = const_cast<void*>(w);
  ggml_tensor* rows = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, m);
  rows->data = const_cast<float*>(x);
  ggml_tensor* out = ggml_mul_mat(ctx, weights, rows);  // [n, m]: m rows of n values
  out->data = y;
  ggml_cgraph* graph = ggml_new_graph_custom(ctx, 4, false);
  ggml_build_forward_expand(graph, out);
  ggml_cplan plan = ggml_graph_plan(graph, g_threads, g_pool);
  if (g_work.size() < plan.work_size) {
    g_work.resize(plan.work_size);
  }
  plan.work_data = g_work.data();
  ggml_status status = ggml_graph_compute(graph, &plan);
  ggml_free(ctx);
  return status == GGML_STATUS_SUCCESS ? 0 : -3;
}

}  // extern "C"
