// Fused Floyd attention, the AMX-BF16 dataflow: bf16 inputs on a CPU with AMX tiles (ISA level
// avx512_amx), forward. Included by floyd_attention_kernels.avx512.cpp; sizes in floyd_attention.h
// (namespace tiles). Every other dtype and level, and the backward, run floyd_attention_kernel.inc.
//
// Why a dataflow of its own: the generic algorithm's GEMMs are 16-row calls of gemm<Ops> in the
// vector kernels' layouts, which on tiles ran at about 11% of the tile peak (operands copied into
// stack blocks per call, 16-key vectors per softmax step). Here every operand is packed once into
// the layouts tiles load (amx_tile.h) and the GEMMs are amx::gemm calls over whole key blocks:
//   per (b, h)      K2, V2 slices of every m packed (shared): K2[:, m]^T as K^T panels, V2[:, m]
//                   as VNNI panels of key pairs
//   per n block     K1, V1 slices of its TN rows n packed likewise (the task's slot)
//   per m block     Q rows (n, m) copied zero-padded, qa[n][m][Dp]
//   per key block   S[n][m][k] = Q[n,m]·K1[n,k] (per n: TM rows m, C rows ld_s apart)
//                             + Q[n,m]·K2[k,m] (per m: TN rows n, C rows TM ld_s apart, accumulated)
//                   the online softmax of each row (natural-log statistics as the golden's, masked
//                   keys at masked_logit(scale)), P as bf16 rows (the A layout of the next GEMMs)
//                   O[n][m] += P·V1[n] (per n) + P·V2[:, m] (per m), fp32, rescaled when a max moves
// The two terms of a score are transposed against each other in (n, m), so each is its own GEMM
// whose C rows are the other's strided rows: a tile stores and loads rows at any stride.
// Rows past the block's n / m edge are zero Q and zero P, so every GEMM runs whole 16-row tiles.
// Each output element is computed by one task in a fixed order: results do not depend on the
// thread count.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "floyd_attention.h"
#include "kernels/common/amx_tile.h"
#include "kernels/common/profile.h"
#include "kernels/common/simd.h"
#include "op_plugin/parallel.h"

