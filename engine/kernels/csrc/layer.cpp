// The decoder layer primitive (layer.h): the same kernels as the separate primitives, in
// the same order on the same rows, so its results are theirs bit for bit; what it saves is
// the scheduling of a dozen primitives, their output arrays and the Python that builds them.
#include "layer.h"

#include <vector>

#include "arrays.h"
#include "attention_kernel.h"
#include "parallel.h"
#include "product.h"
#include "qkv.h"
#include "mlx/transforms.h"

namespace mlxk {

namespace {

// Walks the weights in LayerSpec's order.
struct Cursor {
  const std::vector<mx::array>& in;
  size_t at;
  const mx::array& next() {
    if (at >= in.size()) {
      throw std::invalid_argument("decoder_layer: fewer weights than the spec names");
    }
    return in[at++];
  }
};

// The product's arrays from the cursor, checked against its spec and input width K; its N.
int check_product(Cursor& c, const ProductSpec& s, int K, const char* what) {
  const std::string name = std::string("decoder_layer (") + what + ")";
  int N, k;
  if (s.bits == 0) {
    const auto& w = c.next();
    require_float32(w, name.c_str());
    if (w.ndim() != 2 || !w.flags().row_contiguous) {
      throw std::invalid_argument(name + ": a float weight must be row-contiguous [N, K]");
    }
    N = w.shape(0);
    k = w.shape(1);
  } else {
    const auto& w = c.next();
    const auto& scales = c.next();
    const auto& biases = c.next();
    check_quantized(w, scales, biases, s.group, s.bits);
    if (!w.flags().row_contiguous) {
      throw std::invalid_argument(name + ": weights must be row-contiguous");
    }
    N = w.shape(0);
    k = int(int64_t(w.shape(1)) * 32 / s.bits);
  }
  if (k != K) {
    throw std::invalid_argument(name + ": the weight's K does not match its input");
  }
  if (s.has_bias) {
    const auto& b = c.next();
    require_float32(b, name.c_str());
    if (b.ndim() != 1 || b.shape(0) != N || !b.flags().row_contiguous) {
      throw std::invalid_argument(name + ": the bias must be [N]");
    }
  }
  return N;
}

ProductView view_of(Cursor& c, const ProductSpec& s) {
  ProductView v;
  const auto& w = c.next();
  if (s.bits == 0) {
    v.w = w.data<float>();
    v.N = w.shape(0);
    v.K = w.shape(1);
  } else {
    const auto& scales = c.next();
    const auto& biases = c.next();
    v.q = QMat{w.data<uint8_t>(), static_cast<const float*>(scales.data<void>()),
               static_cast<const float*>(biases.data<void>()), int(w.shape(0)), int(w.shape(1) * 32 / s.bits),
               s.group, s.bits, scales.dtype() == mx::float16};
    v.N = v.q.N;
    v.K = v.q.K;
  }
  if (s.has_bias) {
    v.bias = c.next().data<float>();
  }
  return v;
}

void check_vector(Cursor& c, int n, const char* what) {
  const auto& a = c.next();
  require_float32(a, what);
  if (a.ndim() != 1 || a.shape(0) != n || !a.flags().row_contiguous) {
    throw std::invalid_argument(std::string("decoder_layer: ") + what + " has the wrong size");
  }
}

} // namespace

// A layer's weights as pointers (valid while its LayerWeights holds them).
struct LayerViews {
  const float* norm1;
  std::vector<ProductView> qkv;
  const float *q_norm = nullptr, *k_norm = nullptr, *inv;
  ProductView o;
  const float* norm2;
  std::vector<ProductView> gate_up;
  ProductView down;

