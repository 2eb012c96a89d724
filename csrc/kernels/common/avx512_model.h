// The AVX-512 intrinsics in AVX2 code, for the kernel tests of a CPU without AVX-512.
//
// Why: the avx512, avx512_bf16 and avx512_amx levels' code (the *.avx512.cpp translation units)
// must stay correct and tested on every host CI may land on, and an AVX2-only host cannot execute
// one AVX-512 instruction. A test build of such a host (tests/kernels/build_and_run.sh with
// OP_PLUGIN_AVX512_EMULATE=1; ci/test.sh runs it there) compiles those units with the AVX2 flags
// and -DOP_PLUGIN_AVX512_MODEL, and simd.h includes this header instead of relying on the compiler's
// AVX-512 target. The intrinsics come from SIMDe (SIMD Everywhere, MIT; the simde-py package
// ships its headers): each _mm512_* name is an alias of a portable simde_mm512_* function with the
// instruction's semantics. Defined below, lane by lane after Intel's pseudo-code: the few this code
// uses that SIMDe 0.8 lacks, and the masked loads and stores, which SIMDe 0.8 does not confine to
// the selected lanes. Never used by the wheel: it is for tests, and slower than native code.
#pragma once

#if !defined(__AVX2__) || defined(__AVX512F__)
#error "avx512_model.h is for an AVX2 (not AVX-512) translation unit built with -DOP_PLUGIN_AVX512_MODEL"
#endif

#include <cmath>
#include <cstdint>
#include <cstring>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wpsabi"
#include <immintrin.h>  // first: SIMDe's aliases must not rename the compiler's own declarations
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#pragma GCC diagnostic pop

