// AVX2 row kernels (built with -mavx2 -mfma -mf16c). 8 fp32 lanes; fp16 converts with F16C,
// bf16 by a 16-bit shift on load and an integer round-to-nearest-even on store.
#include <immintrin.h>

#include "bar_rows_simd.h"

namespace op_plugin {
namespace bar {
namespace avx2 {
namespace {

struct Vec {
  using Reg = __m256;
  static constexpr int64_t kLanes = 8;
  // 2 vectors per tile: 16 fp32 outputs (one cache line) per row touch in the forward mix; with
  // only 16 ymm registers, a group of 4 rows in the backward (12 broadcast coefficients plus
  // gh, sw, gsw and the row vectors) would spill with a larger unroll.
  static constexpr int kTile = 2;

  static Reg zero() { return _mm256_setzero_ps(); }
  static Reg set1(float x) { return _mm256_set1_ps(x); }
  static Reg add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  static Reg fmadd(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  static float hsum(Reg a) {
    // Fixed tree: 8 -> 4 -> 2 -> 1.
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    const __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
  }

  static Reg load(const float* p) { return _mm256_loadu_ps(p); }
  static Reg load(const Half* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static Reg load(const BFloat16* p) {
    const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
  }

  static __m128i to_bf16(Reg x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    // NaN stays NaN (quiet bit set), as in to_bfloat16. abs(u) > 0x7f800000 as signed compare is
    // safe: abs(u) <= 0x7fffffff.
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    const __m256i bits = _mm256_blendv_epi8(rounded, quiet, nan);  // every lane <= 0xffff
    return _mm_packus_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1));
  }
  static __m128i to_half(Reg x) {
    return _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }

  template <bool kStream>
  static void store(float* p, Reg x) {
    if (kStream)
      _mm256_stream_ps(p, x);
    else
      _mm256_storeu_ps(p, x);
  }
  template <bool kStream>
  static void store(Half* p, Reg x) {
    store16<kStream>(p, to_half(x));
  }
  template <bool kStream>
  static void store(BFloat16* p, Reg x) {
    store16<kStream>(p, to_bf16(x));
  }
  template <bool kStream>
  static void store16(void* p, __m128i bits) {
    if (kStream)
      _mm_stream_si128(static_cast<__m128i*>(p), bits);
    else
      _mm_storeu_si128(static_cast<__m128i*>(p), bits);
  }

  // Scalar tails (conversions written here, not taken from scalar_types.h, whose inline
  // functions must not be instantiated with this file's flags).
  static float load1(const float* p) { return *p; }
  static float load1(const Half* p) { return _cvtsh_ss(p->bits); }
  static float load1(const BFloat16* p) {
    return _mm_cvtss_f32(
        _mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(static_cast<uint32_t>(p->bits) << 16))));
  }
  static void store1(float* p, float x) { *p = x; }
  static void store1(Half* p, float x) {
    p->bits = static_cast<uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(x), 0), 0));
  }
  static void store1(BFloat16* p, float x) {
    const __m128i bits = to_bf16(_mm256_castps128_ps256(_mm_set_ss(x)));
    p->bits = static_cast<uint16_t>(_mm_extract_epi16(bits, 0));
  }

  // Non-temporal stores write whole vectors: 32 bytes for fp32, 16 bytes for 16-bit types.
  template <class T>
  static bool aligned_for_stream(const T* p) {
    return reinterpret_cast<uintptr_t>(p) % (kLanes * sizeof(T)) == 0;
  }
  static void fence() { _mm_sfence(); }
  static void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }
};

}  // namespace

const RowKernels<float> kFloat = simd::make_table<Vec, float>();
const RowKernels<Half> kHalf = simd::make_table<Vec, Half>();
const RowKernels<BFloat16> kBFloat16 = simd::make_table<Vec, BFloat16>();

}  // namespace avx2
}  // namespace bar
}  // namespace op_plugin
