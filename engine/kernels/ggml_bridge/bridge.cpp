// A C surface over ggml's CPU backend for the kernels' llama numerics, built by
// engine/kernels/ggml_build.py against the pinned ggml and opened by ggml_products.cpp.
// One product is a one-node ggml graph (mul_mat) computed on one persistent ggml threadpool;
// weights are repacked into ggml's CPU_REPACK buffer where llama.cpp would place them there,
// else read in place. ggml picks its kernels (repacked GEMV/GEMM, tinyBLAS, tiled K-quants,
// its chunked vec_dot) exactly as llama.cpp's CPU backend does for the same tensors.
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

namespace {

std::mutex g_mutex;  // one product at a time: the threadpool and buffers are shared
ggml_threadpool* g_pool = nullptr;
int g_threads = 1;
std::vector<uint8_t> g_context;  // tensor and graph headers (no_alloc)
std::vector<uint8_t> g_work;     // the quantized activations and ggml's scratch

// A weight held by ggml in the layout its CPU backend repacks it into (CPU_REPACK).
struct Held {
  ggml_context* ctx;
  ggml_backend_buffer_t buffer;
  ggml_tensor* weights;
};

ggml_backend_dev_t cpu_device() {
  return ggml_backend_reg_dev_get(ggml_backend_cpu_reg(), 0);
}

ggml_backend_buffer_type_t repack_type() {
  static ggml_backend_buffer_type_t found = [] {
    ggml_backend_reg_t reg = ggml_backend_cpu_reg();
    auto extra = reinterpret_cast<ggml_backend_dev_get_extra_bufts_t>(
        ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts"));
    for (ggml_backend_buffer_type_t* t = extra ? extra(cpu_device()) : nullptr; t && *t; ++t) {
      if (std::strcmp(ggml_backend_buft_name(*t), "CPU_REPACK") == 0) {
        return *t;
      }
    }
    return ggml_backend_buffer_type_t(nullptr);
  }();
  return found;
}

// Whether ggml's CPU backend would multiply `weights` from a repacked buffer (as llama.cpp
// asks it when it places a model's weights).
bool repacks(ggml_tensor* weights, int64_t k) {
  ggml_backend_buffer_type_t buft = repack_type();
  if (buft == nullptr) {
    return false;
  }
  std::vector<uint8_t> mem(ggml_tensor_overhead() * 3 + 256);
  ggml_init_params init = {mem.size(), mem.data(), true};
  ggml_context* ctx = ggml_init(init);
  ggml_tensor* rows = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, 8);
  ggml_tensor* op = ggml_mul_mat(ctx, weights, rows);
  ggml_backend_buffer_t probe = ggml_backend_buft_alloc_buffer(buft, 0);
  weights->buffer = probe;
  bool ok = ggml_backend_dev_supports_op(cpu_device(), op);
  weights->buffer = nullptr;
  ggml_backend_buffer_free(probe);
  ggml_free(ctx);
  return ok;
}

bool valid_type(int type) {
  return type >= 0 && type < GGML_TYPE_COUNT && ggml_get_type_traits_cpu(ggml_type(type))->vec_dot != nullptr &&
         ggml_get_type_traits(ggml_type(type))->blck_size > 0;
}

}  // namespace

extern "C" {

// Once per process: ggml's tables and a threadpool of n_threads (no polling while idle).
int mlxk_ggml_open(int n_threads) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_pool != nullptr) {
    return 0;
  }
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

// A copy of w [n, row_bytes(type, k)] repacked by ggml where its CPU backend repacks such
// a weight (an opaque handle, its bytes in *bytes), or null where it does not.
void* mlxk_ggml_hold(int type, const void* w, int64_t n, int64_t k, int64_t* bytes) {
  if (!valid_type(type) || mlxk_ggml_row_bytes(type, k) < 0) {
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  ggml_init_params init = {ggml_tensor_overhead() + 256, nullptr, true};
  ggml_context* ctx = ggml_init(init);
  ggml_tensor* weights = ggml_new_tensor_2d(ctx, ggml_type(type), k, n);
  if (!repacks(weights, k)) {
    ggml_free(ctx);
    return nullptr;
  }
  ggml_backend_buffer_t buffer = ggml_backend_alloc_ctx_tensors_from_buft(ctx, repack_type());
  if (buffer == nullptr) {
    ggml_free(ctx);
    return nullptr;
  }
  ggml_backend_tensor_set(weights, w, 0, ggml_nbytes(weights));
  *bytes = int64_t(ggml_backend_buffer_get_size(buffer));
  return new Held{ctx, buffer, weights};
}

void mlxk_ggml_release(void* held) {
  auto* h = static_cast<Held*>(held);
  if (h != nullptr) {
    std::lock_guard<std::mutex> lock(g_mutex);
    ggml_backend_buffer_free(h->buffer);
    ggml_free(h->ctx);
    delete h;
  }
}

// y [m, n] = x [m, k] @ w^T, w [n, row_bytes(type, k)] in ggml's blocks, or held (then w
// is the handle mlxk_ggml_hold gave); 0 on success.
int mlxk_ggml_matmul(int type, const void* w, int64_t n, int64_t k, const float* x, int64_t m, float* y,
                     int held) {
  if (!valid_type(type) || mlxk_ggml_row_bytes(type, k) < 0) {
    return -2;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_pool == nullptr) {
    return -1;
  }
  ggml_init_params init = {g_context.size(), g_context.data(), true};
  ggml_context* ctx = ggml_init(init);
  ggml_tensor* weights = held ? static_cast<const Held*>(w)->weights : ggml_new_tensor_2d(ctx, ggml_type(type), k, n);
  if (!held) {
    weights->data = const_cast<void*>(w);
  }
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
