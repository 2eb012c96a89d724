// Per-ISA vector operations shared by the attention kernels (torch-free).
//
// This header is compiled once per ISA translation unit (`*.avx512.cpp`, `*.avx2.cpp`, plain
// `*.cpp`); everything it defines lives in a namespace named after the instruction set the
// compiler was told to target (op_plugin::isa_avx512 / isa_avx2 / isa_base), so the inline
// functions of different TUs never collide at link time (no ODR merging of an AVX-512 body into
// a baseline caller). Only <immintrin.h> and <cstdint>/<cstring>/<cmath> are used: no std
// templates, for the same reason.
//
// The vocabulary is the "Ops" struct: one struct per (ISA, element type) with
//   T   element type of packed GEMM operands (float, double, or uint16_t holding bf16 bits)
//   S   accumulation scalar (float, or double for double inputs)
//   V   accumulation vector of W lanes of S
//   KP  elements of T consumed per k step by one multiply-accumulate (1, or 2 for bf16 pairs,
//       which is the operand format of AVX512_BF16 vdpbf16ps)
// and the element-wise helpers the softmax passes need (max, exp2, lane masks). Kernels that stream
// rows of float / fp16 / bf16 through fp32 vectors use AccVec (element loads and stores of this
// ISA's fp32 vector, bf16 rounding, streaming stores, a fixed-order hsum); whole rows convert with
// the cvt_* helpers.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__AVX2__) || defined(__AVX512F__)
// GCC 12 reports its own `_mm512_undefined_*` idiom inside these headers as "may be used
// uninitialized" once the intrinsics are inlined; the state at the header's lines decides.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

// OP_AVX512 / OP_AVX512_BF16: this translation unit's code is the AVX-512 (AVX512_BF16) one. Set
// by the compiler's target, or, in the test build of an AVX2 CPU (-DOP_PLUGIN_AVX512_MODEL on the
// *.avx512.cpp sources), by avx512_model.h, which supplies the AVX-512 intrinsics in AVX2 code.
#if defined(OP_PLUGIN_AVX512_MODEL) && !defined(__AVX512F__)
#include "kernels/common/avx512_model.h"
#define OP_AVX512 1
#define OP_AVX512_BF16 1
#elif defined(__AVX512F__)
#define OP_AVX512 1
#if defined(__AVX512BF16__)
#define OP_AVX512_BF16 1
#endif
#endif

#if defined(OP_AVX512)
#define OP_ISA_NS isa_avx512
#elif defined(__AVX2__)
#define OP_ISA_NS isa_avx2
#else
#define OP_ISA_NS isa_base
#endif

