// Fused Floyd attention, portable build (no ISA flags): the algorithm of
// floyd_attention_kernel.inc on the portable GEMM micro-kernels and 16-lane helpers (GCC vector
// extensions the compiler lowers to SSE2). Also the only build for float64 inputs (double
// operands and accumulation).
#include <cstdint>

#include "floyd_attention.h"
#include "kernels/common/gemm_ukernel.h"
#include "kernels/common/profile.h"
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

#include "floyd_attention_lanes.inc"
template <class Ops> using LanesOf = Lanes<Ops>;
// "B along d" packs as rows of all keys (the layout the AVX-512 build uses too, tested here).
constexpr int64_t kPanel = 0;
#include "floyd_attention_kernel.inc"

using OpsF32 = isa_base::OpsGeneric<float, 16>;
using OpsF64 = isa_base::OpsGeneric<double, 16>;

}  // namespace

void forward(const FwdPlan& plan, void* workspace) {
  switch (plan.dtype) {
    case OP_DT_FLOAT: fastk::forward_fast<float, OpsF32>(plan, workspace); break;
    case OP_DT_DOUBLE: fastk::forward_fast<double, OpsF64>(plan, workspace); break;
    case OP_DT_FLOAT16: fastk::forward_fast<F16, OpsF32>(plan, workspace); break;
    case OP_DT_BF16: fastk::forward_fast<BF16, OpsF32>(plan, workspace); break;
    default: break;
  }
}

void backward(const BwdPlan& plan, void* workspace) {
  switch (plan.dtype) {
    case OP_DT_FLOAT: fastk::backward_fast<float, OpsF32>(plan, workspace); break;
    case OP_DT_DOUBLE: fastk::backward_fast<double, OpsF64>(plan, workspace); break;
    case OP_DT_FLOAT16: fastk::backward_fast<F16, OpsF32>(plan, workspace); break;
    case OP_DT_BF16: fastk::backward_fast<BF16, OpsF32>(plan, workspace); break;
    default: break;
  }
}

}  // namespace baseline
}  // namespace floyd
}  // namespace op_plugin