  LayerViews(const std::vector<mx::array>& in, const LayerSpec& s) {
    Cursor c{in, 0};
    norm1 = c.next().data<float>();
    for (const auto& p : s.qkv) {
      qkv.push_back(view_of(c, p));
    }
    if (s.heads.has_norm) {
      q_norm = c.next().data<float>();
      k_norm = c.next().data<float>();
    }
    inv = c.next().data<float>();
    o = view_of(c, s.o);
    norm2 = c.next().data<float>();
    for (const auto& p : s.gate_up) {
      gate_up.push_back(view_of(c, p));
    }
    down = view_of(c, s.down);
  }
};

namespace {

// out rows (K apart) = rms_norm(x rows, w), as the products' prologue computes it.
void norm_rows(const float* x, int64_t xs, int rows, int K, const float* w, float eps, float* out) {
  parallel_for(rows, std::max(1, 4096 / K), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      rms_norm_row(out + r * K, x + r * xs, w, K, eps);
    }
  });
}

// Runs the products side by side on the same rows, their outputs concatenated (`width` apart).
void run_group(const std::vector<ProductView>& group, const float* x, int64_t xs, int rows, float* y,
               int64_t width) {
  int64_t col = 0;
  for (const auto& p : group) {
    p.run(x, xs, rows, y + col, width, nullptr, 0);
    col += p.N;
  }
}

// The layer's intermediate rows: kept by the thread between calls for a few rows (decode
// steps allocate nothing), made and freed per call for more (a prefill chunk's would
// otherwise stay held for good).
struct Scratch {
  std::vector<float> xn, qkv, q, attn, h, gate_up, act;
};
constexpr int kKeptRows = 16;

} // namespace

void DecoderLayer::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  // Inputs: x, offsets, [mask], keys, values. Outputs 1 and 2 take over (or copy) the
  // cache's buffers; output 3 is offsets + L.
  release_sibling_inputs(inputs, outputs);
  const auto& x = inputs[0];
  const auto& keys = inputs[inputs.size() - 2];
  const auto& values = inputs[inputs.size() - 1];
  const auto& offsets = inputs[1];
  const LayerSpec& spec = layer_->spec;
  auto& enc = mx::cpu::get_command_encoder(stream());
  for (const auto& a : inputs) {
    enc.set_input_array(a);
  }
  allocate(outputs[0]);
  allocate(outputs[3]);
  const bool copy_k = take_or_allocate(keys, outputs[1]);
  const bool copy_v = take_or_allocate(values, outputs[2]);
  for (auto& o : outputs) {
    enc.set_output_array(o);
  }
  const QkvHeads& hd = spec.heads;
  const int B = x.shape(0), L = x.shape(1), Dh = hd.head_dim;
  const int64_t cap = keys.shape(2);
  AttnProblem p{B, hd.q_heads, hd.kv_heads, L, at_ + L, Dh, Dh, spec.scale, causal_, 0};
  const int64_t qs[4] = {int64_t(hd.q_heads) * L * Dh, int64_t(L) * Dh, Dh, 1};
  const int64_t ks[4] = {hd.kv_heads * cap * Dh, cap * Dh, Dh, 1};
  std::copy(qs, qs + 4, p.qs);
  std::copy(ks, ks + 4, p.ks);
  std::copy(ks, ks + 4, p.vs);
  if (has_mask_) {
    const auto& m = inputs[inputs.size() - 3];
    const int lead = 4 - m.ndim();  // the mask broadcasts: its missing and size-1 axes stride 0
    for (int i = 0; i < 4; ++i) {
      p.ms[i] = i < lead || m.shape(i - lead) == 1 ? 0 : m.strides(i - lead);
    }
    (m.dtype() == mx::bool_ ? (void)(p.mask_bool = m.data<bool>()) : (void)(p.mask_add = m.data<float>()));
  }
  const LayerViews& lv = *layer_->views;
  QkvInputs qin{lv.inv, offsets.data<int32_t>(), int(offsets.size()), lv.q_norm, lv.k_norm};
  // The lambda holds the weights (not graph inputs) until it has run.
  enc.dispatch([held = layer_, qin, p, xr = Rows(x), at = at_, cap, L,
                kin = copy_k ? std::optional<Strided4>(Strided4(keys)) : std::nullopt,
                vin = copy_v ? std::optional<Strided4>(Strided4(values)) : std::nullopt,
                out = outputs[0].data<float>(), kout = outputs[1].data<float>(), vout = outputs[2].data<float>(),
                next = outputs[3].data<int32_t>()]() mutable {
    if (kin) {
      kin->copy_to(kout);
    }
    if (vin) {
      vin->copy_to(vout);
    }
    const LayerSpec& spec = held->spec;
    const LayerViews& v = *held->views;
    static thread_local Scratch kept;
    Scratch fresh;
    const int rows = int(xr.rows), D = int(xr.cols), Dh = spec.heads.head_dim;
    Scratch& s = rows <= kKeptRows ? kept : fresh;
    const int width = (spec.heads.q_heads + 2 * spec.heads.kv_heads) * Dh, qw = spec.heads.q_heads * Dh;
    int inner2 = 0;
    for (const auto& g : v.gate_up) {
      inner2 += g.N;
    }
    std::vector<float> xb;
    int64_t xs;
    const float* xp = xr.materialize(xb, xs);
    float* xn = grown(s.xn, size_t(rows) * D);
    float* qkv = grown(s.qkv, size_t(rows) * width);
    float* q = grown(s.q, size_t(rows) * qw);
    float* attn = grown(s.attn, size_t(rows) * qw);
    float* h = grown(s.h, size_t(rows) * D);
    float* gate_up = grown(s.gate_up, size_t(rows) * inner2);
    float* act = grown(s.act, size_t(rows) * inner2 / 2);

    norm_rows(xp, xs, rows, D, v.norm1, spec.eps1, xn);
    run_group(v.qkv, xn, D, rows, qkv, width);
    split_qkv(spec.rope, spec.heads, qin, qkv, width, p.B, L, HeadsOut{q, L, 0}, HeadsOut{kout, cap, at},
              HeadsOut{vout, cap, at});
    p.q = q;
    p.k = kout;
    p.v = vout;
    const int64_t os[4] = {int64_t(L) * qw, Dh, qw, 1};  // [B, L, Hq * Dh]
    attention_run(p, attn, os);
    v.o.run(attn, qw, rows, h, D, xp, xs);
    norm_rows(h, D, rows, D, v.norm2, spec.eps2, xn);
    run_group(v.gate_up, xn, D, rows, gate_up, inner2);
    const int inner = inner2 / 2;
    parallel_for(rows, std::max(1, 4096 / inner), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        silu_gate_row(act + r * inner, gate_up + r * inner2, gate_up + r * inner2 + inner, inner);
      }
    });
    v.down.run(act, inner, rows, out, D, h, D);
    for (int i = 0; i < qin.n_off; ++i) {
      next[i] = qin.off[i] + L;
    }
  });
}

