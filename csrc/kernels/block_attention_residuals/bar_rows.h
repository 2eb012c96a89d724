// Row kernels of Block Attention Residuals: the hot loops over H, one table per ISA level.
//
// The drivers (block_attention_residuals*.cpp) loop over tokens t, do the O(N) scalar math of a
// token (rsqrt, softmax, gradient coefficients) and call these kernels for the O(N * H) work.
// Every kernel has a vector body and a scalar tail, accumulates in acc_t<T> (float; double for
// double) and never allocates. Implementations:
//   bar_rows_scalar.cpp   portable scalar code, every dtype (the reference for the others)
//   bar_rows.avx2.cpp     AVX2 + FMA + F16C, float / Half / BFloat16
//   bar_rows.avx512.cpp   AVX-512 F/BW/VL/DQ + FMA + F16C, float / Half / BFloat16
// double always uses the scalar table (it exists for gradcheck, not for speed).
#pragma once
#include <cstdint>

#include "../common/scalar_types.h"
#include "op_plugin/isa.h"

namespace op_plugin {
namespace bar {

// The rows v[0..n] of one token: v[i] = blocks + i * H for i < n, v[n] = partial.
template <class T>
struct RowSet {
  const T* blocks;   // n rows of H, contiguous
  const T* partial;  // 1 row of H
  int64_t n;         // N
  int64_t H;
  const T* row(int64_t i) const { return i < n ? blocks + i * H : partial; }
};

// Forward, second pass:  out[h] = sum_{i=0..n} p[i] * v[i][h]   (i in increasing order)
template <class T>
struct MixArgs {
  RowSet<T> v;
  const acc_t<T>* p;  // n + 1 softmax weights
  T* out;             // H
  bool stream;        // non-temporal stores allowed (used only where aligned)
};

// Backward, second pass, for every row i = 0..n and h < H:
//   gv[i][h] = a[i] * gh[h] + b[i] * sw[h] + c[i] * v[i][h]
//   gsw[h]  += sum_{i=0..n} b[i] * v[i][h]          (the sum over i first, then one add)
template <class T>
struct GradMixArgs {
  RowSet<T> v;
  const T* gh;             // grad_hidden_states row, H
  const acc_t<T>* sw;      // norm_weight * proj_weight, H
  const acc_t<T>* a;       // n + 1 coefficients (probs)
  const acc_t<T>* b;       // n + 1 coefficients (gs * inv)
  const acc_t<T>* c;       // n + 1 coefficients (-gs * dot(sw, v) * inv^3 / H)
  T* grad_blocks;          // n rows of H
  T* grad_partial;         // 1 row of H
  acc_t<T>* gsw;           // H, the chunk's running partial sum
  bool stream;             // non-temporal stores allowed (used only where aligned)
};

template <class T>
struct RowKernels {
  using A = acc_t<T>;
  // Forward, first pass over one row:  *sumsq = sum_h x[h]^2 ;  *dot = sum_h x[h] * sw[h]
  void (*norm_dot)(const T* x, const A* sw, int64_t H, A* sumsq, A* dot);
  void (*mix)(const MixArgs<T>& args);
  // Backward, first pass over one row:  *g = sum_h gh[h] * x[h] ;  *d = sum_h sw[h] * x[h]
  void (*grad_dots)(const T* x, const T* gh, const A* sw, int64_t H, A* g, A* d);
  void (*grad_mix)(const GradMixArgs<T>& args);
};

// The table for `isa` (falls back to the best lower level the build has for T).
template <class T>
const RowKernels<T>& row_kernels(Isa isa);

namespace scalar {
template <class T>
const RowKernels<T>& table();
}
namespace avx2 {
extern const RowKernels<float> kFloat;
extern const RowKernels<Half> kHalf;
extern const RowKernels<BFloat16> kBFloat16;
}  // namespace avx2
namespace avx512 {
extern const RowKernels<float> kFloat;
extern const RowKernels<Half> kHalf;
extern const RowKernels<BFloat16> kBFloat16;
}  // namespace avx512

}  // namespace bar
}  // namespace op_plugin
