// The attention kernel: one block of query rows of one (batch, kv head) against a
// range of keys, with an online softmax (running max, sum and weighted values), so
// scores never exist beyond one block of keys. Grouped-query heads sharing a kv
// head are rows of the same block: each key and value row is read once for all.
#pragma once

#include <cstdint>

namespace mlxk {

// Keys or values in MLX's affine quantization (bits 8 or 4, groups along D): row t of
// (batch b, kv head h) at codes + b * cs[0] + h * cs[1] + t * cs[2] (bytes), its scales
// and biases likewise (floats); each row's own elements contiguous.
struct QuantRows {
  const uint8_t* codes = nullptr;
  const float* scales = nullptr;
  const float* biases = nullptr;
  int64_t cs[3] = {0, 0, 0}, ss[3] = {0, 0, 0}, bs[3] = {0, 0, 0};
};

struct AttnProblem {
  int B, Hq, Hk, L, S, D, Dv;
  float scale;
  bool causal;
  int window;  // > 0: keys at most window - 1 positions before the query
  const float* q;
  const float* k;
  const float* v;
  int64_t qs[4], ks[4], vs[4];  // strides of q [B,Hq,L,D], k [B,Hk,S,D], v [B,Hk,S,Dv]
  const bool* mask_bool;  // broadcast to [B,Hq,L,S] by the strides ms, or null
  const float* mask_add;
  int64_t ms[4];
  // Packed sequences (L == S): the query at position t sees keys [seg_lo[t], seg_hi[t]).
  const int32_t* seg_lo;
  const int32_t* seg_hi;
  // bits > 0: k and v are unused; keys and values are read from kq and vq, a block
  // of rows dequantized at a time.
  int bits = 0, group = 0;
  QuantRows kq, vq;

  int rep() const { return Hq / Hk; }
  // Query row i of a kv head's block sits at position i / rep, head hk*rep + i % rep.
  int row_pos(int i) const { return i / rep(); }
  int row_head(int hk, int i) const { return hk * rep() + i % rep(); }
  // The keys row i may see: [lo, hi).
  int key_lo(int i) const {
    int lo = window > 0 ? row_pos(i) + (S - L) - window + 1 : 0;
    lo = seg_lo && seg_lo[row_pos(i)] > lo ? seg_lo[row_pos(i)] : lo;
    return lo > 0 ? lo : 0;
  }
  int key_hi(int i) const {
    int hi = causal ? row_pos(i) + (S - L) + 1 : S;
    hi = seg_hi && seg_hi[row_pos(i)] < hi ? seg_hi[row_pos(i)] : hi;
    return hi < S ? hi : S;
  }
};

// Rows [i0, i1) of kv head hk in batch b, keys [s0, s1).
struct RowBlock {
  int b, hk, i0, i1, s0, s1;
};

// Per row: the running max m, the sum l of exp(score - m), and acc = the sum of
// exp(score - m) * value (Dv floats, `stride` apart).
struct Partial {
  float* m;
  float* l;
  float* acc;
  int64_t stride;
};

// Rows per block the kernels take at most.
int attention_block_rows();

// Accumulates the block into `out` (initialised here: m = -inf, l = 0, acc = 0).
void attend_block(const AttnProblem& p, const RowBlock& blk, const Partial& out);

// The whole problem over the threads: out[b, head, l, :] at out + b * os[0] + head * os[1] +
// l * os[2] (attention.cpp).
void attention_run(const AttnProblem& p, float* out, const int64_t* os);

} // namespace mlxk