bool DecoderLayer::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const DecoderLayer&>(other);
  return layer_ == o.layer_ && at_ == o.at_ && causal_ == o.causal_ && has_mask_ == o.has_mask_;
}

LayerWeights::LayerWeights(LayerSpec s, std::vector<mx::array> w) : spec(std::move(s)), weights(std::move(w)) {
  if (spec.qkv.empty() || spec.gate_up.empty()) {
    throw std::invalid_argument("decoder_layer: the spec names no qkv or gate_up product");
  }
  const QkvHeads& hd = spec.heads;
  const int Dh = hd.head_dim;
  if (hd.q_heads <= 0 || hd.kv_heads <= 0 || hd.q_heads % hd.kv_heads || Dh <= 0 || spec.rope.dims > Dh ||
      spec.rope.dims % 2) {
    throw std::invalid_argument("decoder_layer: q heads must be a multiple of kv heads, rope dims even <= head_dim");
  }
  if (weights.empty() || weights[0].ndim() != 1) {
    throw std::invalid_argument("decoder_layer: the first weight must be the first norm [D]");
  }
  dim = weights[0].shape(0);
  const int D = dim;
  Cursor c{weights, 0};
  check_vector(c, D, "the first norm");
  int width = 0;
  for (const auto& p : spec.qkv) {
    width += check_product(c, p, D, "qkv");
  }
  if (width != (hd.q_heads + 2 * hd.kv_heads) * Dh) {
    throw std::invalid_argument("decoder_layer: the qkv products' outputs do not make (Hq + 2 Hk) heads");
  }
  if (hd.has_norm) {
    check_vector(c, Dh, "q_norm");
    check_vector(c, Dh, "k_norm");
  }
  check_vector(c, spec.rope.dims / 2, "inv_freqs");
  if (check_product(c, spec.o, hd.q_heads * Dh, "o") != D) {
    throw std::invalid_argument("decoder_layer: o's output must be D wide");
  }
  check_vector(c, D, "the second norm");
  int inner2 = 0;
  for (const auto& p : spec.gate_up) {
    inner2 += check_product(c, p, D, "gate_up");
  }
  if (inner2 % 2 || check_product(c, spec.down, inner2 / 2, "down") != D) {
    throw std::invalid_argument("decoder_layer: down must map half of gate_up's width back to D");
  }
  if (c.at != weights.size()) {
    throw std::invalid_argument("decoder_layer: more weights than the spec names");
  }
  mx::eval(weights);  // read as they are by every call: never a lazy array
  views = std::make_unique<const LayerViews>(weights, spec);
}