namespace op_plugin {
namespace OP_ISA_NS {

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

// ---- scalar bf16 / fp16 conversions (bit level, round to nearest even) ---------------------
inline float bf16_to_float(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// Portable 2^x in float, same polynomial as the vector versions (Cephes exp2f minimax on
// [-0.5, 0.5], relative error ~1.5 ulp). x <= -126 returns exactly 0 (masked logits).
inline float exp2_scalar(float x) {
  if (x <= -126.0f) return 0.0f;  // -inf: masked logits contribute nothing
  if (std::isnan(x)) return x;    // NaN inputs propagate
  if (x > 127.0f) x = 127.0f;
  const float n = std::nearbyint(x);
  const float r = x - n;
  float p = 1.535336188319500e-4f;
  p = p * r + 1.339887440266574e-3f;
  p = p * r + 9.618437357674640e-3f;
  p = p * r + 5.550332471162809e-2f;
  p = p * r + 2.402264791363012e-1f;
  p = p * r + 6.931472028550421e-1f;
  p = p * r + 1.0f;
  const int32_t e = static_cast<int32_t>(n) + 127;
  const uint32_t bits = static_cast<uint32_t>(e) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}

// ---- portable Ops (GCC vector extensions), used for every ISA's double path and for the
// baseline float path ---------------------------------------------------------------------
template <class Tp, int Bytes>
struct OpsGeneric {
  using T = Tp;
  using S = Tp;
  static constexpr int W = Bytes / static_cast<int>(sizeof(Tp));
  static constexpr int KP = 1;
  static constexpr bool kNativeBf16 = false;
  typedef Tp V __attribute__((vector_size(Bytes)));
  using BV = V;
  using AV = V;

  static V zero() { return V{} ; }
  static V set1(S x) { V v = V{}; return v + x; }
  static V loadc(const S* p) { V v; std::memcpy(&v, p, sizeof v); return v; }
  static void storec(S* p, V v) { std::memcpy(p, &v, sizeof v); }
  static BV loadb(const T* p) { return loadc(p); }
  static BV loadb_tail(const T* p, int n) {
    V v = V{};
    for (int i = 0; i < n; ++i) v[i] = p[i];
    return v;
  }
  static AV bcast(const T* p) { return set1(*p); }
  static V fma(V acc, AV a, BV b) { return acc + a * b; }
  static V add(V a, V b) { return a + b; }
  static V sub(V a, V b) { return a - b; }
  static V mul(V a, V b) { return a * b; }
  static V max(V a, V b) { V r; for (int i = 0; i < W; ++i) r[i] = a[i] > b[i] ? a[i] : b[i]; return r; }
  static S hmax(V a) { S m = a[0]; for (int i = 1; i < W; ++i) m = a[i] > m ? a[i] : m; return m; }
  static S hsum(V a) { S s = a[0]; for (int i = 1; i < W; ++i) s += a[i]; return s; }
  // out[t] = hsum(v[t]) for t < W, bitwise (the row kernels of flash_attention_small.h reduce W
  // dot products at once; the vector Ops below do it with one transpose-reduce).
  static void hsums(const V* v, S* out) {
    for (int t = 0; t < W; ++t) out[t] = hsum(v[t]);
  }
  // Lane-wise running maximum that keeps the first NaN: m where m is NaN, else x where x > m or x
  // is NaN, else m (max() returns its second operand when either is NaN, so a NaN can be lost).
  static V max_keep_nan(V m, V x) {
    for (int i = 0; i < W; ++i)
      if (m[i] == m[i] && (x[i] > m[i] || x[i] != x[i])) m[i] = x[i];
    return m;
  }
  // Lanes whose index (base + lane) lies outside [lo, hi] become -inf.
  static V mask_range(V x, int64_t base, int64_t lo, int64_t hi) {
    for (int i = 0; i < W; ++i) {
      const int64_t idx = base + i;
      if (idx < lo || idx > hi) x[i] = -INFINITY;
    }
    return x;
  }
  // 2^x per lane; x <= -126 (float) gives exactly 0.
  static V exp2(V x) {
    V r;
    for (int i = 0; i < W; ++i) r[i] = exp2_lane(x[i]);
    return r;
  }
  static float exp2_lane(float x) { return exp2_scalar(x); }
  static double exp2_lane(double x) { return x == -INFINITY ? 0.0 : std::exp2(x); }
  // Where the lane of `cond_src` equals -inf, select `a` instead of `b` (used to keep the
  // running max finite for rows that have seen no key yet).
  static V select_neginf(V cond_src, V a, V b) {
    V r;
    for (int i = 0; i < W; ++i) r[i] = cond_src[i] == -INFINITY ? a[i] : b[i];
    return r;
  }
};

#if defined(__AVX2__) && !defined(OP_AVX512)
// ---- AVX2 + FMA float ----------------------------------------------------------------------
struct OpsAvx2F {
  static constexpr bool kNativeBf16 = false;
  using T = float;
  using S = float;
  static constexpr int W = 8;
  static constexpr int KP = 1;
  using V = __m256;
  using BV = __m256;
  using AV = __m256;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(S x) { return _mm256_set1_ps(x); }
  static V loadc(const S* p) { return _mm256_loadu_ps(p); }
  static void storec(S* p, V v) { _mm256_storeu_ps(p, v); }
  static BV loadb(const T* p) { return _mm256_loadu_ps(p); }
  static BV loadb_tail(const T* p, int n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
    return _mm256_maskload_ps(p, m);
  }
  static AV bcast(const T* p) { return _mm256_broadcast_ss(p); }
  static V fma(V acc, AV a, BV b) { return _mm256_fmadd_ps(a, b, acc); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static S hmax(V a) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
  }
  static S hsum(V a) {
    __m128 m = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_add_ps(m, _mm_movehl_ps(m, m));
    m = _mm_add_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
  }
  // out[t] = hsum(v[t]) for t < 8, bitwise: hsum's tree (halves, then lanes 2 apart, then 1)
  // run on all 8 vectors at once, 7 adds and 14 shuffles in all. The inputs are taken in the
  // order that leaves lane t holding v[t]'s sum.
  static void hsums(const V* v, S* out) {
    static constexpr int in[8] = {0, 4, 1, 5, 2, 6, 3, 7};
    __m256 w[4], u[2];
    for (int i = 0; i < 4; ++i) {  // [a.lo + a.hi | b.lo + b.hi]
      const __m256 a = v[in[2 * i]], b = v[in[2 * i + 1]];
      w[i] = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
    }
    for (int i = 0; i < 2; ++i) {  // lanes 0 + 2 and 1 + 3 of each half
      const __m256d x = _mm256_castps_pd(w[2 * i]), y = _mm256_castps_pd(w[2 * i + 1]);
      u[i] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(x, y)), _mm256_castpd_ps(_mm256_unpackhi_pd(x, y)));
    }
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_shuffle_ps(u[0], u[1], 0x88), _mm256_shuffle_ps(u[0], u[1], 0xDD)));
  }
  static V max_keep_nan(V m, V x) {  // as OpsGeneric::max_keep_nan
    const __m256 take = _mm256_andnot_ps(_mm256_cmp_ps(m, m, _CMP_UNORD_Q),
                                         _mm256_or_ps(_mm256_cmp_ps(x, m, _CMP_GT_OQ), _mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
    return _mm256_blendv_ps(m, x, take);
  }
  static V mask_range(V x, int64_t base, int64_t lo, int64_t hi) {
    // lanes with idx in [lo, hi]; computed in 32-bit relative to base (|lo-base| is clamped).
    const int32_t l = static_cast<int32_t>(imax(imin(lo - base, 1 << 20), -(1 << 20)));
    const int32_t h = static_cast<int32_t>(imax(imin(hi - base, 1 << 20), -(1 << 20)));
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i ok = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(l), idx),
                                           _mm256_cmpgt_epi32(_mm256_set1_epi32(h + 1), idx));
    return _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), x, _mm256_castsi256_ps(ok));
  }
  static V exp2(V x) {
    // NaN propagates: it is kept (unordered compare) and passes the clamps (max/min return their
    // second operand when one is NaN).
    const __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_NLE_UQ);
    x = _mm256_max_ps(_mm256_set1_ps(-126.0f), x);
    x = _mm256_min_ps(_mm256_set1_ps(127.0f), x);
    const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 r = _mm256_sub_ps(x, n);
    __m256 p = _mm256_set1_ps(1.535336188319500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.339887440266574e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(9.618437357674640e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.550332471162809e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(2.402264791363012e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(6.931472028550421e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), keep);
  }
  static V select_neginf(V cond_src, V a, V b) {
    const __m256 c = _mm256_cmp_ps(cond_src, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ);
    return _mm256_blendv_ps(b, a, c);
  }
};
#endif

