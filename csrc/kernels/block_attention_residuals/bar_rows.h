// Row kernels of Block Attention Residuals: the hot loops over H, one table per ISA level.
//
// The drivers (block_attention_residuals*.cpp) loop over tokens t, do the O(N) scalar math of a
// token (rsqrt, softmax, gradient coefficients) and call these kernels for the O(N * H) work.
// Every kernel has a vector body and a scalar tail, accumulates in acc_t<T> (float; double for
// double) and never allocates. Implementations:
//   bar_rows_scalar.cpp   portable scalar code, every dtype (the reference for the others)
//   bar_rows.avx2.cpp     AVX2 + FMA + F16C, float / Half / BFloat16
//   bar_rows.avx512.cpp   AVX-512 F/BW/VL/DQ + FMA + F16C, float / Half / BFloat16, plus a
//                         BFloat16 table using AVX512_BF16 for the stores
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

// Backward, second pass, for a group of `rows` rows v[g] (g < rows <= kGradRowGroup) of a token:
//   gv[g][h] = a[g] * gh[h] + b[g] * sw[h] + c[g] * v[g][h]
//   gsw[h]   = (...(gsw[h] + b[0] v[0][h]) + b[1] v[1][h]) ...          (g in increasing order)
// A group shares the loads of gh, sw and gsw and the store of gsw: with 4 rows per group the
// loop issues 7 loads and 5 stores per vector of 4 rows, against 16 and 8 one row at a time (the
// pass is bound by L1/L2 traffic: gh, sw and gsw alone are 48 KiB at H = 4096). Rows are not
// interleaved beyond a group because storing gv[i] and then loading v[i + 1] at the same offset
// modulo 4 KiB (H * sizeof(T) a multiple of 4 KiB) causes store-to-load false dependencies.
constexpr int kGradRowGroup = 4;

template <class T>
struct GradRowsArgs {
  int rows;                          // 1..kGradRowGroup
  const T* v[kGradRowGroup];         // rows of H
  T* out[kGradRowGroup];             // gv rows of H
  const T* next[kGradRowGroup];      // rows prefetched at the same offsets (the next token's), or
                                     // all null
  acc_t<T> a[kGradRowGroup];         // probs[i]
  acc_t<T> b[kGradRowGroup];         // gs[i] * inv[i]
  acc_t<T> c[kGradRowGroup];         // -gs[i] * sum_h(sw v[i]) * inv[i]^3 / H
  const acc_t<T>* gh;                // grad_hidden_states row converted to acc_t, H
  const acc_t<T>* sw;                // norm_weight * proj_weight, H
  acc_t<T>* gsw;                     // H, the chunk's running partial sum
  int64_t H;
};

template <class T>
struct RowKernels {
  using A = acc_t<T>;
  // Forward, first pass over one row:  *sumsq = sum_h x[h]^2 ;  *dot = sum_h x[h] * sw[h]
  void (*norm_dot)(const T* x, const A* sw, int64_t H, A* sumsq, A* dot);
  void (*mix)(const MixArgs<T>& args);
  // out[h] = x[h] in acc_t (the backward converts each grad_hidden_states row once)
  void (*to_acc)(const T* x, int64_t H, A* out);
  // Backward, first pass over one row:  *g = sum_h gh[h] * x[h] ;  *d = sum_h sw[h] * x[h]
  void (*grad_dots)(const T* x, const A* gh, const A* sw, int64_t H, A* g, A* d);
  void (*grad_rows)(const GradRowsArgs<T>& args);
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
extern const RowKernels<BFloat16> kBFloat16Native;  // Isa::kAvx512Bf16 and up: native bf16 rounding
}  // namespace avx512

}  // namespace bar
}  // namespace op_plugin
