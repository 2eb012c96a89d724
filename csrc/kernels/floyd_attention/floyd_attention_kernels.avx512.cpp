// Fused Floyd attention, AVX-512 build (-mavx512f/bw/vl/dq, FMA, F16C). Everything here lives in
// op_plugin::floyd::avx512 so no inline function is shared with other ISA builds; only the
// C-level headers, kernels/common (simd.h, gemm_ukernel.h: their own namespace isa_avx512) and
// op_plugin/parallel.h (ISA-neutral) are used.
// GCC 12 reports its own AVX intrinsics (`__m512 __Y = __Y;` in the headers) as maybe
// uninitialized once they are inlined at -O3; the warning is a known false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "floyd_attention.h"
#include "kernels/common/gemm_ukernel.h"
#include "kernels/common/profile.h"
#include "op_plugin/isa.h"
#include "op_plugin/parallel.h"

namespace op_plugin {
namespace floyd {
namespace avx512 {
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
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_maskz_loadu_ps(m, src + i));
  }
}
inline void cvt_row(const BF16* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m256i h = _mm256_maskz_loadu_epi16(m, src + i);
    const __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_castsi512_ps(w));
  }
}
inline void cvt_row(const F16* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m256i h = _mm256_maskz_loadu_epi16(m, src + i);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(h));
  }
}

// exp(x) = 2^(x log2 e) through the attention engine's vector exp2 (kernels/common/simd.h):
// one polynomial for every kernel; x = -inf (masked or padded keys) gives exactly 0, NaN stays NaN.
inline __m512 exp_ps(__m512 x) {
  return isa_avx512::Ops512Base::exp2(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)));
}

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
inline float scalar_exp(float x) { return __builtin_expf(x); }

#include "floyd_attention_avx512.inc"

}  // namespace

void forward(const FwdPlan& plan, void* workspace) {
  switch (plan.dtype) {
    case OP_DT_FLOAT: fastk::forward_fast<float, isa_avx512::Ops512F>(plan, workspace); break;
    case OP_DT_FLOAT16: fastk::forward_fast<F16, isa_avx512::Ops512F>(plan, workspace); break;
    case OP_DT_BF16:
      if (fast::operand_bytes(plan.dtype) == 2) fastk::forward_fast<BF16, isa_avx512::Ops512Bf16>(plan, workspace);
      else fastk::forward_fast<BF16, isa_avx512::Ops512F>(plan, workspace);
      break;
    default: break;  // float64 runs in the baseline build
  }
}

void backward(const BwdPlan& plan, void* workspace) {
  switch (plan.dtype) {
    case OP_DT_FLOAT: fastk::backward_fast<float, isa_avx512::Ops512F>(plan, workspace); break;
    case OP_DT_FLOAT16: fastk::backward_fast<F16, isa_avx512::Ops512F>(plan, workspace); break;
    case OP_DT_BF16:
      if (fast::operand_bytes(plan.dtype) == 2) fastk::backward_fast<BF16, isa_avx512::Ops512Bf16>(plan, workspace);
      else fastk::backward_fast<BF16, isa_avx512::Ops512F>(plan, workspace);
      break;
    default: break;
  }
}

}  // namespace avx512
}  // namespace floyd
}  // namespace op_plugin
