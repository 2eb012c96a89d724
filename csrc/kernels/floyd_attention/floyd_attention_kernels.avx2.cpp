// Fused Floyd attention, AVX2 build (-mavx2 -mfma -mf16c). Everything here lives in
// op_plugin::floyd::avx2 so no inline function is shared with other ISA builds; only the
// C-level headers, kernels/common/simd.h (its own namespace isa_avx2) and
// op_plugin/parallel.h (ISA-neutral) are used.
// GCC 12 reports its own AVX intrinsics (`__m512 __Y = __Y;` in the headers) as maybe
// uninitialized once they are inlined at -O3; the warning is a known false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "floyd_attention.h"
#include "kernels/common/simd.h"
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

struct V {
  using reg = __m256;
  using mask = __m256i;
  static constexpr int W = 8;
  static constexpr int kMaxNV = 3;
  static constexpr int kMaxRB1 = 8;
  // 16 ymm registers: rb*nv accumulators + nv B vectors + 1 broadcast.
  static int max_rb(int nv) { return nv == 1 ? 8 : nv == 2 ? 6 : 4; }
  static mask tail(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n < 8 ? n : 8)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static reg loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void storeu(float* p, reg v) { _mm256_storeu_ps(p, v); }
  static reg load(const float* p, mask m) { return _mm256_maskload_ps(p, m); }
  static void store(float* p, reg v, mask m) { _mm256_maskstore_ps(p, m, v); }
  static reg set1(float x) { return _mm256_set1_ps(x); }
  static reg zero() { return _mm256_setzero_ps(); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg sub(reg a, reg b) { return _mm256_sub_ps(a, b); }
  // exp(x) = 2^(x log2 e) through the attention engine's vector exp2 (kernels/common/simd.h):
  // x <= -87.3 (masked keys, -inf) gives exactly 0, NaN stays NaN.
  static reg exp(reg x) {
    return isa_avx2::OpsAvx2F::exp2(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)));
  }
};

#include "floyd_attention_simd.inc"
#include "floyd_attention_driver.inc"

}  // namespace

void forward(const FwdPlan& plan, void* workspace) {
  switch (plan.dtype) {
    case OP_DT_FLOAT: forward_typed<float, float>(plan, workspace); break;
    case OP_DT_FLOAT16: forward_typed<F16, float>(plan, workspace); break;
    case OP_DT_BF16: forward_typed<BF16, float>(plan, workspace); break;
    default: break;  // float64 runs in the baseline build
  }
}

void backward(const BwdPlan& plan, void* workspace) {
  switch (plan.dtype) {
    case OP_DT_FLOAT: backward_typed<float, float>(plan, workspace); break;
    case OP_DT_FLOAT16: backward_typed<F16, float>(plan, workspace); break;
    case OP_DT_BF16: backward_typed<BF16, float>(plan, workspace); break;
    default: break;
  }
}

}  // namespace avx2
}  // namespace floyd
}  // namespace op_plugin
