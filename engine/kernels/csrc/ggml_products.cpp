// llama.cpp's numerics: x @ W^T with W in its GGUF block layout, computed by ggml's CPU
// backend through the small C bridge ggml_build.py compiles against it (opened at run
// time, so the extension builds and runs without ggml). ggml quantizes x's rows to the
// weight type's vec_dot_type and runs its own kernels, as llama.cpp's CPU backend does.
#include <dlfcn.h>

#include <mutex>
#include <stdexcept>
#include <string>

#include "arrays.h"
#include "parallel.h"
#include "primitives.h"

namespace mlxk {

namespace {

struct Bridge {
  std::mutex mutex;
  int (*open)(int) = nullptr;
  int (*vec_dot_type)(int) = nullptr;
  int64_t (*row_bytes)(int, int64_t) = nullptr;
  int (*matmul)(int, const void*, int64_t, int64_t, const float*, int64_t, float*, int) = nullptr;
  void* (*hold)(int, const void*, int64_t, int64_t, int64_t*) = nullptr;
  void (*release)(void*) = nullptr;
};

Bridge& bridge() {
  static Bridge b;
  return b;
}

const Bridge& opened() {
  const Bridge& b = bridge();
  if (b.matmul == nullptr) {
    throw std::runtime_error("ggml products: ggml's CPU backend is not open (ggml_open)");
  }
  return b;
}

template <class F>
void find(void* handle, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(handle, name));
  if (fn == nullptr) {
    throw std::runtime_error(std::string("ggml products: the bridge lacks ") + name);
  }
}

} // namespace

void ggml_open(const std::string& bridge_library) {
  auto& b = bridge();
  std::lock_guard<std::mutex> lock(b.mutex);
  if (b.matmul != nullptr) {
    return;
  }
  void* handle = dlopen(bridge_library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw std::runtime_error(std::string("ggml products: cannot open ggml's CPU backend: ") + (why ? why : "?"));
  }
  Bridge found;
  find(handle, "mlxk_ggml_open", found.open);
  find(handle, "mlxk_ggml_vec_dot_type", found.vec_dot_type);
  find(handle, "mlxk_ggml_row_bytes", found.row_bytes);
  find(handle, "mlxk_ggml_matmul", found.matmul);
  find(handle, "mlxk_ggml_hold", found.hold);
  find(handle, "mlxk_ggml_release", found.release);
  if (found.open(max_threads()) != 0) {
    throw std::runtime_error("ggml products: ggml's threadpool did not start");
  }
  b.open = found.open;
  b.vec_dot_type = found.vec_dot_type;
  b.row_bytes = found.row_bytes;
  b.hold = found.hold;
  b.release = found.release;
  b.matmul = found.matmul;
}

GgmlWeight::~GgmlWeight() {
  if (handle != nullptr) {
    bridge().release(handle);
  }
}

std::shared_ptr<const GgmlWeight> ggml_hold(const mx::array& w, int type) {
  if (w.dtype() != mx::uint8 || w.ndim() != 2) {
    throw std::invalid_argument("ggml_hold: w must be uint8 blocks [N, bytes per row]");
  }
  const Bridge& b = opened();
  mx::array blocks = mx::contiguous(w);
  blocks.eval();
  const int64_t N = blocks.shape(0), row = blocks.shape(1);
  int64_t K = 0;
  for (int64_t k = 32; k <= row * 256; k += 32) {  // the K whose rows take `row` bytes
    if (b.row_bytes(type, k) == row) {
      K = k;
      break;
    }
  }
  if (K == 0) {
    throw std::invalid_argument("ggml_hold: rows of " + std::to_string(row) + " bytes are no whole row of ggml type " +
                                std::to_string(type));
  }
  int64_t bytes = 0;
  void* handle = b.hold(type, blocks.data<uint8_t>(), N, K, &bytes);
  if (handle == nullptr) {
    return nullptr;
  }
  return std::make_shared<const GgmlWeight>(handle, type, N, K, bytes);
}

bool ggml_is_open() {
  return bridge().matmul != nullptr;
}

int ggml_vec_dot_type(int type) {
  int t = opened().vec_dot_type(type);
  if (t < 0) {
    throw std::invalid_argument("ggml products: ggml has no CPU dot product for type " + std::to_string(type));
  }
  return t;
}

int64_t ggml_row_bytes(int type, int64_t K) {
  int64_t bytes = opened().row_bytes(type, K);
  if (bytes < 0) {
    throw std::invalid_argument("ggml products: " + std::to_string(K) + " values are no whole row of ggml type " +
                                std::to_string(type));
  }
  return bytes;
}

void GgmlMatmul::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& out = outputs[0];
  auto& enc = encoder(stream(), inputs, outputs);
  const bool held = held_ != nullptr;
  const void* weights = held ? held_->handle : inputs[1].data<void>();
  const int64_t N = held ? held_->n : int64_t(inputs[1].shape(0));
  enc.dispatch([x = Rows(inputs[0]), weights, held, keep = held_, N, K = int64_t(K_), type = type_,
                matmul = opened().matmul, o = out.data<float>()]() {
    std::vector<float> xb;
    int64_t xs;
    const float* xp = x.materialize(xb, xs);
    if (xs != K && x.rows > 1) {  // ggml reads rows back to back
      std::vector<float> packed(size_t(x.rows * K));
      for (int64_t m = 0; m < x.rows; ++m) {
        std::copy(xp + m * xs, xp + m * xs + K, packed.begin() + m * K);
      }
      xb.swap(packed);
      xp = xb.data();
    }
    if (matmul(type, weights, N, K, xp, x.rows, o, held ? 1 : 0) != 0) {
      throw std::runtime_error("ggml products: ggml's product failed");
    }
  });
}

bool GgmlMatmul::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const GgmlMatmul&>(other);
  return type_ == o.type_ && K_ == o.K_ && held_ == o.held_;
}

mx::array ggml_matmul(const mx::array& x, const mx::array& w, int type, mx::StreamOrDevice s) {
  if (x.dtype() != mx::float32 || x.ndim() < 1) {
    throw std::invalid_argument("ggml_matmul: x must be float32");
  }
  if (w.dtype() != mx::uint8 || w.ndim() != 2 || !w.flags().row_contiguous) {
    throw std::invalid_argument("ggml_matmul: w must be row-contiguous uint8 blocks [N, bytes per row]");
  }
  const int K = x.shape(-1);
  ggml_vec_dot_type(type);
  if (ggml_row_bytes(type, K) != w.shape(1)) {
    throw std::invalid_argument("ggml_matmul: w's rows do not hold x's " + std::to_string(K) + " columns");
  }
  mx::Shape shape = x.shape();
  shape.back() = w.shape(0);
  return mx::array(shape, mx::float32, std::make_shared<GgmlMatmul>(mx::to_stream(s), type, K, nullptr), {x, w});
}

mx::array ggml_matmul_held(const mx::array& x, const std::shared_ptr<const GgmlWeight>& w, mx::StreamOrDevice s) {
  if (x.dtype() != mx::float32 || x.ndim() < 1 || x.shape(-1) != w->k) {
    throw std::invalid_argument("ggml_matmul_held: x must be float32 with the weight's " + std::to_string(w->k) +
                                " columns");
  }
  mx::Shape shape = x.shape();
  shape.back() = int(w->n);
  return mx::array(shape, mx::float32, std::make_shared<GgmlMatmul>(mx::to_stream(s), w->type, int(w->k), w), {x});
}

} // namespace mlxk