LayerWeights::~LayerWeights() = default;

std::vector<mx::array> decoder_layer(const mx::array& x, std::shared_ptr<const LayerWeights> held,
                                     const mx::array& offsets, const mx::array& keys, const mx::array& values, int at, bool causal,
                                     const std::optional<mx::array>& mask, mx::StreamOrDevice s) {
  require_float32(x, "decoder_layer");
  if (!held) {
    throw std::invalid_argument("decoder_layer: no layer weights");
  }
  const LayerWeights& layer = *held;
  if (x.ndim() != 3 || x.shape(2) != layer.dim) {
    throw std::invalid_argument("decoder_layer: x must be [B, L, D] with D the norms' width");
  }
  const LayerSpec& spec = layer.spec;
  const QkvHeads& hd = spec.heads;
  const int B = x.shape(0), L = x.shape(1), Dh = hd.head_dim;
  if (offsets.dtype() != mx::int32 || offsets.ndim() != 1 || (offsets.size() != 1 && int(offsets.size()) != B)) {
    throw std::invalid_argument("decoder_layer: offsets must be int32 [1] or [B]");
  }
  for (const auto* buf : {&keys, &values}) {
    require_float32(*buf, "decoder_layer (cache)");
    if (buf->ndim() != 4 || buf->shape(0) != B || buf->shape(1) != hd.kv_heads || buf->shape(3) != Dh ||
        buf->shape() != keys.shape()) {
      throw std::invalid_argument("decoder_layer: keys and values must be [B, kv_heads, capacity, head_dim]");
    }
  }
  if (at < 0 || at + L > keys.shape(2)) {
    throw std::invalid_argument("decoder_layer: rows [at, at + L) do not fit the buffers");
  }
  std::vector<mx::array> inputs = {x, offsets};
  if (mask) {
    if (mask->dtype() != mx::bool_ && mask->dtype() != mx::float32) {
      throw std::invalid_argument("decoder_layer: the mask must be bool or float32");
    }
    bool fits = mask->ndim() <= 4;
    const int full[4] = {B, hd.q_heads, L, at + L};
    for (int i = 0; fits && i < mask->ndim(); ++i) {
      const int d = mask->shape(mask->ndim() - 1 - i);
      fits = d == 1 || d == full[3 - i];
    }
    if (!fits) {
      throw std::invalid_argument("decoder_layer: the mask does not broadcast to [B, Hq, L, at + L]");
    }
    inputs.push_back(*mask);
  }
  inputs.push_back(keys);
  inputs.push_back(values);
  auto prim = std::make_shared<DecoderLayer>(mx::to_stream(s), std::move(held), at, causal, mask.has_value());
  return mx::array::make_arrays({x.shape(), keys.shape(), values.shape(), offsets.shape()},
                                {mx::float32, mx::float32, mx::float32, mx::int32}, prim, inputs);
}

} // namespace mlxk