#if defined(OP_AVX512)
// ---- AVX-512 float -------------------------------------------------------------------------
struct Ops512Base {
  static constexpr bool kNativeBf16 = false;
  using S = float;
  static constexpr int W = 16;
  using V = __m512;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(S x) { return _mm512_set1_ps(x); }
  static V loadc(const S* p) { return _mm512_loadu_ps(p); }
  static void storec(S* p, V v) { _mm512_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static S hmax(V a) { return _mm512_reduce_max_ps(a); }
  static S hsum(V a) { return _mm512_reduce_add_ps(a); }
  // out[t] = hsum(v[t]) for t < 16, bitwise: _mm512_reduce_add_ps's tree (halves, quarters, lanes
  // 2 apart, then 1) run on all 16 vectors at once, 15 adds and 30 shuffles in all where 16
  // reductions take 64 dependent ones. The inputs are taken in the order that leaves lane t
  // holding v[t]'s sum.
  static void hsums(const V* v, S* out) {
    static constexpr int in[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};
    __m512 w[8], u[4], t[2];
    for (int i = 0; i < 8; ++i) {  // 256-bit halves: [a.q0 + a.q2, a.q1 + a.q3, b.q0 + b.q2, b.q1 + b.q3]
      const __m512 a = v[in[2 * i]], b = v[in[2 * i + 1]];
      w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    }
    for (int i = 0; i < 4; ++i)  // 128-bit quarters: one vector's four partial sums per quarter
      u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0x88),
                           _mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0xDD));
    for (int i = 0; i < 2; ++i) {  // lanes 0 + 2 and 1 + 3 of each quarter
      const __m512d x = _mm512_castps_pd(u[2 * i]), y = _mm512_castps_pd(u[2 * i + 1]);
      t[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    _mm512_storeu_ps(out, _mm512_add_ps(_mm512_shuffle_ps(t[0], t[1], 0x88), _mm512_shuffle_ps(t[0], t[1], 0xDD)));
  }
  static V max_keep_nan(V m, V x) {  // as OpsGeneric::max_keep_nan
    const __mmask16 take = static_cast<__mmask16>(
        (_mm512_cmp_ps_mask(x, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q)) &
        ~_mm512_cmp_ps_mask(m, m, _CMP_UNORD_Q));
    return _mm512_mask_mov_ps(m, take, x);
  }
  static __mmask16 range_mask(int64_t base, int64_t lo, int64_t hi) {
    const int32_t l = static_cast<int32_t>(imax(imin(lo - base, 1 << 20), -(1 << 20)));
    const int32_t h = static_cast<int32_t>(imax(imin(hi - base, 1 << 20), -(1 << 20)));
    const __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return _mm512_cmpge_epi32_mask(idx, _mm512_set1_epi32(l)) &
           _mm512_cmple_epi32_mask(idx, _mm512_set1_epi32(h));
  }
  static V mask_range(V x, int64_t base, int64_t lo, int64_t hi) {
    return _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), range_mask(base, lo, hi), x);
  }
  // 2^x: x clamped to [-125, 127]; n = round(x), r = x - n in [-0.5, 0.5], 2^r by the Cephes
  // exp2f polynomial, then vscalefps(p, n); lanes with x < -125 (masked, -inf, logits) are set to
  // exactly 0 afterwards, so they contribute nothing. Why not let vscalefps underflow to 0: on
  // Intel cores an underflowing vscalefps takes a microcode assist, about 12 cycles per element
  // against 0.6 for the whole softmax step (docs/decisions.md), and masked lanes are common.
  // NaN propagates: max/min return their second operand when one is NaN, and the unordered
  // compare keeps NaN lanes.
  static V exp2(V x) {
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-125.0f), _CMP_NLT_UQ);
    x = _mm512_max_ps(_mm512_set1_ps(-125.0f), x);
    x = _mm512_min_ps(_mm512_set1_ps(127.0f), x);
    const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_sub_ps(x, n);
    __m512 p = _mm512_set1_ps(1.535336188319500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.339887440266574e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(9.618437357674640e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.550332471162809e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(2.402264791363012e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(6.931472028550421e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_mov_ps(keep, _mm512_scalef_ps(p, n));
  }
  // 2^x for the softmax's arguments, x <= 0 up to rounding (x - max, or logit - lse), or small
  // positive ones (the AMX forward's lazy max: up to 8); no clamp at the top: r = x - floor(x) in
  // [0, 1] by one vreduceps, 2^r by a degree-5 minimax polynomial on [0, 1] (relative error
  // 1.7e-7, about 2 ulp; degree 6 buys nothing a bf16 P or an fp32 sum can show), then
  // vscalefps(q, x), which scales by 2^floor(x) itself. x < -125 gives exactly 0, so masked (-inf)
  // logits contribute nothing, by a lane mask rather than by letting vscalefps underflow (see
  // exp2): the masked lanes are never computed. NaN propagates (the unordered compare keeps the
  // lane). Used by the AMX dataflow, where the exp is most of the vector work: 4 instructions fewer
  // than exp2 (no clamps, no separate rounding and subtraction).
  static V exp2_nonpositive(V x) {
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-125.0f), _CMP_NLT_UQ);
    const V r = _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    V q = _mm512_set1_ps(1.877575414e-03f);
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(8.989339694e-03f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(5.582632124e-02f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(2.401536107e-01f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(6.931530833e-01f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(9.999999404e-01f));
    return _mm512_maskz_scalef_ps(keep, q, x);
  }
  static V select_neginf(V cond_src, V a, V b) {
    const __mmask16 c = _mm512_cmp_ps_mask(cond_src, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ);
    return _mm512_mask_mov_ps(b, c, a);
  }
};

struct Ops512F : Ops512Base {
  using T = float;
  static constexpr int KP = 1;
  using BV = __m512;
  using AV = __m512;
  static BV loadb(const T* p) { return _mm512_loadu_ps(p); }
  static BV loadb_tail(const T* p, int n) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1u), p);
  }
  static AV bcast(const T* p) { return _mm512_set1_ps(*p); }
  static V fma(V acc, AV a, BV b) { return _mm512_fmadd_ps(a, b, acc); }
};

