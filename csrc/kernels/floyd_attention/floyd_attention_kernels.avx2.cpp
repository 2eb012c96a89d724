// Fused Floyd attention, AVX2 build (-mavx2 -mfma -mf16c): the algorithm of
// floyd_attention_kernel.inc on the AVX2 GEMM micro-kernels (float operands; bf16 and float16
// converted when packed). Everything here lives in op_plugin::floyd::avx2 so no inline function
// is shared with other ISA builds; only the C-level headers, kernels/common (simd.h,
// gemm_ukernel.h: their own namespace isa_avx2) and op_plugin/parallel.h (ISA-neutral) are used.
// GCC 12 reports its own AVX intrinsics (`__m512 __Y = __Y;` in the headers) as maybe
// uninitialized once they are inlined at -O3; the warning is a known false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "floyd_attention.h"
#include "kernels/common/gemm_ukernel.h"
#include "kernels/common/profile.h"
#include "op_plugin/parallel.h"

namespace op_plugin {
namespace floyd {
namespace avx2 {
namespace {

struct F16 { uint16_t bits; };
struct BF16 { uint16_t bits; };

inline float to_acc(float x) { return x; }
inline float to_acc(BF16 x) { return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(x.bits) << 16))); }
inline float to_acc(F16 x) { return _cvtsh_ss(x.bits); }
inline void from_acc(float v, float* d) { *d = v; }
inline void from_acc(float v, F16* d) { d->bits = _cvtss_sh(v, 0); }
inline void from_acc(float v, BF16* d) {  // round to nearest even, NaN stays NaN
  uint32_t u;
  __builtin_memcpy(&u, &v, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) { d->bits = static_cast<uint16_t>((u >> 16) | 0x40u); return; }
  u += 0x7fffu + ((u >> 16) & 1u);
  d->bits = static_cast<uint16_t>(u >> 16);
}

inline void cvt_row(const float* src, float* dst, int64_t n) {  // inline copy (no libc call per row)
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_loadu_ps(src + i));
  for (; i < n; ++i) dst[i] = src[i];
}
inline void cvt_row(const BF16* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
  }
  for (; i < n; ++i) dst[i] = to_acc(src[i]);
}
inline void cvt_row(const F16* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = to_acc(src[i]);
}

#include "floyd_attention_lanes.inc"
template <class Ops> using LanesOf = Lanes<Ops>;
// Packed B operands in panels of 16 columns, the width of one 6 x 2 ymm strip. The K2 / V2 packs
// stream from memory once per n block; a strip walking 64 rows Kr + 16 apart (B along d) ran at
// 19 GFLOP/s from memory against 33 for a panel, on one Zen 1 core (FMA peak 38). The whole op at
// N=M=K=256 D=64 float32, one thread: forward 1907 -> 1332 ms, backward 4306 -> 3410 ms.
constexpr int64_t kPanel = 16;
#include "floyd_attention_kernel.inc"

using Ops = isa_avx2::OpsAvx2F;

}  // namespace

void forward(const FwdPlan& plan, void* workspace) {
  switch (plan.dtype) {
    case OP_DT_FLOAT: fastk::forward_fast<float, Ops>(plan, workspace); break;
    case OP_DT_FLOAT16: fastk::forward_fast<F16, Ops>(plan, workspace); break;
    case OP_DT_BF16: fastk::forward_fast<BF16, Ops>(plan, workspace); break;
    default: break;  // float64 runs in the baseline build
  }
}

void backward(const BwdPlan& plan, void* workspace) {
  switch (plan.dtype) {
    case OP_DT_FLOAT: fastk::backward_fast<float, Ops>(plan, workspace); break;
    case OP_DT_FLOAT16: fastk::backward_fast<F16, Ops>(plan, workspace); break;
    case OP_DT_BF16: fastk::backward_fast<BF16, Ops>(plan, workspace); break;
    default: break;
  }
}

}  // namespace avx2
}  // namespace floyd
}  // namespace op_plugin
