// Reading primitive inputs in place and allocating outputs.
//
// eval_cpu runs when the graph is scheduled; the data of its inputs exists only
// once the work it dispatches (on the stream's thread) runs. So shapes and strides
// are read in eval_cpu and the data only inside dispatched work.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "mlx/array.h"
#include "mlx/backend/cpu/encoder.h"

namespace mlxk {

namespace mx = mlx::core;

// `v` grown to n elements at least, and its data: scratch kept between calls (a
// thread_local vector allocates nothing once its sizes have been seen).
template <class T>
T* grown(std::vector<T>& v, size_t n) {
  if (v.size() < n) {
    v.resize(n);
  }
  return v.data();
}

// A float32 input seen as rows of `cols` contiguous values, `stride` apart.
// When its layout does not allow that (broadcasts, transposed last axis), the
// rows are gathered into a private buffer inside the dispatched work.
struct Rows {
  const float* data;
  int64_t rows;
  int64_t cols;
  int64_t stride;
  bool gather;
  mx::Shape shape;
  mx::Strides strides;

  explicit Rows(const mx::array& a);
  // Called inside dispatched work: the rows, gathered into `buffer` if needed.
  const float* materialize(std::vector<float>& buffer, int64_t& row_stride) const;
};

inline Rows::Rows(const mx::array& a)
    : data(a.data<float>()), rows(1), cols(a.ndim() ? a.shape(-1) : 1), stride(cols),
      gather(false), shape(a.shape()), strides(a.strides()) {
  int n = a.ndim();
  rows = cols ? static_cast<int64_t>(a.size()) / cols : 0;
  if (a.flags().row_contiguous || n <= 1 || rows <= 1) {
    gather = n >= 1 && !a.flags().row_contiguous && a.strides(-1) != 1 && a.size() > 1;
    return;
  }
  if (a.strides(-1) != 1) {
    gather = true;
    return;
  }
  // Leading axes must collapse into one: stride[i] == stride[i+1] * shape[i+1].
  for (int i = 0; i + 2 < n; ++i) {
    if (a.shape(i) != 1 && a.strides(i) != a.strides(i + 1) * a.shape(i + 1)) {
      gather = true;
      return;
    }
  }
  stride = a.strides(n - 2);
  if (stride < cols) {  // e.g. broadcast rows (stride 0): read-only, still valid
    gather = stride != 0;
  }
}

inline const float* Rows::materialize(std::vector<float>& buffer, int64_t& row_stride) const {
  if (!gather) {
    row_stride = stride;
    return data;
  }
  buffer.resize(static_cast<size_t>(rows * cols));
  int n = static_cast<int>(shape.size());
  std::vector<int64_t> index(n, 0);
  for (int64_t e = 0; e < rows * cols; ++e) {
    int64_t loc = 0;
    for (int d = 0; d < n; ++d) {
      loc += index[d] * strides[d];
    }
    buffer[e] = data[loc];
    for (int d = n - 1; d >= 0; --d) {
      if (++index[d] < shape[d]) {
        break;
      }
      index[d] = 0;
    }
  }
  row_stride = cols;
  return buffer.data();
}

// A 4-D float input whose last axis is contiguous: in place, or gathered.
struct Dense4 {
  Rows rows;
  int64_t strides[4];
  // A 3-D [B, T, D] input is seen as [B, 1, T, D].
  explicit Dense4(const mx::array& a) : rows(a) {
    int n = a.ndim();
    for (int i = 0; i < 4; ++i) {
      int axis = n == 3 ? (i == 0 ? 0 : i - 1) : i;
      strides[i] = (n == 3 && i == 1) ? 0 : a.strides(axis);
    }
    if (n == 3) {
      rows.shape = {a.shape(0), 1, a.shape(1), a.shape(2)};
      rows.strides = {a.strides(0), 0, a.strides(1), a.strides(2)};
    }
  }
  const float* get(std::vector<float>& buffer, int64_t out[4]) const {
    if (strides[3] == 1 || rows.cols == 1) {
      std::copy(strides, strides + 4, out);
      return rows.data;
    }
    int64_t ignored;
    const float* p = rows.materialize(buffer, ignored);  // gather = true here
    int64_t s = 1;
    for (int i = 3; i >= 0; --i) {
      out[i] = s;
      s *= rows.shape[i];
    }
    return p;
  }
};

// A 4-D float32 input of any strides, copied row-contiguous inside dispatched work.
struct Strided4 {
  const float* data;
  int64_t shape[4], strides[4];

  explicit Strided4(const mx::array& a) : data(a.data<float>()) {
    for (int i = 0; i < 4; ++i) {
      shape[i] = a.shape(i);
      strides[i] = a.strides(i);
    }
  }
  void copy_to(float* dst) const {
    for (int64_t b = 0; b < shape[0]; ++b)
      for (int64_t h = 0; h < shape[1]; ++h)
        for (int64_t t = 0; t < shape[2]; ++t) {
          const float* s = data + b * strides[0] + h * strides[1] + t * strides[2];
          for (int64_t w = 0; w < shape[3]; ++w) {
            *dst++ = s[w * strides[3]];
          }
        }
  }
};

inline void require_float32(const mx::array& a, const char* op) {
  if (a.dtype() != mx::float32) {
    throw std::invalid_argument(std::string(op) + ": float32 inputs only");
  }
}

inline void allocate(mx::array& out) {
  out.set_data(mx::allocator::malloc(out.nbytes()));
}

// `out` (shaped as `in`) takes over `in`'s buffer when nothing else holds it and it is
// row-contiguous and whole; otherwise it gets a fresh one, and true says `in` must be
// copied into it.
inline bool take_or_allocate(const mx::array& in, mx::array& out) {
  if (in.is_donatable() && in.flags().row_contiguous && in.size() == in.data_size()) {
    out.copy_shared_buffer(in);
    return false;
  }
  allocate(out);
  return true;
}

// Each output of a primitive holds its own copy of the inputs until eval detaches them
// right after eval_cpu, so no input of a primitive with several outputs is ever
// donatable. Called first in eval_cpu, this drops the other outputs' copies early (what
// detach does next), leaving `inputs` (those of the output being evaluated) as the
// graph's only hold. Nothing is dropped while a transform keeps the graph (tracers).
inline void release_sibling_inputs(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  for (const auto& o : outputs) {
    if (o.is_tracer()) {
      return;
    }
  }
  for (auto& o : outputs) {
    if (&o.inputs() != &inputs) {
      o.inputs().clear();
    }
  }
}

// The stream's encoder, with every input and output registered; outputs are
// allocated row-contiguous unless `allocate_outputs` is false (a custom layout).
inline mx::cpu::CommandEncoder& encoder(mx::Stream stream, const std::vector<mx::array>& inputs,
                                        std::vector<mx::array>& outputs, bool allocate_outputs = true) {
  auto& enc = mx::cpu::get_command_encoder(stream);
  for (const auto& a : inputs) {
    enc.set_input_array(a);
  }
  for (auto& o : outputs) {
    if (allocate_outputs) {
      allocate(o);
    }
    enc.set_output_array(o);
  }
  return enc;
}

} // namespace mlxk
