// Fused Floyd attention, AVX-512 build (-mavx512f/bw/vl/dq/bf16, FMA, F16C): the algorithm of
// floyd_attention_kernel.inc on the AVX-512 GEMM micro-kernels, float operands or, where the ISA
// level has AVX512_BF16, bf16 pairs (vdpbf16ps), with its 16-lane helpers on zmm and mask
// registers. bf16 at level avx512_amx runs floyd_attention_amx.h instead (the AMX dataflow; this
// algorithm, with AMX tiles through gemm<Ops512Bf16>, only where that one does not apply: head
// dims above 512, or a backward whose P and dS would not fit). Everything here lives in
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
#include "floyd_attention_amx.h"
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

// Row of bf16 values as operand bits, zero padded to n_pad (KP == 2): 32 values a step, inline.
inline void cvt_pad(const BF16* src, uint16_t* dst, int64_t n, int64_t n_pad) {
  for (int64_t i = 0; i < n_pad; i += 32) {
    const int64_t left = n - i, pad = n_pad - i;
    const __mmask32 in = left >= 32 ? ~__mmask32(0) : left <= 0 ? __mmask32(0) : (__mmask32(1) << left) - 1;
    const __mmask32 out = pad >= 32 ? ~__mmask32(0) : (__mmask32(1) << pad) - 1;
    _mm512_mask_storeu_epi16(dst + i, out, _mm512_maskz_loadu_epi16(in, src + i));
  }
}

// r[i] lane j <- r[j] lane i (a 16 x 16 block of 32-bit lanes in registers).
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  __m512 u[16];  // u[4i + j], 128-bit lane L: column 4L + j of rows 4i .. 4i+3
  for (int i = 0; i < 4; ++i)
    for (int h = 0; h < 2; ++h) {
      const __m512d a = _mm512_castps_pd(t[4 * i + h]), b = _mm512_castps_pd(t[4 * i + h + 2]);
      u[4 * i + 2 * h] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
      u[4 * i + 2 * h + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    }
  for (int j = 0; j < 4; ++j) {
    const __m512 x = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88), y = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xdd);
    const __m512 x2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
    const __m512 y2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xdd);
    r[j] = _mm512_shuffle_f32x4(x, x2, 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(x, x2, 0xdd);
    r[4 + j] = _mm512_shuffle_f32x4(y, y2, 0x88);
    r[12 + j] = _mm512_shuffle_f32x4(y, y2, 0xdd);
  }
}

// The 16-lane helpers of floyd_attention_kernel.inc: one zmm of floats, one mask register.
struct Lanes512 {
  using A = float;
  using V = __m512;
  using M = __mmask16;
  static M lanes(int64_t n) {  // the first min(n, 16) lanes
    return n >= 16 ? static_cast<M>(0xffff) : static_cast<M>((1u << (n > 0 ? n : 0)) - 1);
  }
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V loadu(const float* p) { return _mm512_loadu_ps(p); }
  static V load(const float* p, M m) { return _mm512_maskz_loadu_ps(m, p); }
  static void storeu(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void store(float* p, V v, M m) { _mm512_mask_storeu_ps(p, m, v); }
  static void stream(float* p, V v) { _mm512_stream_ps(p, v); }  // p 64-byte aligned
  static void sfence() { _mm_sfence(); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V blend(V a, M m, V b) { return _mm512_mask_mov_ps(a, m, b); }
  static V maskz(M m, V v) { return _mm512_maskz_mov_ps(m, v); }
  // exp(x) = 2^(x log2 e) through the attention engine's vector exp2 (kernels/common/simd.h):
  // one polynomial for every kernel; x = -inf (masked or padded keys) gives exactly 0, NaN stays NaN.
  static V exp(V x) { return isa_avx512::Ops512Base::exp2(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f))); }
  static float reduce_max(V v) { return _mm512_reduce_max_ps(v); }
  static float reduce_add(V v) { return _mm512_reduce_add_ps(v); }
  static void transpose(V r[16]) { transpose16(r); }
  static M nonzero_bytes(const uint8_t* p, M valid) {
    const __m128i b = _mm_maskz_loadu_epi8(valid, p);
    return _mm_test_epi8_mask(b, b);
  }
  // 16 values of a row of T as floats (lanes outside `m` read as 0) and back (rounded as from_acc).
  static V load_row(const float* s, M m) { return _mm512_maskz_loadu_ps(m, s); }
  static V load_row(const BF16* s, M m) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, s)), 16));
  }
  static V load_row(const F16* s, M m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, s)); }
  static void store_row(float* d, V v, M m) { _mm512_mask_storeu_ps(d, m, v); }
  static void store_row(F16* d, V v, M m) { _mm256_mask_storeu_epi16(d, m, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)); }
  static void store_row(BF16* d, V v, M m) {  // round to nearest even, NaN stays NaN
    const __m512i u = _mm512_castps_si512(v), hi = _mm512_srli_epi32(u, 16);
    const __m512i bias = _mm512_add_epi32(_mm512_and_si512(hi, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7fff));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
    r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    _mm256_mask_storeu_epi16(d, m, _mm512_cvtepi32_epi16(r));
  }
};
template <class Ops> using LanesOf = Lanes512;

