// Writing new quantized rows into a quantized KV cache's buffers in one primitive:
// six buffers (codes, scales, biases of keys and values, [B, H, capacity, W]) take
// rows [at, at + n) from six updates ([B, H, n, W]). A buffer nothing else holds is
// written in place; otherwise it is copied first.
#include <cstring>

#include "arrays.h"
#include "primitives.h"

namespace mlxk {

namespace {

void copy_rows(const mx::array& upd, mx::array& out, int at) {
  const int64_t B = upd.shape(0), H = upd.shape(1), n = upd.shape(2), W = upd.shape(3);
  const size_t item = upd.itemsize();
  const char* src = upd.data<char>();
  char* dst = out.data<char>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t t = 0; t < n; ++t) {
        const char* s = src + (b * upd.strides(0) + h * upd.strides(1) + t * upd.strides(2)) * item;
        char* d = dst + (b * out.strides(0) + h * out.strides(1) + (at + t) * out.strides(2)) * item;
        if (upd.strides(3) == 1) {
          std::memcpy(d, s, W * item);
        } else {
          for (int64_t w = 0; w < W; ++w) {
            std::memcpy(d + w * item, s + w * upd.strides(3) * item, item);
          }
        }
      }
    }
  }
}

} // namespace

void KVWrite::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& enc = mx::cpu::get_command_encoder(stream());
  std::vector<bool> copied(6);
  for (int i = 0; i < 6; ++i) {
    const auto& in = inputs[i];
    auto& out = outputs[i];
    enc.set_input_array(in);
    enc.set_input_array(inputs[6 + i]);
    if (in.is_donatable() && in.flags().row_contiguous && in.size() == in.data_size()) {
      out.copy_shared_buffer(in);
    } else {
      allocate(out);
      copied[i] = true;
    }
    enc.set_output_array(out);
  }
  enc.dispatch([in = inputs, out = outputs, copied, at = at_]() mutable {
    for (int i = 0; i < 6; ++i) {
      if (copied[i]) {
        copy_rows(in[i], out[i], 0);
      }
      copy_rows(in[6 + i], out[i], at);
    }
  });
}

bool KVWrite::is_equivalent(const mx::Primitive& other) const {
  return at_ == static_cast<const KVWrite&>(other).at_;
}

std::vector<mx::array> kv_write(const std::vector<mx::array>& buffers, const std::vector<mx::array>& rows, int at,
                                mx::StreamOrDevice s) {
  if (buffers.size() != 6 || rows.size() != 6) {
    throw std::invalid_argument("kv_write: six buffers and six updates");
  }
  std::vector<mx::Shape> shapes;
  std::vector<mx::Dtype> dtypes;
  for (int i = 0; i < 6; ++i) {
    const auto& b = buffers[i];
    const auto& r = rows[i];
    if (b.ndim() != 4 || r.ndim() != 4 || b.dtype() != r.dtype() || b.shape(0) != r.shape(0) ||
        b.shape(1) != r.shape(1) || b.shape(3) != r.shape(3) || at < 0 || at + r.shape(2) > b.shape(2)) {
      throw std::invalid_argument("kv_write: an update does not fit its buffer");
    }
    shapes.push_back(b.shape());
    dtypes.push_back(b.dtype());
  }
  std::vector<mx::array> inputs(buffers);
  inputs.insert(inputs.end(), rows.begin(), rows.end());
  auto stream = mx::to_stream(s);
  return mx::array::make_arrays(std::move(shapes), std::move(dtypes), std::make_shared<KVWrite>(stream, at),
                                inputs);
}

} // namespace mlxk
