// Fused Floyd attention, portable build (no ISA flags): plain loops the compiler may
// auto-vectorize. Also the only path for float64 inputs (double accumulation).
#include <cmath>
#include <cstdint>

#include "floyd_attention.h"
#include "kernels/common/scalar_types.h"
#include "op_plugin/parallel.h"

namespace op_plugin {
namespace floyd {
namespace baseline {
namespace {

using F16 = ::op_plugin::Half;
using BF16 = ::op_plugin::BFloat16;

inline float to_acc(float x) { return x; }
inline double to_acc(double x) { return x; }
inline float to_acc(F16 x) { return ::op_plugin::to_float(x); }
inline float to_acc(BF16 x) { return ::op_plugin::to_float(x); }
inline void from_acc(float v, float* d) { *d = v; }
inline void from_acc(double v, double* d) { *d = v; }
inline void from_acc(float v, F16* d) { *d = ::op_plugin::to_half(v); }
inline void from_acc(float v, BF16* d) { *d = ::op_plugin::to_bfloat16(v); }

template <class T, class A>
void cvt_row(const T* src, A* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = to_acc(src[i]);
}

// c[i*ldc + j] (=|+=) sum_p a[i*sai + p*sap] * b[p*ldb + j]: rows of C updated by rank-1 steps,
// the j loop contiguous so the compiler vectorizes it.
template <class A>
void gemm(int64_t R, int64_t C, int64_t P, const A* a, int64_t sai, int64_t sap, const A* b,
          int64_t ldb, A* c, int64_t ldc, bool accumulate) {
  for (int64_t i = 0; i < R; ++i) {
    A* crow = c + i * ldc;
    if (!accumulate)
      for (int64_t j = 0; j < C; ++j) crow[j] = 0;
    for (int64_t p = 0; p < P; ++p) {
      const A av = a[i * sai + p * sap];
      const A* brow = b + p * ldb;
      for (int64_t j = 0; j < C; ++j) crow[j] += av * brow[j];
    }
  }
}

inline void exp_sub(const float* x, const float* shift, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i] - shift[i]);
}
inline void exp_sub(const double* x, const double* shift, double* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i] - shift[i]);
}

#include "floyd_attention_driver.inc"

}  // namespace

void forward(const FwdPlan& plan, void* workspace) {
  switch (plan.dtype) {
    case OP_DT_FLOAT: forward_typed<float, float>(plan, workspace); break;
    case OP_DT_DOUBLE: forward_typed<double, double>(plan, workspace); break;
    case OP_DT_FLOAT16: forward_typed<F16, float>(plan, workspace); break;
    case OP_DT_BF16: forward_typed<BF16, float>(plan, workspace); break;
    default: break;
  }
}

void backward(const BwdPlan& plan, void* workspace) {
  switch (plan.dtype) {
    case OP_DT_FLOAT: backward_typed<float, float>(plan, workspace); break;
    case OP_DT_DOUBLE: backward_typed<double, double>(plan, workspace); break;
    case OP_DT_FLOAT16: backward_typed<F16, float>(plan, workspace); break;
    case OP_DT_BF16: backward_typed<BF16, float>(plan, workspace); break;
    default: break;
  }
}

}  // namespace baseline
}  // namespace floyd
}  // namespace op_plugin
