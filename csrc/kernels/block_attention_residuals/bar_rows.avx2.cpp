// AVX2 row kernels (built with -mavx2 -mfma -mf16c): bar_rows_simd.h over simd.h's AccVec of
// isa_avx2 (8 fp32 lanes; fp16 by F16C, bf16 by a 16-bit shift on load and an integer
// round-to-nearest-even on store).
#include "bar_rows_simd.h"

namespace op_plugin {
namespace bar {
namespace avx2 {
namespace {

// 2 vectors per tile: 16 fp32 outputs (one cache line) per row touch in the forward mix; with only
// 16 ymm registers, a group of 4 rows in the backward (12 broadcast coefficients plus gh, sw, gsw
// and the row vectors) would spill with a larger unroll.
using Vec = simd::RowVec<2>;

}  // namespace

const RowKernels<float> kFloat = simd::make_table<Vec, float>();
const RowKernels<Half> kHalf = simd::make_table<Vec, Half>();
const RowKernels<BFloat16> kBFloat16 = simd::make_table<Vec, BFloat16>();

}  // namespace avx2
}  // namespace bar
}  // namespace op_plugin