#if defined(OP_AVX512_BF16)
// bf16 pairs: B vectors hold 16 columns x 2 consecutive k (32 bf16, "VNNI" order), A is a
// broadcast 32-bit pair; vdpbf16ps adds a0*b0 + a1*b1 into each fp32 lane.
struct Ops512Bf16 : Ops512Base {
  static constexpr bool kNativeBf16 = true;
  using T = uint16_t;
  static constexpr int KP = 2;
  using BV = __m512bh;
  using AV = __m512bh;
  static BV loadb(const T* p) { return (__m512bh)_mm512_loadu_si512(p); }
  static BV loadb_tail(const T* p, int n) {
    return (__m512bh)_mm512_maskz_loadu_epi32(static_cast<__mmask16>((1u << n) - 1u), p);
  }
  static AV bcast(const T* p) {
    int32_t w;
    std::memcpy(&w, p, 4);
    return (__m512bh)_mm512_set1_epi32(w);
  }
  static V fma(V acc, AV a, BV b) { return _mm512_dpbf16_ps(acc, a, b); }
  // 16 floats -> 16 bf16 at dst.
  static void store_bf16(uint16_t* dst, V v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), (__m256i)_mm512_cvtneps_pbh(v));
  }
  // Two rows of 16 floats -> 16 interleaved bf16 pairs (a0 b0 a1 b1 ...) at dst.
  static void store_bf16_pair(uint16_t* dst, V a, V b) {
    const __m512i idx = _mm512_setr_epi32(0x00100000, 0x00110001, 0x00120002, 0x00130003, 0x00140004, 0x00150005,
                                          0x00160006, 0x00170007, 0x00180008, 0x00190009, 0x001a000a, 0x001b000b,
                                          0x001c000c, 0x001d000d, 0x001e000e, 0x001f000f);
    const __m512i ab = (__m512i)_mm512_cvtne2ps_pbh(b, a);  // a in the low 16 halves, b in the high
    _mm512_storeu_si512(dst, _mm512_permutexvar_epi16(idx, ab));
  }
};
#endif
#endif  // OP_AVX512