namespace op_plugin {
namespace avx512_model {

// Lanes of a 512-bit vector as an array, and back.
template <class Lane, class Vec>
inline void to_lanes(const Vec& v, Lane* lanes) {
  static_assert(sizeof(Vec) == 64, "a 512-bit vector");
  std::memcpy(lanes, &v, 64);
}
template <class Vec, class Lane>
inline Vec from_lanes(const Lane* lanes) {
  Vec v;
  std::memcpy(&v, lanes, 64);
  return v;
}

template <class Lane, class Compare>
inline __mmask16 compare_epi32(__m512i a, __m512i b, Compare compare) {
  Lane x[16], y[16];
  to_lanes(a, x);
  to_lanes(b, y);
  __mmask16 mask = 0;
  for (int i = 0; i < 16; ++i)
    if (compare(x[i], y[i])) mask = static_cast<__mmask16>(mask | (1u << i));
  return mask;
}
inline __mmask16 cmpgt_epu32_mask(__m512i a, __m512i b) {
  return compare_epi32<uint32_t>(a, b, [](uint32_t x, uint32_t y) { return x > y; });
}
inline __mmask16 cmplt_epu32_mask(__m512i a, __m512i b) {
  return compare_epi32<uint32_t>(a, b, [](uint32_t x, uint32_t y) { return x < y; });
}
inline __mmask16 cmplt_epi32_mask(__m512i a, __m512i b) {
  return compare_epi32<int32_t>(a, b, [](int32_t x, int32_t y) { return x < y; });
}

// VPMOVDW: each 32-bit lane truncated to 16 bits.
inline __m256i cvtepi32_epi16(__m512i a) {
  uint32_t x[16];
  uint16_t y[16];
  to_lanes(a, x);
  for (int i = 0; i < 16; ++i) y[i] = static_cast<uint16_t>(x[i]);
  __m256i r;
  std::memcpy(&r, y, 32);
  return r;
}

// VCVTNEPS2BF16: round to nearest even, NaN made quiet; denormal inputs flushed to zero and no
// exception raised, as the instruction does (MXCSR is not consulted).
inline uint16_t bf16_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0) u &= 0x80000000u;  // denormal -> signed zero
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline __m256bh cvtneps_pbh(__m512 a) {
  float x[16];
  uint16_t y[16];
  to_lanes(a, x);
  for (int i = 0; i < 16; ++i) y[i] = bf16_of(x[i]);
  __m256bh r;
  std::memcpy(&r, y, 32);
  return r;
}
// VCVTNE2PS2BF16: b's lanes in the low half, a's in the high half.
inline __m512bh cvtne2ps_pbh(__m512 a, __m512 b) {
  float x[16], y[16];
  uint16_t r[32];
  to_lanes(b, x);
  to_lanes(a, y);
  for (int i = 0; i < 16; ++i) r[i] = bf16_of(x[i]), r[16 + i] = bf16_of(y[i]);
  return from_lanes<__m512bh>(r);
}

// VCVTPS2PH (F16C's 256-bit form twice).
inline __m256i cvtps_ph(__m512 a, const int rounding) {
  __m256 half[2];
  std::memcpy(half, &a, 64);
  __m128i r[2];
  // F16C takes the rounding as an immediate: only round-to-nearest (what the kernels use, with or
  // without _MM_FROUND_NO_EXC, which changes no result) is modelled; any other mode stops the test.
  if ((rounding & 7) != _MM_FROUND_TO_NEAREST_INT) __builtin_trap();
  r[0] = _mm256_cvtps_ph(half[0], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  r[1] = _mm256_cvtps_ph(half[1], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256i out;
  std::memcpy(&out, r, 32);
  return out;
}

// Masked loads and stores touch only the selected lanes' memory: the rest may be unmapped, or
// another thread's. SIMDe 0.8's load or store the whole vector (its stores write zeros to the
// unselected lanes), so every one this code uses is replaced.
template <class Vec, int kLaneBytes, class Mask>
inline Vec maskz_load(Mask k, const void* p) {
  constexpr int kLanes = static_cast<int>(sizeof(Vec)) / kLaneBytes;
  unsigned char x[sizeof(Vec)] = {};
  for (int i = 0; i < kLanes; ++i)
    if ((static_cast<uint64_t>(k) >> i) & 1u)
      std::memcpy(x + kLaneBytes * i, static_cast<const char*>(p) + kLaneBytes * i, kLaneBytes);
  Vec v;
  std::memcpy(&v, x, sizeof(Vec));
  return v;
}
template <int kLaneBytes, class Vec, class Mask>
inline void mask_store(void* p, Mask k, const Vec& v) {
  constexpr int kLanes = static_cast<int>(sizeof(Vec)) / kLaneBytes;
  unsigned char x[sizeof(Vec)];
  std::memcpy(x, &v, sizeof(Vec));
  for (int i = 0; i < kLanes; ++i)
    if ((static_cast<uint64_t>(k) >> i) & 1u)
      std::memcpy(static_cast<char*>(p) + kLaneBytes * i, x + kLaneBytes * i, kLaneBytes);
}

// VPTESTMB: bit i set where byte i of a & b is not zero.
inline __mmask16 test_epi8_mask(__m128i a, __m128i b) {
  uint8_t x[16], y[16];
  std::memcpy(x, &a, 16);
  std::memcpy(y, &b, 16);
  __mmask16 mask = 0;
  for (int i = 0; i < 16; ++i)
    if (x[i] & y[i]) mask = static_cast<__mmask16>(mask | (1u << i));
  return mask;
}

// The sum in the order of GCC's _mm512_reduce_add_ps: halves, then quarters, then pairs.
inline float reduce_add_ps(__m512 a) {
  float x[16];
  to_lanes(a, x);
  for (int width = 8; width >= 1; width /= 2)
    for (int i = 0; i < width; ++i) x[i] += x[i + width];
  return x[0];
}

// VREDUCEPS: x minus x rounded to imm[7:4] fraction bits by the rounding mode imm[1:0] (0 nearest
// even, 1 down, 2 up, 3 toward zero); NaN stays a (quiet) NaN, +-inf gives +-0. Exact: the
// difference of a float and its rounding needs no more bits than the float.
inline __m512 reduce_ps(__m512 a, int imm) {
  float x[16];
  to_lanes(a, x);
  const float up = static_cast<float>(1 << ((imm >> 4) & 15));
  for (float& v : x) {
    if (v != v) {
      v = v + v;
    } else if (v - v != 0.0f) {  // +-inf
      v = v > 0 ? 0.0f : -0.0f;
    } else {
      const float s = v * up;  // exact: a power of two
      const float r = (imm & 3) == 0 ? std::nearbyint(s) : (imm & 3) == 1 ? std::floor(s)
                      : (imm & 3) == 2 ? std::ceil(s) : std::trunc(s);
      v = v - r / up;
    }
  }
  return from_lanes<__m512>(x);
}

// Non-temporal stores are plain stores here.
inline void stream_ps(float* p, __m512 a) { std::memcpy(p, &a, 64); }
inline void stream_si512(void* p, __m512i a) { std::memcpy(p, &a, 64); }

}  // namespace avx512_model
}  // namespace op_plugin

#define _mm512_cmpgt_epu32_mask(a, b) ::op_plugin::avx512_model::cmpgt_epu32_mask(a, b)
#define _mm512_cmplt_epu32_mask(a, b) ::op_plugin::avx512_model::cmplt_epu32_mask(a, b)
#define _mm512_cmplt_epi32_mask(a, b) ::op_plugin::avx512_model::cmplt_epi32_mask(a, b)
#define _mm512_cvtepi32_epi16(a) ::op_plugin::avx512_model::cvtepi32_epi16(a)
#define _mm512_cvtneps_pbh(a) ::op_plugin::avx512_model::cvtneps_pbh(a)
#define _mm512_cvtne2ps_pbh(a, b) ::op_plugin::avx512_model::cvtne2ps_pbh(a, b)
#define _mm512_cvtps_ph(a, rounding) ::op_plugin::avx512_model::cvtps_ph(a, rounding)
#define _mm_test_epi8_mask(a, b) ::op_plugin::avx512_model::test_epi8_mask(a, b)
#define _mm512_reduce_add_ps(a) ::op_plugin::avx512_model::reduce_add_ps(a)
#define _mm512_reduce_ps(a, imm) ::op_plugin::avx512_model::reduce_ps(a, imm)
#define _mm512_stream_ps(p, a) ::op_plugin::avx512_model::stream_ps(p, a)
#define _mm512_stream_si512(p, a) ::op_plugin::avx512_model::stream_si512(p, a)

#undef _mm512_maskz_loadu_ps
#undef _mm512_maskz_loadu_epi32
#undef _mm512_maskz_loadu_epi16
#undef _mm256_maskz_loadu_epi16
#undef _mm_maskz_loadu_epi8
#undef _mm512_mask_storeu_ps
#undef _mm512_mask_storeu_epi32
#undef _mm512_mask_storeu_epi16
#undef _mm256_mask_storeu_epi16
#define _mm512_maskz_loadu_ps(k, p) ::op_plugin::avx512_model::maskz_load<__m512, 4>(k, p)
#define _mm512_maskz_loadu_epi32(k, p) ::op_plugin::avx512_model::maskz_load<__m512i, 4>(k, p)
#define _mm512_maskz_loadu_epi16(k, p) ::op_plugin::avx512_model::maskz_load<__m512i, 2>(k, p)
#define _mm256_maskz_loadu_epi16(k, p) ::op_plugin::avx512_model::maskz_load<__m256i, 2>(k, p)
#define _mm_maskz_loadu_epi8(k, p) ::op_plugin::avx512_model::maskz_load<__m128i, 1>(k, p)
#define _mm512_mask_storeu_ps(p, k, a) ::op_plugin::avx512_model::mask_store<4>(p, k, a)
#define _mm512_mask_storeu_epi32(p, k, a) ::op_plugin::avx512_model::mask_store<4>(p, k, a)
#define _mm512_mask_storeu_epi16(p, k, a) ::op_plugin::avx512_model::mask_store<2>(p, k, a)
#define _mm256_mask_storeu_epi16(p, k, a) ::op_plugin::avx512_model::mask_store<2>(p, k, a)