// Lanes j < 16 of the pair ("VNNI") operand row of vdpbf16ps: (a[j], b[j]) in 32-bit lane j,
// for the lanes in m (others 0; b = nullptr: b[j] = 0).
template <class X>
inline __m512i pair16(const X* a, const X* b, __mmask16 m) {
  static_assert(sizeof(X) == 2, "pairs of 16-bit values");
  const __m512i idx = _mm512_setr_epi32(0x00100000, 0x00110001, 0x00120002, 0x00130003, 0x00140004, 0x00150005,
                                        0x00160006, 0x00170007, 0x00180008, 0x00190009, 0x001a000a, 0x001b000b,
                                        0x001c000c, 0x001d000d, 0x001e000e, 0x001f000f);
  const __m256i lo = _mm256_maskz_loadu_epi16(m, a);
  const __m256i hi = b != nullptr ? _mm256_maskz_loadu_epi16(m, b) : _mm256_setzero_si256();
  return _mm512_permutexvar_epi16(idx, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
}

// The bf16 pair layouts of floyd_attention_kernel.inc (KP == 2, operands bf16 bits). Sources
// are bf16 tensors (BF16) or the kernel's own bf16 rows (uint16_t).
template <class E> struct Pairs;
template <>
struct Pairs<uint16_t> {
  // 16 floats rounded to bf16 (vcvtneps2bf16) into a P / dS operand row.
  static void store16(uint16_t* d, __m512 v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), (__m256i)_mm512_cvtneps_pbh(v)); }
  // "B along d": out[(d/2)*(2*Kr + 16) + 2k + d%2], a pair of d as one 32-bit lane, transposed
  // by 16 x 16 blocks of lanes in registers.
  template <class T>
  static void pack_bd(const T* X, int64_t rs, int64_t K, int64_t D, int64_t Kr, uint16_t* out) {
    static_assert(sizeof(T) == 2, "bf16 bits as they are");
    const int64_t DE = fast::ru(D, 2), ld = Kr * 2 + 16;
    for (int64_t k0 = 0; k0 < Kr; k0 += 16) {
      const int64_t kn = Kr - k0 < 16 ? Kr - k0 : 16;
      for (int64_t d0 = 0; d0 < DE; d0 += 32) {
        __m512 r[16];
        for (int64_t k = 0; k < 16; ++k) {
          const int64_t left = D - d0;
          const __mmask32 dm = left >= 32 ? ~static_cast<__mmask32>(0) : static_cast<__mmask32>((1u << left) - 1);
          r[k] = k < kn && k0 + k < K ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(dm, X + (k0 + k) * rs + d0))
                                      : _mm512_setzero_ps();
        }
        transpose16(r);  // r[c] lane k: the pair d0 + 2c, d0 + 2c + 1 of key k0 + k
        for (int64_t c = 0; c < 16 && d0 + 2 * c < DE; ++c)
          _mm512_mask_storeu_epi32(reinterpret_cast<int*>(out + (d0 / 2 + c) * ld) + k0, Lanes512::lanes(kn),
                                   _mm512_castps_si512(r[c]));
      }
    }
  }
  // "B along k": out[(k/2)*(2*D) + 2d + k%2], rows k and k + 1 interleaved in registers.
  template <class T>
  static void pack_bk(const T* X, int64_t rs, int64_t K, int64_t D, int64_t Kr, uint16_t* out) {
    for (int64_t k = 0; k < Kr; k += 2) {  // k < K: Kr is K rounded up to 2
      const T* a = X + k * rs;
      const T* b = k + 1 < K ? a + rs : nullptr;
      int* o = reinterpret_cast<int*>(out + k * D);
      for (int64_t d0 = 0; d0 < D; d0 += 16) {
        const __mmask16 m = Lanes512::lanes(D - d0);
        _mm512_mask_storeu_epi32(o + d0, m, pair16(a + d0, b != nullptr ? b + d0 : nullptr, m));
      }
    }
  }
  // dst[2k] = a[k], dst[2k+1] = b[k] (0 when b is null) for k < 16*kv. kStream: dst is 64-byte
  // aligned and not read again soon (non-temporal stores).
  template <bool kStream>
  static void pair_rows(const uint16_t* a, const uint16_t* b, uint16_t* dst, int64_t kv) {
    for (int64_t v = 0; v < kv; ++v) {
      const __m512i x = pair16(a + 16 * v, b != nullptr ? b + 16 * v : nullptr, Lanes512::lanes(16));
      if constexpr (kStream) _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + 32 * v), x);
      else _mm512_storeu_si512(dst + 32 * v, x);
    }
  }
};

// Packed B operands as rows of all columns (a 4-zmm strip reads 64 of them, a whole cache line of
// each of 4 rows, per depth step); panels were measured on AVX2 only (the AVX2 build says why).
constexpr int64_t kPanel = 0;
#include "floyd_attention_kernel.inc"

}  // namespace

void forward(const FwdPlan& plan, void* workspace) {
  if (tiles::applies(plan.dtype, active_isa(), plan.K, plan.D)) return amx_flow::forward(plan, workspace);
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
  if (tiles::bwd_applies(plan.dtype, active_isa(), plan.N, plan.M, plan.K, plan.D))
    return amx_flow::backward(plan, workspace);
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
