// Fused Floyd attention, AVX-512 build (-mavx512f/bw/vl/dq, FMA, F16C). Everything here lives in
// op_plugin::floyd::avx512 so no inline function is shared with other ISA builds; only the
// C-level headers below and op_plugin/parallel.h (ISA-neutral) are used.
// GCC 12 reports its own AVX intrinsics (`__m512 __Y = __Y;` in the headers) as maybe
// uninitialized once they are inlined at -O3; the warning is a known false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "floyd_attention.h"
#include "kernels/common/gemm_ukernel.h"
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

struct V {
  using reg = __m512;
  using mask = __mmask16;
  static constexpr int W = 16;
  static constexpr int kMaxNV = 4;
  static constexpr int kMaxRB1 = 12;
  // 32 zmm registers: rb*nv accumulators + nv B vectors + 1 broadcast.
  static int max_rb(int nv) { return nv == 1 ? 12 : nv == 2 ? 12 : nv == 3 ? 8 : 6; }
  static mask tail(int64_t n) { return n >= 16 ? static_cast<mask>(0xffff) : static_cast<mask>((1u << n) - 1); }
  static reg loadu(const float* p) { return _mm512_loadu_ps(p); }
  static void storeu(float* p, reg v) { _mm512_storeu_ps(p, v); }
  static reg load(const float* p, mask m) { return _mm512_maskz_loadu_ps(m, p); }
  static void store(float* p, reg v, mask m) { _mm512_mask_storeu_ps(p, m, v); }
  static reg set1(float x) { return _mm512_set1_ps(x); }
  static reg zero() { return _mm512_setzero_ps(); }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
  // Cephes expf polynomial on r = x - n*ln2, |r| <= ln2/2, scaled by 2^n with vscalefps.
  static reg exp(reg x) {
    const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3365478515625f), _CMP_LT_OQ);
    // NaN propagates: min/max return their second operand when one is NaN
    x = _mm512_min_ps(_mm512_set1_ps(88.3762626647949f), x);
    x = _mm512_max_ps(_mm512_set1_ps(-87.3365478515625f), x);
    const reg n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    reg r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    reg y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), r);
    y = _mm512_add_ps(y, _mm512_set1_ps(1.0f));
    return _mm512_maskz_mov_ps(static_cast<__mmask16>(~under), _mm512_scalef_ps(y, n));
  }
};

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
inline float scalar_exp(float x) { return __builtin_expf(x); }

#include "floyd_attention_avx512.inc"

}  // namespace

void forward(const FwdPlan& plan, void* workspace) {
  switch (plan.dtype) {
    case OP_DT_FLOAT: fastk::forward_fast<float, isa_avx512::Ops512F>(plan, workspace); break;
    case OP_DT_FLOAT16: fastk::forward_fast<F16, isa_avx512::Ops512F>(plan, workspace); break;
    case OP_DT_BF16:
      if (active_isa() == Isa::kAvx512Bf16) fastk::forward_fast<BF16, isa_avx512::Ops512Bf16>(plan, workspace);
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
      if (active_isa() == Isa::kAvx512Bf16) fastk::backward_fast<BF16, isa_avx512::Ops512Bf16>(plan, workspace);
      else fastk::backward_fast<BF16, isa_avx512::Ops512F>(plan, workspace);
      break;
    default: break;
  }
}

}  // namespace avx512
}  // namespace floyd
}  // namespace op_plugin
