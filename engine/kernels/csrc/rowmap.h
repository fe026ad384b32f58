// Row-wise primitives (activations, softmax, norms): f over every row of the first
// input into the first output, split over threads when large.
#pragma once

#include "arrays.h"
#include "parallel.h"

namespace mlxk {

inline constexpr int64_t kRowGrainElems = 1 << 15;  // below this, one thread

// f(r) for every row r of a [rows, cols] input.
template <class F>
void for_rows(int64_t rows, int64_t cols, F&& f) {
  int64_t grain = std::max<int64_t>(1, kRowGrainElems / std::max<int64_t>(cols, 1));
  parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      f(r);
    }
  });
}

// f(out_row, in_row, cols) for every row of inputs[0], into outputs[0].
template <class F>
void map_rows(mx::Stream stream, const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs, F f) {
  auto& enc = encoder(stream, inputs, outputs);
  enc.dispatch([x = Rows(inputs[0]), o = outputs[0].data<float>(), f]() {
    std::vector<float> buf;
    int64_t stride;
    const float* p = x.materialize(buf, stride);
    for_rows(x.rows, x.cols, [&](int64_t r) { f(o + r * x.cols, p + r * stride, int(x.cols)); });
  });
}

} // namespace mlxk
