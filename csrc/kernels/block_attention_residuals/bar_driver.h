// Small scalar helpers shared by the forward and backward drivers (baseline translation units only:
// they use the inline conversions of scalar_types.h, which must not be compiled with ISA flags).
#pragma once
#include <cmath>
#include <cstdint>

#include "../common/scalar_types.h"
#include "bar_rows.h"

namespace op_plugin {
namespace bar {

// sw[h] = norm_weight[h] * proj_weight[h], in the accumulation type.
template <class T>
void fill_sw(const T* norm_weight, const T* proj_weight, int64_t H, acc_t<T>* sw) {
  using A = acc_t<T>;
  for (int64_t h = 0; h < H; ++h)
    sw[h] = static_cast<A>(to_float(norm_weight[h])) * static_cast<A>(to_float(proj_weight[h]));
}

// x = softmax(x) over n >= 1 entries: exp(x - max) / sum, in increasing index order.
template <class A>
void softmax_inplace(A* x, int64_t n) {
  A m = x[0];
  for (int64_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
  A sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  for (int64_t i = 0; i < n; ++i) x[i] /= sum;
}

// The rows of token t: block_res[t, 0..N-1, :] and partial_block[t, :].
template <class T>
RowSet<T> token_rows(const T* block_res, const T* partial_block, int64_t t, int64_t N, int64_t H) {
  return RowSet<T>{block_res + t * N * H, partial_block + t * H, N, H};
}

// Elements per row of a per-chunk workspace array, rounded up to whole cache lines so two chunks
// run by different threads never share a line.
template <class A>
int64_t padded_row(int64_t elements) {
  constexpr int64_t kPerLine = 64 / static_cast<int64_t>(sizeof(A));
  return (elements + kPerLine - 1) / kPerLine * kPerLine;
}

}  // namespace bar
}  // namespace op_plugin
