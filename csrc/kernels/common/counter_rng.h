// Counter-based dropout mask (torch-free, per ISA): swa_forward and swa_backward regenerate the
// same keep decision for an element from (seed, offset, element index) alone.
//
// Element e (its global index in row-major [B, N, Sq, Skv] order; TND: per batch, batches
// concatenated, as numels counts) is kept iff
//   bits(e) >> 8  <  ceil(keep_prob * 2^24)        (a 24-bit uniform below keep_prob)
//   bits(e) = h(h(lo32(e) ^ k0) ^ hi32(e) ^ k1),   (k0, k1) = splitmix64(seed ^ splitmix64(offset))
// with h = "lowbias32" of C. Wellons' hash-prospector (two multiply-xorshift rounds, bias
// ~0.17, near-ideal avalanche). A pure function of (seed, offset, e): the mask does not depend on
// tiles, task order or thread count. Why not Philox4x32-10: it needs 20 32-bit multiplies per 4
// outputs and its 4-wide output does not fit lanes that run over query rows (stride Skv); this
// costs 4 vector multiplies per 16 elements, a few percent of the attention GEMMs around it.
// The bits are not the device's Philox bits (SPEC §2.5: compare statistics only).
//
// Like simd.h, everything lives in the ISA namespace of the including translation unit.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/common/simd.h"

namespace op_plugin {
namespace OP_ISA_NS {

struct DropoutKey {
  uint32_t k0 = 0, k1 = 0;
  int32_t threshold = 1 << 24;  // keep iff bits >> 8 < threshold
  double scale = 1.0;           // 1 / keep_prob
};

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline DropoutKey dropout_key(uint64_t seed, uint64_t offset, double keep_prob) {
  DropoutKey k;
  const uint64_t x = splitmix64(seed ^ splitmix64(offset));
  k.k0 = static_cast<uint32_t>(x);
  k.k1 = static_cast<uint32_t>(x >> 32);
  k.threshold = static_cast<int32_t>(std::ceil(keep_prob * 16777216.0));
  k.scale = 1.0 / keep_prob;
  return k;
}

inline uint32_t lowbias32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

inline uint32_t dropout_bits(uint64_t e, const DropoutKey& k) {
  const uint32_t h = lowbias32(static_cast<uint32_t>(e) ^ k.k0);
  return lowbias32(h ^ static_cast<uint32_t>(e >> 32) ^ k.k1);
}

inline bool dropout_keep(uint64_t e, const DropoutKey& k) {
  return static_cast<int32_t>(dropout_bits(e, k) >> 8) < k.threshold;
}

// Lane offsets of one vector: lane l is element e0 + l*stride, held as 32-bit halves.
struct DropoutLanes {
  uint32_t lo[16], hi[16];
  void set(int64_t stride) {
    for (int l = 0; l < 16; ++l) {
      const uint64_t o = static_cast<uint64_t>(stride) * static_cast<uint64_t>(l);
      lo[l] = static_cast<uint32_t>(o);
      hi[l] = static_cast<uint32_t>(o >> 32);
    }
  }
};

#if defined(OP_AVX512)
inline __m512i lowbias32_v(__m512i x) {
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(0x7feb352d));
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(static_cast<int32_t>(0x846ca68bu)));
  return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
}
// Keep mask of the 16 elements e0 + l*stride.
inline __mmask16 dropout_keep16(uint64_t e0, const DropoutLanes& ln, const DropoutKey& k) {
  const __m512i llo = _mm512_loadu_si512(ln.lo);
  const __m512i lo = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(e0)), llo);
  const __mmask16 carry = _mm512_cmplt_epu32_mask(lo, llo);
  __m512i hi = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(e0 >> 32)), _mm512_loadu_si512(ln.hi));
  hi = _mm512_mask_add_epi32(hi, carry, hi, _mm512_set1_epi32(1));
  __m512i h = lowbias32_v(_mm512_xor_si512(lo, _mm512_set1_epi32(static_cast<int32_t>(k.k0))));
  h = lowbias32_v(_mm512_xor_si512(_mm512_xor_si512(h, hi), _mm512_set1_epi32(static_cast<int32_t>(k.k1))));
  return _mm512_cmplt_epi32_mask(_mm512_srli_epi32(h, 8), _mm512_set1_epi32(k.threshold));
}
#elif defined(__AVX2__)
inline __m256i lowbias32_v(__m256i x) {
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7feb352d));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(static_cast<int32_t>(0x846ca68bu)));
  return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}
// Keep mask (all-ones lanes) of the 8 elements e0 + l*stride.
inline __m256i dropout_keep8(uint64_t e0, const DropoutLanes& ln, const DropoutKey& k) {
  const __m256i sign = _mm256_set1_epi32(static_cast<int32_t>(0x80000000u));
  const __m256i llo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ln.lo));
  const __m256i lo = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(e0)), llo);
  // unsigned lo < llo (a carry into the high word), as a signed compare of sign-flipped values
  const __m256i carry = _mm256_cmpgt_epi32(_mm256_xor_si256(llo, sign), _mm256_xor_si256(lo, sign));
  __m256i hi = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(e0 >> 32)),
                                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ln.hi)));
  hi = _mm256_sub_epi32(hi, carry);  // carry lanes are -1
  __m256i h = lowbias32_v(_mm256_xor_si256(lo, _mm256_set1_epi32(static_cast<int32_t>(k.k0))));
  h = lowbias32_v(_mm256_xor_si256(_mm256_xor_si256(h, hi), _mm256_set1_epi32(static_cast<int32_t>(k.k1))));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k.threshold), _mm256_srli_epi32(h, 8));
}
#endif

// x * (1/keep_prob where element e0 + l*stride is kept, 0 where dropped), lane-wise.
template <class Ops>
inline typename Ops::V dropout_apply(typename Ops::V x, uint64_t e0, const DropoutLanes& ln, const DropoutKey& k) {
  using S = typename Ops::S;
#if defined(OP_AVX512)
  if constexpr (Ops::W == 16 && sizeof(S) == 4) {
    return _mm512_maskz_mul_ps(dropout_keep16(e0, ln, k), x, _mm512_set1_ps(static_cast<float>(k.scale)));
  } else
#elif defined(__AVX2__)
  if constexpr (Ops::W == 8 && sizeof(S) == 4) {
    const __m256 keep = _mm256_castsi256_ps(dropout_keep8(e0, ln, k));
    return _mm256_mul_ps(x, _mm256_and_ps(keep, _mm256_set1_ps(static_cast<float>(k.scale))));
  } else
#endif
  {
    // portable vectors (GCC vector extensions, double): per lane
    S z[Ops::W];
    for (int l = 0; l < Ops::W; ++l) {
      const uint64_t e = e0 + (static_cast<uint64_t>(ln.hi[l]) << 32 | ln.lo[l]);
      z[l] = dropout_keep(e, k) ? static_cast<S>(k.scale) : S(0);
    }
    return Ops::mul(x, Ops::loadc(z));
  }
}

}  // namespace OP_ISA_NS
}  // namespace op_plugin