// ---- element I/O of the fp32 accumulation vector ---------------------------------------
// AccVec: this ISA's widest float vector (V, W lanes) as the accumulator of a kernel that streams
// rows of float, fp16 or bf16 (16-bit formats as raw bits, so any kernel's storage structs of one
// uint16_t map onto it):
//   load / load_f16 / load_bf16       W elements widened to fp32
//   store / store_f16 / store_bf16    back, narrowed: fp16 by vcvtps2ph (round to nearest
//                                     even); bf16 round to nearest even with NaN kept quiet
//                                     (bit for bit float_to_bf16), or with kNative the AVX512_BF16
//                                     instruction (for CPUs that have it: one instruction instead
//                                     of ten, but denormal inputs flush to zero and a NaN may keep
//                                     another payload)
//   kStream                           non-temporal store (p aligned: stream_aligned); fence() after
//                                     the last one
//   f16_to_f32, f32_to_f16,           one element by the same instructions, for tails (f32_to_bf16
//   f32_to_bf16                       is one lane of the vector rounding: no branch in the loop)
//   hsum                              lanes added in a fixed tree (i + W/2, then i + W/4, ...), so a
//                                     sum never depends on the compiler's reduction order
//   zero, set1, add, mul, fma(acc, a, b) = acc + a * b, prefetch (to L1)
// Defined for AVX2 (+FMA, F16C for fp16) and AVX-512 (F, and AVX512_BF16 for kNative); baseline
// code uses this header's scalar conversions (bf16_to_float, float_to_bf16, half_bits_to_float,
// float_to_half_bits), which the stores without kNative match bit for bit (fp16 NaN payloads aside).
#if defined(__AVX2__) || defined(OP_AVX512)
template <int Lanes>
struct AccVecBase {
  static constexpr int W = Lanes;
  // Non-temporal stores write whole vectors: W elements of E from p.
  template <class E>
  static bool stream_aligned(const E* p) { return reinterpret_cast<uintptr_t>(p) % (W * sizeof(E)) == 0; }
  static void fence() { _mm_sfence(); }
  static void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }
  static float hsum4(__m128 s4) {  // 4 -> 2 -> 1
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
  }
