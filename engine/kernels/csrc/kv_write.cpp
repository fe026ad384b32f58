// Writing new quantized rows into a quantized KV cache's buffers in one primitive:
// six buffers (codes, scales, biases of keys and values, [B, H, capacity, W]) take
// rows [at, at + n) from six updates ([B, H, n, W]). A buffer nothing else holds is
// written in place; otherwise it is copied first.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

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

// One group of `group` floats in MLX's affine quantization, exactly as mx.quantize's
// CPU path computes it (so codes, scales and biases are bit-identical).
void quantize_group(const float* w, int64_t ws, int group, int bits, uint8_t* codes, float* scale_out,
                    float* bias_out) {
  const float n_bins = float((1 << bits) - 1), eps = 1e-7f;
  float w_min = std::numeric_limits<float>::infinity(), w_max = -w_min;
  for (int j = 0; j < group; ++j) {
    w_max = std::max(w_max, w[j * ws]);
    w_min = std::min(w_min, w[j * ws]);
  }
  bool mask = std::abs(w_min) > std::abs(w_max);
  float scale = std::max((w_max - w_min) / n_bins, eps);
  scale = mask ? scale : -scale;
  float edge = mask ? w_min : w_max;
  float q0 = std::rint(edge / scale);
  float bias = 0;
  if (q0 != 0) {
    scale = edge / q0;
    bias = edge;
  }
  const int per_byte = 8 / bits;
  for (int j = 0; j < group; j += per_byte) {
    uint32_t byte = 0;
    for (int k = 0; k < per_byte; ++k) {
      float e = std::rint((w[(j + k) * ws] - bias) / scale);
      e = std::min(std::max(e, 0.0f), n_bins);
      byte |= uint32_t(e) << (k * bits);
    }
    codes[j / per_byte] = uint8_t(byte);
  }
  *scale_out = scale;
  *bias_out = bias;
}

// Float rows x [B, H, n, D] quantized into rows [at, at + n) of codes, scales, biases.
void quantize_rows(const mx::array& x, mx::array& codes, mx::array& scales, mx::array& biases, int at, int group,
                   int bits) {
  const int64_t B = x.shape(0), H = x.shape(1), n = x.shape(2), D = x.shape(3), G = D / group;
  const float* src = x.data<float>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t t = 0; t < n; ++t) {
        const float* row = src + b * x.strides(0) + h * x.strides(1) + t * x.strides(2);
        uint8_t* c = reinterpret_cast<uint8_t*>(codes.data<uint32_t>() + b * codes.strides(0) +
                                                h * codes.strides(1) + (at + t) * codes.strides(2));
        float* sc = scales.data<float>() + b * scales.strides(0) + h * scales.strides(1) + (at + t) * scales.strides(2);
        float* bi = biases.data<float>() + b * biases.strides(0) + h * biases.strides(1) + (at + t) * biases.strides(2);
        for (int64_t g = 0; g < G; ++g) {
          quantize_group(row + g * group * x.strides(3), x.strides(3), group, bits, c + g * group * bits / 8,
                         sc + g, bi + g);
        }
      }
    }
  }
}

} // namespace

void KVWrite::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& enc = mx::cpu::get_command_encoder(stream());
  std::vector<bool> copied(6);
  for (size_t i = 6; i < inputs.size(); ++i) {
    enc.set_input_array(inputs[i]);
  }
  for (int i = 0; i < 6; ++i) {
    const auto& in = inputs[i];
    auto& out = outputs[i];
    enc.set_input_array(in);
    if (in.is_donatable() && in.flags().row_contiguous && in.size() == in.data_size()) {
      out.copy_shared_buffer(in);
    } else {
      allocate(out);
      copied[i] = true;
    }
    enc.set_output_array(out);
  }
  enc.dispatch([in = inputs, out = outputs, copied, at = at_, group = group_, bits = bits_]() mutable {
    for (int i = 0; i < 6; ++i) {
      if (copied[i]) {
        copy_rows(in[i], out[i], 0);
      }
      if (!bits) {
        copy_rows(in[6 + i], out[i], at);
      }
    }
    if (bits) {  // keys and values quantized straight into place
      quantize_rows(in[6], out[0], out[1], out[2], at, group, bits);
      quantize_rows(in[7], out[3], out[4], out[5], at, group, bits);
    }
  });
}

bool KVWrite::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const KVWrite&>(other);
  return at_ == o.at_ && group_ == o.group_ && bits_ == o.bits_;
}

std::vector<mx::array> kv_quantize_write(const std::vector<mx::array>& buffers, const mx::array& keys,
                                         const mx::array& values, int at, int group, int bits, mx::StreamOrDevice s) {
  if (buffers.size() != 6 || (bits != 8 && bits != 4) || group <= 0) {
    throw std::invalid_argument("kv_quantize_write: six buffers, bits 8 or 4");
  }
  std::vector<mx::Shape> shapes;
  std::vector<mx::Dtype> dtypes;
  for (int i = 0; i < 6; ++i) {
    const auto& b = buffers[i];
    const auto& x = i < 3 ? keys : values;
    require_float32(x, "kv_quantize_write");
    int width = i % 3 == 0 ? x.shape(3) * bits / 32 : x.shape(3) / group;
    if (x.ndim() != 4 || x.shape(3) % group != 0 || b.ndim() != 4 || b.shape(0) != x.shape(0) ||
        b.shape(1) != x.shape(1) || b.shape(3) != width || at < 0 || at + x.shape(2) > b.shape(2) ||
        b.dtype() != (i % 3 == 0 ? mx::uint32 : mx::float32)) {
      throw std::invalid_argument("kv_quantize_write: the rows do not fit the buffers");
    }
    shapes.push_back(b.shape());
    dtypes.push_back(b.dtype());
  }
  std::vector<mx::array> inputs(buffers);
  inputs.push_back(keys);
  inputs.push_back(values);
  auto stream = mx::to_stream(s);
  return mx::array::make_arrays(std::move(shapes), std::move(dtypes),
                                std::make_shared<KVWrite>(stream, at, group, bits), inputs);
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
