// AVX-512 row kernels (built with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mfma
// -mf16c): bar_rows_simd.h over simd.h's AccVec of isa_avx512 (16 fp32 lanes; fp16 by
// vcvtph2ps / vcvtps2ph, bf16 by a 16-bit shift on load and, on store, an integer
// round-to-nearest-even (kBFloat16, exactly like the scalar to_bfloat16) or vcvtneps2bf16
// (kBFloat16Native, for CPUs with AVX512_BF16: one instruction instead of ten; it rounds to nearest
// even too, but flushes denormal inputs to zero and may quiet NaNs with another payload).
// GCC 12 warns about the deliberately undefined source operands inside its own AVX-512 intrinsic
// headers (the `__Y = __Y` idiom of _mm512_undefined_*; GCC bug 105593, fixed in 12.3/13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "bar_rows_simd.h"

namespace op_plugin {
namespace bar {
namespace avx512 {
namespace {

// 4 vectors per tile: the forward mix keeps 4 accumulators (64 fp32 outputs, one cache line per
// row and vector) live while it runs over the rows, 4 independent FMA chains to cover the FMA
// latency; the backward's group step unrolls 4 vectors (4 * (3 + G) loads in flight).
constexpr int kTile = 4;
using Vec = simd::RowVec<kTile>;
using VecNativeBf16 = simd::RowVec<kTile, /*kNativeBf16=*/true>;

}  // namespace

const RowKernels<float> kFloat = simd::make_table<Vec, float>();
const RowKernels<Half> kHalf = simd::make_table<Vec, Half>();
const RowKernels<BFloat16> kBFloat16 = simd::make_table<Vec, BFloat16>();
const RowKernels<BFloat16> kBFloat16Native = simd::make_table<VecNativeBf16, BFloat16>();

}  // namespace avx512
}  // namespace bar
}  // namespace op_plugin