#if defined(__F16C__)
  static float f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
  static uint16_t f32_to_f16(float x) { return _cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT); }
#endif
};
#endif

#if defined(__AVX2__) && !defined(OP_AVX512)
struct AccVec : AccVecBase<8> {
  using V = __m256;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V fma(V acc, V a, V b) { return _mm256_fmadd_ps(a, b, acc); }
  static float hsum(V a) {  // 8 -> 4, then hsum4
    return hsum4(_mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1)));
  }

  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V load_bf16(const uint16_t* p) {
    const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
  }
  template <bool kStream = false>
  static void store(float* p, V x) {
    if constexpr (kStream) _mm256_stream_ps(p, x); else _mm256_storeu_ps(p, x);
  }
  template <bool kStream = false, bool kNative = false>
  static void store_bf16(uint16_t* p, V x) {
    static_assert(!kNative, "AVX2 has no native bf16 conversion");
    store_u16<kStream>(p, bf16_bits(x));
  }
  static uint16_t f32_to_bf16(float x) {  // one lane of bf16_bits: no branch in a tail loop
    return static_cast<uint16_t>(_mm_extract_epi16(bf16_bits(_mm256_castps128_ps256(_mm_set_ss(x))), 0));
  }
  // Round to nearest even, NaN kept quiet: float_to_bf16 on every lane.
  static __m128i bf16_bits(V x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    // abs(u) > 0x7f800000 as a signed compare is safe: abs(u) <= 0x7fffffff.
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    const __m256i bits = _mm256_blendv_epi8(rounded, quiet, nan);  // every lane <= 0xffff
    return _mm_packus_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1));
  }
#if defined(__F16C__)
  static V load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  template <bool kStream = false>
  static void store_f16(uint16_t* p, V x) {
    store_u16<kStream>(p, _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
#endif
  template <bool kStream>
  static void store_u16(uint16_t* p, __m128i bits) {  // W 16-bit elements
    if constexpr (kStream) _mm_stream_si128(reinterpret_cast<__m128i*>(p), bits);
    else _mm_storeu_si128(reinterpret_cast<__m128i*>(p), bits);
  }
};
#endif

#if defined(OP_AVX512)
struct AccVec : AccVecBase<16> {
  using V = __m512;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V fma(V acc, V a, V b) { return _mm512_fmadd_ps(a, b, acc); }
  static float hsum(V a) {  // 16 -> 8 -> 4, then hsum4
#if defined(OP_AVX512)
    const __m256 hi = _mm512_extractf32x8_ps(a, 1);
#else
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
#endif
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(a), hi);
    return hsum4(_mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1)));
  }

  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load_bf16(const uint16_t* p) {
    const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
  }
  template <bool kStream = false>
  static void store(float* p, V x) {
    if constexpr (kStream) _mm512_stream_ps(p, x); else _mm512_storeu_ps(p, x);
  }
  template <bool kStream = false, bool kNative = false>
  static void store_bf16(uint16_t* p, V x) {
    if constexpr (kNative) {
#if defined(OP_AVX512_BF16)
      store_u16<kStream>(p, (__m256i)_mm512_cvtneps_pbh(x));
#else
      static_assert(!kNative, "native bf16 needs a translation unit built with -mavx512bf16");
#endif
    } else {
      store_u16<kStream>(p, bf16_bits(x));
    }
  }
  static uint16_t f32_to_bf16(float x) {  // one lane of bf16_bits: no branch in a tail loop
    return static_cast<uint16_t>(_mm256_extract_epi16(bf16_bits(_mm512_castps128_ps512(_mm_set_ss(x))), 0));
  }
  // Round to nearest even, NaN kept quiet: float_to_bf16 on every lane.
  static __m256i bf16_bits(V x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                   _mm512_set1_epi32(0x7f800000));
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet));
  }
  static V load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  template <bool kStream = false>
  static void store_f16(uint16_t* p, V x) {
    store_u16<kStream>(p, _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  template <bool kStream>
  static void store_u16(uint16_t* p, __m256i bits) {  // W 16-bit elements
    if constexpr (kStream) _mm256_stream_si256(reinterpret_cast<__m256i*>(p), bits);
    else _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bits);
  }
};
#endif