namespace op_plugin {
namespace floyd {
namespace avx512 {
namespace amx_flow {

namespace isa = ::op_plugin::isa_avx512;
namespace amx = ::op_plugin::isa_avx512::amx;
using isa::imin;
using tiles::TN;
using tiles::TM;
using V = __m512;

constexpr float kLog2e = 1.44269504088896341f;

// K^T panels (16 keys x Dp each, keys zero past K up to Kp) and V panels (16 columns x Kp keys
// each, pair rows) of one slice X[k][d] (rows ld elements apart).
inline void pack_slice(const uint16_t* k, const uint16_t* v, int64_t ld, const tiles::Dims& z, int64_t K, int64_t D,
                       uint16_t* kt, uint16_t* vp) {
  amx::pack_b_transposed(k, ld, K, D, kt, z.Dp);
  const int64_t written = (K + 15) / 16 * 16;
  std::memset(kt + written * z.Dp, 0, static_cast<size_t>((z.Kp - written) * z.Dp) * 2);
  amx::pack_b_rows(v, ld, K, D, vp, z.vld, z.Kp);
}

// Bump allocator over the task's 64-byte aligned slot (sizes as tiles::fwd_slot counts them).
struct Carve {
  char* p;
  template <class X>
  X* take(int64_t count) {
    X* r = reinterpret_cast<X*>(p);
    p += fast::bytes(count, static_cast<int64_t>(sizeof(X)));
    return r;
  }
};

// One row's online softmax over a key block: s holds the raw logits of keys k0 .. k0 + kbp - 1
// (kv of them real), `masked` the mask bits of its 16-key vectors (`any_masked`: one is set). P
// (kbp values, zero past kv) goes to prow as bf16; the max / sum move and the row's O is rescaled
// when the max does.
inline void softmax_row(const float* s, int64_t kv, int64_t kbp, const __mmask16* masked, bool any_masked, float scale,
                        float low, uint16_t* prow, float* rmax, float* rsum, float* orow, int64_t Dv) {
  constexpr int kMaxV = tiles::kKeyBlock / 16;
  V x[kMaxV];
  const int nv = static_cast<int>(kbp / 16);
  const V sc = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(-INFINITY);
  auto valid = [&](int v) -> __mmask16 {
    const int64_t left = kv - 16 * v;
    return left >= 16 ? 0xffff : left <= 0 ? 0 : static_cast<__mmask16>((1u << left) - 1);
  };
  // A row without masked keys and a positive scale (the usual case): the max is taken over the raw
  // logits and P = 2^(s * scale * log2e - max * log2e) in one fma; else each logit is scaled and
  // masked first, and x - max is formed before the log2 scale, since a fully masked row's logits
  // (about -1e9) must give exactly 0 there, which the fma's rounding of max * log2e would not.
  const bool plain = !any_masked && scale > 0.0f;
  V mx = ninf, mx1 = ninf;
  if (plain) {
    for (int v = 0; v < nv; v += 2) {
      x[v] = _mm512_mask_mov_ps(ninf, valid(v), _mm512_loadu_ps(s + 16 * v));
      x[v + 1] = _mm512_mask_mov_ps(ninf, valid(v + 1), _mm512_loadu_ps(s + 16 * v + 16));
      mx = _mm512_max_ps(mx, x[v]);
      mx1 = _mm512_max_ps(mx1, x[v + 1]);
    }
  } else {
    const V lo = _mm512_set1_ps(low);
    for (int v = 0; v < nv; ++v) {
      V t = _mm512_mul_ps(_mm512_loadu_ps(s + 16 * v), sc);
      t = _mm512_mask_mov_ps(t, masked[v], lo);
      x[v] = _mm512_mask_mov_ps(ninf, valid(v), t);
      mx = _mm512_max_ps(mx, x[v]);
    }
  }
  const float bmax = _mm512_reduce_max_ps(_mm512_max_ps(mx, mx1));
  // Every row sees at least one key (kv >= 1) and masked keys are finite, so mnew is finite.
  const float mold = *rmax, mnew = std::fmax(mold, plain ? bmax * scale : bmax);
  V sum0 = _mm512_setzero_ps(), sum1 = sum0;
  const V l2e = _mm512_set1_ps(kLog2e);
  const V vm = _mm512_set1_ps(mnew), c2 = _mm512_set1_ps(scale * kLog2e), m2 = _mm512_set1_ps(mnew * kLog2e);
  for (int v = 0; v < nv; v += 2) {
    V p0, p1;
    if (plain) {
      p0 = isa::Ops512Base::exp2_nonpositive(_mm512_fmsub_ps(x[v], c2, m2));
      p1 = isa::Ops512Base::exp2_nonpositive(_mm512_fmsub_ps(x[v + 1], c2, m2));
    } else {
      // exp2 gives exactly 1 at 0 (the degree-5 polynomial 1 + 1.2e-7): a fully masked row's sum
      // is exactly its key count, as the golden's
      p0 = isa::Ops512Base::exp2(_mm512_mul_ps(_mm512_sub_ps(x[v], vm), l2e));
      p1 = isa::Ops512Base::exp2(_mm512_mul_ps(_mm512_sub_ps(x[v + 1], vm), l2e));
    }
    sum0 = _mm512_add_ps(sum0, p0);
    sum1 = _mm512_add_ps(sum1, p1);
    _mm512_storeu_si512(prow + 16 * v, (__m512i)_mm512_cvtne2ps_pbh(p1, p0));
  }
  const float alpha = mold == -INFINITY ? 0.0f : std::exp(mold - mnew);
  *rsum = *rsum * alpha + _mm512_reduce_add_ps(_mm512_add_ps(sum0, sum1));
  *rmax = mnew;
  if (mold != -INFINITY && alpha != 1.0f) {
    const V a = _mm512_set1_ps(alpha);
    for (int64_t d = 0; d < Dv; d += 16) _mm512_storeu_ps(orow + d, _mm512_mul_ps(_mm512_loadu_ps(orow + d), a));
  }
}

inline void forward_bh(const FwdPlan& p, int64_t bh, void* workspace) {
  const int64_t N = p.N, M = p.M, K = p.K, D = p.D;
  const tiles::Dims z(K, D);
  const uint16_t* Q = static_cast<const uint16_t*>(p.q) + bh * N * M * D;
  const uint16_t* K1 = static_cast<const uint16_t*>(p.k1) + bh * N * K * D;
  const uint16_t* V1 = static_cast<const uint16_t*>(p.v1) + bh * N * K * D;
  const uint16_t* K2 = static_cast<const uint16_t*>(p.k2) + bh * K * M * D;
  const uint16_t* V2 = static_cast<const uint16_t*>(p.v2) + bh * K * M * D;
  const uint8_t* mask = p.mask != nullptr ? p.mask + (bh / p.H) * N * K : nullptr;
  const float scale = static_cast<float>(p.scale), low = masked_logit(scale);
  Carve shared{static_cast<char*>(workspace)};
  uint16_t* k2t = shared.take<uint16_t>(M * z.kt);
  uint16_t* v2p = shared.take<uint16_t>(M * z.vp);
  op_plugin::parallel_for(0, M, fast::m_grain(K, D), [&](int64_t b, int64_t e) {
    OP_PROFILE_SCOPE(kPack);
    for (int64_t m = b; m < e; ++m) pack_slice(K2 + m * D, V2 + m * D, M * D, z, K, D, k2t + m * z.kt, v2p + m * z.vp);
  });
  const int64_t nNB = ceil_div(N, TN);
  op_plugin::parallel_for(0, nNB, 1, [&](int64_t begin, int64_t end) {
    Carve c{static_cast<char*>(workspace) + p.shared_bytes + p.scratch_bytes * op_plugin::thread_num()};
    uint16_t* k1t = c.take<uint16_t>(TN * z.kt);
    uint16_t* v1p = c.take<uint16_t>(TN * z.vp);
    uint16_t* qa = c.take<uint16_t>(TN * z.ldq);
    float* s = c.take<float>(TN * TM * z.lds);
    uint16_t* pa = c.take<uint16_t>(TN * TM * z.ldp);
    float* o = c.take<float>(TN * TM * z.ldo);
    float* rmax = c.take<float>(TN * TM);
    float* rsum = c.take<float>(TN * TM);
    __mmask16* mbits = c.take<__mmask16>(TN * z.kb / 16);
    amx::TileScope tile_config;
    for (int64_t nbi = begin; nbi < end; ++nbi) {
      const int64_t n0 = nbi * TN, nb = imin(TN, N - n0);
      {
        OP_PROFILE_SCOPE(kPack);
        for (int64_t n = 0; n < nb; ++n)
          pack_slice(K1 + (n0 + n) * K * D, V1 + (n0 + n) * K * D, D, z, K, D, k1t + n * z.kt, v1p + n * z.vp);
      }
      for (int64_t m0 = 0; m0 < M; m0 += TM) {
        const int64_t mb = imin(TM, M - m0);
        {
          OP_PROFILE_SCOPE(kPack);
          // Q rows, zero outside the block's rows and past D; P rows outside it stay zero.
          for (int64_t n = 0; n < TN; ++n)
            for (int64_t m = 0; m < TM; ++m) {
              uint16_t* dst = qa + n * z.ldq + m * z.Dp;
              const bool live = n < nb && m < mb;
              if (live) std::memcpy(dst, Q + ((n0 + n) * M + m0 + m) * D, static_cast<size_t>(D) * 2);
              std::memset(dst + (live ? D : 0), 0, static_cast<size_t>(z.Dp - (live ? D : 0)) * 2);
              if (!live) std::memset(pa + (n * TM + m) * z.ldp, 0, static_cast<size_t>(z.ldp) * 2);
            }
          for (int64_t r = 0; r < TN * TM; ++r) {
            rmax[r] = -INFINITY;
            rsum[r] = 0.0f;
          }
        }
        for (int64_t k0 = 0; k0 < K; k0 += z.kb) {
          const int64_t kv = imin(z.kb, K - k0), kbp = tiles::pad32(kv);
          {
            OP_PROFILE_SCOPE(kGemm);
            for (int64_t n = 0; n < nb; ++n)
              amx::gemm<false>(TM, kbp, z.Dp, qa + n * z.ldq, z.Dp, k1t + n * z.kt + k0 * z.Dp, 16 * z.Dp,
                               s + n * TM * z.lds, z.lds);
            for (int64_t m = 0; m < mb; ++m)
              amx::gemm<true>(TN, kbp, z.Dp, qa + m * z.Dp, z.ldq, k2t + (m0 + m) * z.kt + k0 * z.Dp, 16 * z.Dp,
                              s + m * z.lds, TM * z.lds);
          }
          {
            OP_PROFILE_SCOPE(kSoftmax);
            for (int64_t n = 0; n < nb; ++n) {
              __mmask16* mk = mbits + n * (z.kb / 16);
              const uint8_t* mrow = mask != nullptr ? mask + (n0 + n) * K + k0 : nullptr;
              bool any_masked = false;
              for (int64_t v = 0; v < kbp / 16; ++v) {
                const int64_t left = kv - 16 * v;
                const __mmask16 valid = left >= 16 ? 0xffff : left <= 0 ? 0 : static_cast<__mmask16>((1u << left) - 1);
                mk[v] = 0;
                if (mrow != nullptr && valid != 0) {
                  const __m128i bytes = _mm_maskz_loadu_epi8(valid, mrow + 16 * v);
                  mk[v] = _mm_test_epi8_mask(bytes, bytes);
                  any_masked = any_masked || mk[v] != 0;
                }
              }
              for (int64_t m = 0; m < mb; ++m) {
                const int64_t r = n * TM + m;
                softmax_row(s + r * z.lds, kv, kbp, mk, any_masked, scale, low, pa + r * z.ldp, rmax + r, rsum + r,
                            o + r * z.ldo, z.Dv);
              }
            }
          }
          OP_PROFILE_SCOPE(kGemm);
          // The first key block's term-1 product initialises O (rows of n past nb, which it skips,
          // are never read); the softmax rescales O only from the second block on.
          for (int64_t n = 0; n < nb; ++n) {
            if (k0 == 0)
              amx::gemm<false>(TM, z.Dv, kbp, pa + n * TM * z.ldp, z.ldp, v1p + n * z.vp, z.vld, o + n * TM * z.ldo,
                               z.ldo);
            else
              amx::gemm<true>(TM, z.Dv, kbp, pa + n * TM * z.ldp, z.ldp, v1p + n * z.vp + 16 * k0, z.vld,
                              o + n * TM * z.ldo, z.ldo);
          }
          for (int64_t m = 0; m < mb; ++m)
            amx::gemm<true>(TN, z.Dv, kbp, pa + m * z.ldp, TM * z.ldp, v2p + (m0 + m) * z.vp + 16 * k0, z.vld,
                            o + m * z.ldo, TM * z.ldo);
        }
        OP_PROFILE_SCOPE(kOther);
        uint16_t* out = static_cast<uint16_t*>(p.out) + bh * N * M * D;
        float* smax = static_cast<float*>(p.softmax_max) + bh * N * M * 8;
        float* ssum = static_cast<float*>(p.softmax_sum) + bh * N * M * 8;
        for (int64_t n = 0; n < nb; ++n)
          for (int64_t m = 0; m < mb; ++m) {
            const int64_t r = n * TM + m, g = (n0 + n) * M + m0 + m;
            const V inv = _mm512_set1_ps(rsum[r] > 0.0f ? 1.0f / rsum[r] : 0.0f);
            for (int64_t d = 0; d < D; d += 16) {
              const __mmask16 dm = D - d >= 16 ? 0xffff : static_cast<__mmask16>((1u << (D - d)) - 1);
              const V y = _mm512_mul_ps(_mm512_loadu_ps(o + r * z.ldo + d), inv);
              _mm256_mask_storeu_epi16(out + g * D + d, dm, (__m256i)_mm512_cvtneps_pbh(y));
            }
            _mm256_storeu_ps(smax + g * 8, _mm256_set1_ps(rmax[r]));
            _mm256_storeu_ps(ssum + g * 8, _mm256_set1_ps(rsum[r]));
          }
      }
    }
  });
}

inline void forward(const FwdPlan& p, void* workspace) {
  for (int64_t bh = 0; bh < p.B * p.H; ++bh) forward_bh(p, bh, workspace);
}

}  // namespace amx_flow
}  // namespace avx512
}  // namespace floyd
}  // namespace op_plugin
