// AVX-512 row kernels (built with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mfma
// -mf16c). 16 fp32 lanes; fp16 converts with F16C (vcvtph2ps / vcvtps2ph), bf16 by a 16-bit shift
// on load and, on store, an integer round-to-nearest-even (AVX-512F only: kBFloat16, exactly like
// the scalar to_bfloat16) or vcvtneps2bf16 (kBFloat16Native, for CPUs with AVX512_BF16).
// GCC 12 warns about the deliberately undefined source operands inside its own AVX-512 intrinsic
// headers (the `__Y = __Y` idiom of _mm512_undefined_*; GCC bug 105593, fixed in 12.3/13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "bar_rows_simd.h"

namespace op_plugin {
namespace bar {
namespace avx512 {
namespace {

struct Vec {
  using Reg = __m512;
  static constexpr int64_t kLanes = 16;
  // 4 vectors per tile: the forward mix keeps 4 accumulators (64 fp32 outputs, one cache line
  // per row and vector) live while it runs over the rows, 4 independent FMA chains to cover the
  // FMA latency; the backward's group step unrolls 4 vectors (4 * (3 + G) loads in flight).
  static constexpr int kTile = 4;

  static Reg zero() { return _mm512_setzero_ps(); }
  static Reg set1(float x) { return _mm512_set1_ps(x); }
  static Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  static Reg fmadd(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static float hsum(Reg a) {
    // Fixed tree: 16 -> 8 -> 4 -> 2 -> 1.
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    const __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
  }

  static Reg load(const float* p) { return _mm512_loadu_ps(p); }
  static Reg load(const Half* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static Reg load(const BFloat16* p) {
    const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
  }

  static __m256i to_bf16(Reg x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded =
        _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    // NaN stays NaN (quiet bit set), as in to_bfloat16.
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet));
  }
  static __m256i to_half(Reg x) {
    return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }

  template <bool kStream>
  static void store(float* p, Reg x) {
    if (kStream)
      _mm512_stream_ps(p, x);
    else
      _mm512_storeu_ps(p, x);
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
  static void store16(void* p, __m256i bits) {
    if (kStream)
      _mm256_stream_si256(static_cast<__m256i*>(p), bits);
    else
      _mm256_storeu_si256(static_cast<__m256i*>(p), bits);
  }

  // Scalar tails (conversions written here, not taken from scalar_types.h, whose inline
  // functions must not be instantiated with this file's flags).
  static float load1(const float* p) { return *p; }
  static float load1(const Half* p) { return _cvtsh_ss(p->bits); }
  static float load1(const BFloat16* p) {
    return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(static_cast<uint32_t>(p->bits) << 16))));
  }
  static void store1(float* p, float x) { *p = x; }
  static void store1(Half* p, float x) {
    p->bits = static_cast<uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(x), 0), 0));
  }
  static void store1(BFloat16* p, float x) {
    const __m256i bits = to_bf16(_mm512_castps128_ps512(_mm_set_ss(x)));
    p->bits = static_cast<uint16_t>(_mm256_extract_epi16(bits, 0));
  }

  // Non-temporal stores write whole vectors: 64 bytes for fp32, 32 bytes for 16-bit types.
  template <class T>
  static bool aligned_for_stream(const T* p) {
    return reinterpret_cast<uintptr_t>(p) % (kLanes * sizeof(T)) == 0;
  }
  static void fence() { _mm_sfence(); }
  static void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }
};

// CPUs with AVX512_BF16: vcvtneps2bf16 rounds 16 lanes to bf16 in one instruction instead of the
// ten integer operations of Vec::to_bf16. It rounds to nearest even like to_bfloat16, but flushes
// denormal inputs to zero (|x| < 2^-126 only) and may quiet NaNs with another payload.
struct VecBf16 : Vec {
  using Vec::store;
  template <bool kStream>
  static void store(BFloat16* p, Reg x) {
    store16<kStream>(p, (__m256i)_mm512_cvtneps_pbh(x));
  }
};

}  // namespace

const RowKernels<float> kFloat = simd::make_table<Vec, float>();
const RowKernels<Half> kHalf = simd::make_table<Vec, Half>();
const RowKernels<BFloat16> kBFloat16 = simd::make_table<Vec, BFloat16>();
const RowKernels<BFloat16> kBFloat16Native = simd::make_table<VecBf16, BFloat16>();

}  // namespace avx512
}  // namespace bar
}  // namespace op_plugin