// ---- vector conversion helpers for packing / output ------------------------------------
// Convert n floats to bf16 (round to nearest even). kNative: the AVX512_BF16 instruction may be
// used (the AVX-512 translation unit is compiled with -mavx512bf16 but also serves CPUs without
// it, whose paths pass false).
template <bool kNative>
inline void cvt_f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
#if defined(OP_AVX512_BF16)
  if constexpr (kNative) {
    for (; i + 16 <= n; i += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                          (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i)));
  }
#endif
#if defined(OP_AVX512)
  for (; i + 16 <= n; i += 16)  // NaN kept quiet, as float_to_bf16 (a bare rounding add turns some into inf or 0)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), AccVec::bf16_bits(_mm512_loadu_ps(src + i)));
#endif
  for (; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}

#if defined(OP_AVX512_BF16)
// A bf16 output row, dst[c] = bf16(src[c] * scale), in one pass (AVX512_BF16). `stream`: a row of
// whole cache lines (n a multiple of 32, dst 64-byte aligned) takes non-temporal stores, which do
// not read the lines in first (an output larger than the caches is otherwise read from memory
// only to be overwritten); the caller fences (_mm_sfence) before its results are used.
inline void store_bf16_row(const float* src, uint16_t* dst, int64_t n, float scale, bool stream) {
  const __m512 f = _mm512_set1_ps(scale);
  if (stream && n % 32 == 0 && reinterpret_cast<uintptr_t>(dst) % 64 == 0) {
    for (int64_t c = 0; c < n; c += 32)
      _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + c),
                          (__m512i)_mm512_cvtne2ps_pbh(_mm512_mul_ps(_mm512_loadu_ps(src + c + 16), f),
                                                       _mm512_mul_ps(_mm512_loadu_ps(src + c), f)));
    return;
  }
  for (int64_t c = 0; c < n; c += 16) {
    const __mmask16 m = static_cast<__mmask16>(n - c >= 16 ? 0xffffu : (1u << (n - c)) - 1u);
    const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, src + c), f);
    _mm256_mask_storeu_epi16(dst + c, m, (__m256i)_mm512_cvtneps_pbh(x));
  }
}
#endif

inline void cvt_bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(OP_AVX512)
  for (; i + 16 <= n; i += 16) {
    const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(u, 16)));
  }
#elif defined(__AVX2__)
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(u, 16)));
  }
#endif
  for (; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}

// fp16 <-> float, exact scalar versions, in this ISA's namespace (shared with scalar_types.h).
#include "fp16_bits.inc"

inline void cvt_f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(OP_AVX512)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
#elif defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  for (; i < n; ++i) dst[i] = half_bits_to_float(src[i]);
}

inline void cvt_f32_to_f16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
#if defined(OP_AVX512)
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#elif defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  for (; i < n; ++i) dst[i] = float_to_half_bits(src[i]);
}

// Transposes a rows x cols byte block: dst[c * ldd + r] = src[r * lds + c]. SSE2 16x16 blocks
// (four unpack stages), scalar edges.
inline void transpose_bytes(const uint8_t* src, int64_t lds, int64_t rows, int64_t cols, uint8_t* dst, int64_t ldd) {
  int64_t r0 = 0;
#if defined(__SSE2__)
  for (; r0 + 16 <= rows; r0 += 16) {
    int64_t c0 = 0;
    for (; c0 + 16 <= cols; c0 += 16) {
      const uint8_t* s = src + r0 * lds + c0;
      __m128i t0[8], t1[8], u[4][4];
      for (int k = 0; k < 8; ++k) {  // byte pairs of rows 2k, 2k+1: columns 0-7 (t0), 8-15 (t1)
        const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + (2 * k) * lds));
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + (2 * k + 1) * lds));
        t0[k] = _mm_unpacklo_epi8(a, b);
        t1[k] = _mm_unpackhi_epi8(a, b);
      }
      for (int m = 0; m < 4; ++m) {  // rows 4m..4m+3 of columns 4q..4q+3 in u[q][m]
        u[0][m] = _mm_unpacklo_epi16(t0[2 * m], t0[2 * m + 1]);
        u[1][m] = _mm_unpackhi_epi16(t0[2 * m], t0[2 * m + 1]);
        u[2][m] = _mm_unpacklo_epi16(t1[2 * m], t1[2 * m + 1]);
        u[3][m] = _mm_unpackhi_epi16(t1[2 * m], t1[2 * m + 1]);
      }
      for (int q = 0; q < 4; ++q)
        for (int h = 0; h < 2; ++h) {  // rows 0-7 (v0) and 8-15 (v1) of columns 4q+2h, 4q+2h+1
          const __m128i v0 = h ? _mm_unpackhi_epi32(u[q][0], u[q][1]) : _mm_unpacklo_epi32(u[q][0], u[q][1]);
          const __m128i v1 = h ? _mm_unpackhi_epi32(u[q][2], u[q][3]) : _mm_unpacklo_epi32(u[q][2], u[q][3]);
          uint8_t* d = dst + (c0 + 4 * q + 2 * h) * ldd + r0;
          _mm_storeu_si128(reinterpret_cast<__m128i*>(d), _mm_unpacklo_epi64(v0, v1));
          _mm_storeu_si128(reinterpret_cast<__m128i*>(d + ldd), _mm_unpackhi_epi64(v0, v1));
        }
    }
    for (int64_t c = c0; c < cols; ++c)
      for (int64_t r = r0; r < r0 + 16; ++r) dst[c * ldd + r] = src[r * lds + c];
  }
#endif
  for (int64_t r = r0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
}

// Interleave two rows of 16-bit values: dst[2c] = a[c], dst[2c+1] = b[c] for c < n
// (b == nullptr means a row of zeros). This is the bf16 pair ("VNNI") packing of B operands.
inline void interleave_u16(const uint16_t* a, const uint16_t* b, uint16_t* dst, int64_t n) {
  int64_t c = 0;
#if defined(OP_AVX512)
  const __m512i idx = _mm512_setr_epi32(0x00200000, 0x00210001, 0x00220002, 0x00230003, 0x00240004, 0x00250005,
                                        0x00260006, 0x00270007, 0x00280008, 0x00290009, 0x002a000a, 0x002b000b,
                                        0x002c000c, 0x002d000d, 0x002e000e, 0x002f000f);
  const __m512i idx_hi = _mm512_add_epi16(idx, _mm512_set1_epi16(16));
  for (; c + 32 <= n; c += 32) {
    const __m512i va = _mm512_loadu_si512(a + c);
    const __m512i vb = b ? _mm512_loadu_si512(b + c) : _mm512_setzero_si512();
    _mm512_storeu_si512(dst + 2 * c, _mm512_permutex2var_epi16(va, idx, vb));
    _mm512_storeu_si512(dst + 2 * c + 32, _mm512_permutex2var_epi16(va, idx_hi, vb));
  }
#endif
  for (; c < n; ++c) {
    dst[2 * c] = a[c];
    dst[2 * c + 1] = b ? b[c] : static_cast<uint16_t>(0);
  }
}

}  // namespace OP_ISA_NS
}  // namespace op_plugin
