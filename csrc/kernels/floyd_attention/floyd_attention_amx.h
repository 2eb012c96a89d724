// Fused Floyd attention, the AMX-BF16 dataflow: bf16 inputs on a CPU with AMX tiles (ISA level
// avx512_amx), forward and backward (its own section below). Included by
// floyd_attention_kernels.avx512.cpp; sizes and when it applies in floyd_attention.h (namespace
// tiles). Every other dtype and level runs floyd_attention_kernel.inc.
//
// Why a dataflow of its own: the generic algorithm's GEMMs are 16-row calls of gemm<Ops> in the
// vector kernels' layouts, which on tiles ran at about 11% of the tile peak (operands copied into
// stack blocks per call, 16-key vectors per softmax step). Here every operand is packed once into
// the layouts tiles load (amx_tile.h) and the GEMMs are amx::gemm calls over whole key blocks of
// a block of TN x TM rows (n, m) (docs/decisions.md, "Floyd in bf16 on AMX"). The forward:
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
using fast::Carve;
using isa::imin;
using tiles::TN;
using tiles::TM;
using V = __m512;

constexpr float kLog2e = 1.44269504088896341f;

// The two packs of a slice X[k][d] (rows ld elements apart): X^T as panels of 16 keys x Dp
// (keys zero past K up to Kp), the B of a product contracting d; X as VNNI panels of 16 columns x
// Kp keys (pair rows of keys), the B of a product contracting the keys.
inline void pack_transposed_panels(const uint16_t* x, int64_t ld, const tiles::Dims& z, int64_t K, int64_t D,
                                   uint16_t* xt) {
  amx::pack_b_transposed(x, ld, K, D, xt, z.Dp);
  const int64_t written = (K + 15) / 16 * 16;
  std::memset(xt + written * z.Dp, 0, static_cast<size_t>((z.Kp - written) * z.Dp) * 2);
}
inline void pack_key_pairs(const uint16_t* x, int64_t ld, const tiles::Dims& z, int64_t K, int64_t D, uint16_t* xp) {
  amx::pack_b_rows(x, ld, K, D, xp, z.vld, z.Kp);
}

// Both packs above (xt, xp: either may be null) of the slices X[:, m] of every m in [m0, m1), X
// being K2 or V2 ([K][M][D]: a slice's rows are M * D apart). By chunks of 32 keys across all the
// m: each key's rows of consecutive m are contiguous, so the reads stream, where slice by slice
// every 128-byte row of a key came from another page (the forward's packing of K2 and V2 took
// 10% of it at N=M=K=256 D=64).
inline void pack_slices(const uint16_t* X, int64_t M, const tiles::Dims& z, int64_t K, int64_t D, int64_t m0,
                        int64_t m1, uint16_t* xt, uint16_t* xp) {
  const int64_t ld = M * D;
  for (int64_t k0 = 0; k0 < z.Kp; k0 += 32) {
    const int64_t kn = imin(32, K - k0);
    for (int64_t m = m0; m < m1; ++m) {
      const uint16_t* x = X + k0 * ld + m * D;
      if (xt != nullptr) amx::pack_b_transposed(x, ld, kn, D, xt + m * z.kt + k0 * z.Dp, z.Dp);
      if (xp != nullptr) amx::pack_b_rows(x, ld, kn, D, xp + m * z.vp + 32 * (k0 / 2), z.vld, 32);
    }
  }
  const int64_t written = (K + 15) / 16 * 16;  // K^T panels up to Kp: zero past the last key's
  for (int64_t m = m0; m < m1 && xt != nullptr && written < z.Kp; ++m)
    std::memset(xt + m * z.kt + written * z.Dp, 0, static_cast<size_t>((z.Kp - written) * z.Dp) * 2);
}

// The first `left` of 16 lanes (none for left <= 0).
inline __mmask16 lanes(int64_t left) {
  return left >= 16 ? 0xffff : left <= 0 ? 0 : static_cast<__mmask16>((1u << left) - 1);
}

// Mask bits of a row n's keys in a block (kbp / 16 vectors, kv keys real) from its mask row (null:
// no mask); true when one is set.
inline bool key_mask_bits(const uint8_t* mrow, int64_t kv, int64_t kbp, __mmask16* mk) {
  bool any = false;
  for (int64_t v = 0; v < kbp / 16; ++v) {
    const __mmask16 valid = lanes(kv - 16 * v);
    mk[v] = 0;
    if (mrow != nullptr && valid != 0) {
      const __m128i bytes = _mm_maskz_loadu_epi8(valid, mrow + 16 * v);
      mk[v] = _mm_test_epi8_mask(bytes, bytes);
      any = any || mk[v] != 0;
    }
  }
  return any;
}

// The two GEMMs of each product a block (nb rows n from the block's first, mb rows m from m0) takes
// over one key block (keys k0 .. k0 + kbp - 1), the term of each n and the term of each m; x1 holds
// the block's packs of its n, x2 the shared packs of every m.
// Scores: C[n][m][k] = A[n][m]·X1[n][k] + A[n][m]·X2[k][m], A the block's Q or dY copy, X1 / X2
// K^T panels (C rows z.lds apart).
inline void block_scores(const tiles::Dims& z, int64_t nb, int64_t mb, int64_t m0, int64_t k0, int64_t kbp,
                         const uint16_t* a, const uint16_t* x1, const uint16_t* x2, float* c) {
  for (int64_t n = 0; n < nb; ++n)
    amx::gemm<false>(TM, kbp, z.Dp, a + n * z.ldq, z.Dp, x1 + n * z.kt + k0 * z.Dp, 16 * z.Dp, c + n * TM * z.lds,
                     z.lds);
  for (int64_t m = 0; m < mb; ++m)
    amx::gemm<true>(TN, kbp, z.Dp, a + m * z.Dp, z.ldq, x2 + (m0 + m) * z.kt + k0 * z.Dp, 16 * z.Dp, c + m * z.lds,
                    TM * z.lds);
}
// Contraction over the keys: C[n][m][:] (+)= W[n][m][k]·(X1[n][k][:] + X2[k][m][:]), W bf16 rows
// z.ldp apart, X1 / X2 as key pairs (C rows z.ldo apart). The first key block's term of each n
// initialises C (rows of n past nb, which it skips, are never read).
inline void block_contract(const tiles::Dims& z, int64_t nb, int64_t mb, int64_t m0, int64_t k0, int64_t kbp,
                           const uint16_t* w, const uint16_t* x1, const uint16_t* x2, float* c) {
  for (int64_t n = 0; n < nb; ++n) {
    if (k0 == 0)
      amx::gemm<false>(TM, z.Dv, kbp, w + n * TM * z.ldp, z.ldp, x1 + n * z.vp, z.vld, c + n * TM * z.ldo, z.ldo);
    else
      amx::gemm<true>(TM, z.Dv, kbp, w + n * TM * z.ldp, z.ldp, x1 + n * z.vp + 16 * k0, z.vld, c + n * TM * z.ldo,
                      z.ldo);
  }
  for (int64_t m = 0; m < mb; ++m)
    amx::gemm<true>(TN, z.Dv, kbp, w + m * z.ldp, TM * z.ldp, x2 + (m0 + m) * z.vp + 16 * k0, z.vld, c + m * z.ldo,
                    TM * z.ldo);
}

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
  auto valid = [&](int v) { return lanes(kv - 16 * v); };
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
    pack_slices(K2, M, z, K, D, b, e, k2t, nullptr);
    pack_slices(V2, M, z, K, D, b, e, nullptr, v2p);
  });
  const int64_t nNB = ceil_div(N, TN);
  op_plugin::parallel_for_dynamic(0, nNB, 1, [&](int64_t begin, int64_t end) {
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
        for (int64_t n = 0; n < nb; ++n) {
          pack_transposed_panels(K1 + (n0 + n) * K * D, D, z, K, D, k1t + n * z.kt);
          pack_key_pairs(V1 + (n0 + n) * K * D, D, z, K, D, v1p + n * z.vp);
        }
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
            block_scores(z, nb, mb, m0, k0, kbp, qa, k1t, k2t, s);
          }
          {
            OP_PROFILE_SCOPE(kSoftmax);
            for (int64_t n = 0; n < nb; ++n) {
              __mmask16* mk = mbits + n * (z.kb / 16);
              const bool any_masked =
                  key_mask_bits(mask != nullptr ? mask + (n0 + n) * K + k0 : nullptr, kv, kbp, mk);
              for (int64_t m = 0; m < mb; ++m) {
                const int64_t r = n * TM + m;
                softmax_row(s + r * z.lds, kv, kbp, mk, any_masked, scale, low, pa + r * z.ldp, rmax + r, rsum + r,
                            o + r * z.ldo, z.Dv);
              }
            }
          }
          OP_PROFILE_SCOPE(kGemm);
          block_contract(z, nb, mb, m0, k0, kbp, pa, v1p, v2p, o);  // the softmax rescales O from block 2 on
        }
        OP_PROFILE_SCOPE(kOther);
        uint16_t* out = static_cast<uint16_t*>(p.out) + bh * N * M * D;
        float* smax = static_cast<float*>(p.softmax_max) + bh * N * M * 8;
        float* ssum = static_cast<float*>(p.softmax_sum) + bh * N * M * 8;
        for (int64_t n = 0; n < nb; ++n)
          for (int64_t m = 0; m < mb; ++m) {
            const int64_t r = n * TM + m, g = (n0 + n) * M + m0 + m;
            const float inv = rsum[r] > 0.0f ? 1.0f / rsum[r] : 0.0f;
            isa::store_bf16_row(o + r * z.ldo, out + g * D, D, inv, /*stream=*/true);
            _mm256_storeu_ps(smax + g * 8, _mm256_set1_ps(rmax[r]));
            _mm256_storeu_ps(ssum + g * 8, _mm256_set1_ps(rsum[r]));
          }
      }
    }
    _mm_sfence();  // the streamed output rows are visible when the call returns
  });
}

inline void forward(const FwdPlan& p, void* workspace) {
  for (int64_t bh = 0; bh < p.B * p.H; ++bh) forward_bh(p, bh, workspace);
}

// ---- Backward ------------------------------------------------------------------------------
// Per (b, h): K2 / V2 slices packed for every m (K2^T and V2^T panels for S and dP, K2 as pairs of
// keys for dQ). Then the n pass, a task per n block, per m block and key block:
//   S, dP = dY·V1[n]^T + dY·V2[:, m]^T (as S in the forward), P = exp(S - max) / sum from the
//   forward's statistics, dS = scale P (dP - rowsum(dY O)), computed for quads of rows and
//   written as dS rows (bf16), as pairs of m into the block's buffers (for dK1 / dV1) and as
//   pairs of n into the shared ones of their m (for dK2 / dV2);
//   dQ += dS·K1[n] + dS·K2[:, m] (as O in the forward);
// and at the block's end, per n, dK1[n]^T = Q[n]^T · dS[n] and dV1[n]^T = dY[n]^T · P[n] (depth M).
// Then the m pass, a task per m: dK2[:, m]^T = Q[:, m]^T · dS[:, m], dV2 likewise (depth N). The
// products come out transposed (rows d: the pairs of m / n are the contraction) and are written
// back by 16 x 16 transposes. Every output element is summed by one task in a fixed order.

// Two rows' 16 values (fp32) as bf16 pairs, one 32-bit pair per column: a pair row of a VNNI panel.
inline __m512i pairs_of(V a, V b) {
  const __m512i idx = _mm512_setr_epi32(0x00100000, 0x00110001, 0x00120002, 0x00130003, 0x00140004, 0x00150005,
                                        0x00160006, 0x00170007, 0x00180008, 0x00190009, 0x001a000a, 0x001b000b,
                                        0x001c000c, 0x001d000d, 0x001e000e, 0x001f000f);
  return _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(b, a));
}

// X^T as bf16 rows for the A operand of a product contracting X's rows: out[d * Rp + r] = X[r][d]
// for d < Dv, r < Rp (zero past `rows` and D), X's rows ld elements apart. The rows are first
// packed as VNNI panels (pairs of rows) into `stage` (Dv * Rp), whose 16 x 16 blocks of 32-bit
// pairs are then transposed.
inline void pack_transposed(const uint16_t* X, int64_t ld, int64_t rows, int64_t D, int64_t Dv, int64_t Rp,
                            uint16_t* stage, uint16_t* out) {
  amx::pack_b_rows(X, ld, rows, D, stage, 16 * Rp, Rp);
  const uint32_t* src = reinterpret_cast<const uint32_t*>(stage);
  uint32_t* dst = reinterpret_cast<uint32_t*>(out);
  for (int64_t p = 0; p < Dv / 16; ++p)
    for (int64_t r0 = 0; r0 < Rp / 2; r0 += 16)
      amx::transpose16x16_u32(src + p * 8 * Rp + 16 * r0, 16, 16, 16, dst + 16 * p * (Rp / 2) + r0, Rp / 2);
}

// dX[k][d] (rows ld elements apart) = C[d][k] as bf16, for k < K, d < D (C rows ldc floats apart).
// 16 keys at a time, every d of a key written at once (a key's row of dK2 / dV2 is M * D apart from
// the next: whole lines, not a line in parts at different times).
// Rows of whole cache lines (D a multiple of 32, 64-byte aligned) take non-temporal stores: the
// gradients are not read again by the kernel, and a streamed line is not read in first.
inline void write_transposed(const float* C, int64_t ldc, int64_t K, int64_t D, uint16_t* dX, int64_t ld) {
  alignas(64) float t[16 * tiles::kMaxDv];
  const int64_t Dv = tiles::pad16(D);
  const bool stream = D % 32 == 0 && ld % 32 == 0 && reinterpret_cast<uintptr_t>(dX) % 64 == 0;
  for (int64_t k0 = 0; k0 < K; k0 += 16) {
    for (int64_t d0 = 0; d0 < Dv; d0 += 16)
      amx::transpose16x16_u32(reinterpret_cast<const uint32_t*>(C + d0 * ldc + k0), ldc, 16, 16,
                              reinterpret_cast<uint32_t*>(t + d0), Dv);
    for (int64_t k = 0; k < imin(16, K - k0); ++k) {
      uint16_t* row = dX + (k0 + k) * ld;
      if (stream) {
        for (int64_t d0 = 0; d0 < D; d0 += 32)
          _mm512_stream_si512(reinterpret_cast<__m512i*>(row + d0),
                              (__m512i)_mm512_cvtne2ps_pbh(_mm512_load_ps(t + k * Dv + d0 + 16),
                                                           _mm512_load_ps(t + k * Dv + d0)));
        continue;
      }
      for (int64_t d0 = 0; d0 < D; d0 += 16) {
        const __mmask16 dm = lanes(D - d0);
        _mm256_mask_storeu_epi16(row + d0, dm, (__m256i)_mm512_cvtneps_pbh(_mm512_load_ps(t + k * Dv + d0)));
      }
    }
  }
}

// One row's P and dS at 16 keys (fp32; zero where `valid` is clear): s and dp its raw logits and
// dP there, `masked` their mask bits, rmax / rinv the row's max and 1 / sum, dr its rowsum(dY O).
// `plain`: the row has no masked key in the block and the scale is positive (as in softmax_row).
struct GradRow {
  const float* s;
  const float* dp;
  const __mmask16* masked;
  bool plain;
  float rmax, rinv, dr;
};
inline void grad16(const GradRow& g, int64_t v, __mmask16 valid, float scale, float low, V* p, V* ds) {
  const V sc = _mm512_set1_ps(scale), x = _mm512_loadu_ps(g.s + 16 * v);
  V e;
  if (g.plain) {
    e = isa::Ops512Base::exp2_nonpositive(
        _mm512_fmsub_ps(x, _mm512_set1_ps(scale * kLog2e), _mm512_set1_ps(g.rmax * kLog2e)));
  } else {
    const V t = _mm512_mask_mov_ps(_mm512_mul_ps(x, sc), g.masked[v], _mm512_set1_ps(low));
    const V y = _mm512_sub_ps(_mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), valid, t), _mm512_set1_ps(g.rmax));
    e = isa::Ops512Base::exp2(_mm512_mul_ps(y, _mm512_set1_ps(kLog2e)));
  }
  *p = _mm512_maskz_mul_ps(valid, e, _mm512_set1_ps(g.rinv));
  *ds = _mm512_mul_ps(_mm512_mul_ps(sc, *p), _mm512_sub_ps(_mm512_loadu_ps(g.dp + 16 * v), _mm512_set1_ps(g.dr)));
}

inline void backward_bh(const BwdPlan& p, int64_t bh, void* workspace) {
  const int64_t N = p.N, M = p.M, K = p.K, D = p.D;
  const tiles::Dims z(K, D);
  const int64_t Mp = tiles::pad32(M), Np = tiles::pad32(N), ldc = z.Kp + 16;
  const uint16_t* Q = static_cast<const uint16_t*>(p.q) + bh * N * M * D;
  const uint16_t* dY = static_cast<const uint16_t*>(p.dy) + bh * N * M * D;
  const uint16_t* O = static_cast<const uint16_t*>(p.o) + bh * N * M * D;
  const uint16_t* K1 = static_cast<const uint16_t*>(p.k1) + bh * N * K * D;
  const uint16_t* V1 = static_cast<const uint16_t*>(p.v1) + bh * N * K * D;
  const uint16_t* K2 = static_cast<const uint16_t*>(p.k2) + bh * K * M * D;
  const uint16_t* V2 = static_cast<const uint16_t*>(p.v2) + bh * K * M * D;
  const float* smax = static_cast<const float*>(p.softmax_max) + bh * N * M * 8;
  const float* ssum = static_cast<const float*>(p.softmax_sum) + bh * N * M * 8;
  uint16_t* dQ = static_cast<uint16_t*>(p.dq) + bh * N * M * D;
  uint16_t* dK1 = static_cast<uint16_t*>(p.dk1) + bh * N * K * D;
  uint16_t* dV1 = static_cast<uint16_t*>(p.dv1) + bh * N * K * D;
  uint16_t* dK2 = static_cast<uint16_t*>(p.dk2) + bh * K * M * D;
  uint16_t* dV2 = static_cast<uint16_t*>(p.dv2) + bh * K * M * D;
  const uint8_t* mask = p.mask != nullptr ? p.mask + (bh / p.H) * N * K : nullptr;
  const float scale = static_cast<float>(p.scale), low = masked_logit(scale);
  Carve shared{static_cast<char*>(workspace)};
  uint16_t* k2t = shared.take<uint16_t>(M * z.kt);  // K2[:, m]^T panels (S)
  uint16_t* v2t = shared.take<uint16_t>(M * z.kt);  // V2[:, m]^T panels (dP)
  uint16_t* k2p = shared.take<uint16_t>(M * z.vp);  // K2[:, m] as pairs of keys (dQ)
  uint16_t* p2 = shared.take<uint16_t>(M * z.Kp * Np);  // P of m: panels of 16 keys, pairs of n
  uint16_t* ds2 = shared.take<uint16_t>(M * z.Kp * Np);
  const int64_t nNB = ceil_div(N, TN), n_written = nNB * TN;  // pair rows of n the n pass writes
  op_plugin::parallel_for(0, M, fast::m_grain(K, D), [&](int64_t b, int64_t e) {
    OP_PROFILE_SCOPE(kPack);
    pack_slices(K2, M, z, K, D, b, e, k2t, k2p);
    pack_slices(V2, M, z, K, D, b, e, v2t, nullptr);
    for (int64_t m = b; m < e; ++m) {
      // pairs of n past the n blocks' rows are zero (the m pass contracts over all Np rows)
      for (int64_t panel = 0; panel < z.Kp / 16 && n_written < Np; ++panel)
        for (uint16_t* buf : {p2, ds2})
          std::memset(buf + m * z.Kp * Np + panel * 16 * Np + 16 * n_written, 0,
                      static_cast<size_t>(16 * (Np - n_written)) * 2);
    }
  });
  // The m blocks' quads write every pair row of m up to Mp (dK1 / dV1 contract over all of them,
  // zeros past M), which whole blocks of 32 rows reach exactly.
  static_assert(TM % 32 == 0, "m blocks of whole 32-row pair panels");
  op_plugin::parallel_for_dynamic(0, nNB, 1, [&](int64_t begin, int64_t end) {
    Carve c{static_cast<char*>(workspace) + p.shared_bytes + p.scratch_bytes * op_plugin::thread_num()};
    uint16_t* k1t = c.take<uint16_t>(TN * z.kt);
    uint16_t* v1t = c.take<uint16_t>(TN * z.kt);
    uint16_t* k1p = c.take<uint16_t>(TN * z.vp);
    uint16_t* qa = c.take<uint16_t>(TN * z.ldq);
    uint16_t* da = c.take<uint16_t>(TN * z.ldq);
    float* s = c.take<float>(TN * TM * z.lds);
    float* dp = c.take<float>(TN * TM * z.lds);
    uint16_t* dsa = c.take<uint16_t>(TN * TM * z.ldp);
    float* dq = c.take<float>(TN * TM * z.ldo);
    float* rmax = c.take<float>(TN * TM);
    float* rinv = c.take<float>(TN * TM);
    float* dr = c.take<float>(TN * TM);
    __mmask16* mbits = c.take<__mmask16>(TN * z.kb / 16);
    uint16_t* p1 = c.take<uint16_t>(TN * z.Kp * Mp);  // P of the block's n: panels of 16 keys, pairs of m
    uint16_t* ds1 = c.take<uint16_t>(TN * z.Kp * Mp);
    uint16_t* qt = c.take<uint16_t>(z.Dv * Mp);  // Q[n]^T, dY[n]^T
    uint16_t* dyt = c.take<uint16_t>(z.Dv * Mp);
    uint16_t* stage = c.take<uint16_t>(z.Dv * Mp);
    float* ck = c.take<float>(z.Dv * ldc);
    float* cv = c.take<float>(z.Dv * ldc);
    amx::TileScope tile_config;
    for (int64_t nbi = begin; nbi < end; ++nbi) {
      const int64_t n0 = nbi * TN, nb = imin(TN, N - n0);
      {
        OP_PROFILE_SCOPE(kPack);
        for (int64_t n = 0; n < nb; ++n) {
          const uint16_t* k1 = K1 + (n0 + n) * K * D;
          pack_transposed_panels(k1, D, z, K, D, k1t + n * z.kt);
          pack_transposed_panels(V1 + (n0 + n) * K * D, D, z, K, D, v1t + n * z.kt);
          pack_key_pairs(k1, D, z, K, D, k1p + n * z.vp);
        }
      }
      for (int64_t m0 = 0; m0 < M; m0 += TM) {
        const int64_t mb = imin(TM, M - m0);
        {
          OP_PROFILE_SCOPE(kPack);
          for (int64_t n = 0; n < TN; ++n)
            for (int64_t m = 0; m < TM; ++m) {
              const bool live = n < nb && m < mb;
              const int64_t g = (n0 + n) * M + m0 + m, r = n * TM + m;
              for (uint16_t* a : {qa, da}) {
                uint16_t* dst = a + n * z.ldq + m * z.Dp;
                if (live) std::memcpy(dst, (a == qa ? Q : dY) + g * D, static_cast<size_t>(D) * 2);
                std::memset(dst + (live ? D : 0), 0, static_cast<size_t>(z.Dp - (live ? D : 0)) * 2);
              }
              if (!live) {
                std::memset(dsa + r * z.ldp, 0, static_cast<size_t>(z.ldp) * 2);
                continue;
              }
              rmax[r] = smax[g * 8];
              rinv[r] = 1.0f / ssum[g * 8];
            }
        }
        {
          OP_PROFILE_SCOPE(kReduce);
          for (int64_t n = 0; n < nb; ++n)
            for (int64_t m = 0; m < mb; ++m) {
              const int64_t g = (n0 + n) * M + m0 + m;
              V acc = _mm512_setzero_ps();
              for (int64_t d = 0; d < D; d += 16) {
                const __mmask16 dm = lanes(D - d);
                acc = _mm512_fmadd_ps(amx::bf16_to_float(_mm256_maskz_loadu_epi16(dm, dY + g * D + d)),
                                      amx::bf16_to_float(_mm256_maskz_loadu_epi16(dm, O + g * D + d)), acc);
              }
              dr[n * TM + m] = _mm512_reduce_add_ps(acc);
            }
        }
        for (int64_t k0 = 0; k0 < K; k0 += z.kb) {
          const int64_t kv = imin(z.kb, K - k0), kbp = tiles::pad32(kv);
          {
            OP_PROFILE_SCOPE(kGemm);
            block_scores(z, nb, mb, m0, k0, kbp, qa, k1t, k2t, s);
            block_scores(z, nb, mb, m0, k0, kbp, da, v1t, v2t, dp);
          }
          {
            OP_PROFILE_SCOPE(kSoftmax);
            bool plain[TN];
            for (int64_t n = 0; n < nb; ++n) {
              __mmask16* mk = mbits + n * (z.kb / 16);
              const bool any_masked =
                  key_mask_bits(mask != nullptr ? mask + (n0 + n) * K + k0 : nullptr, kv, kbp, mk);
              plain[n] = !any_masked && scale > 0.0f;
            }
            // Rows in quads (n, n + 1) x (m, m + 1), P and dS of each 16 keys kept in registers:
            // dS as bf16 rows (the A of dQ), and both as VNNI pairs of m (of each n, for dK1 / dV1)
            // and of n (of each m, the shared buffers for dK2 / dV2: streamed, read only after the
            // n pass). Rows past nb / mb are zero: the pairs of m of a live n run to the block's
            // TM rows and the pairs of n of a live m to its TN rows, the contractions' zero padding.
            for (int64_t n = 0; n < TN; n += 2)
              for (int64_t m = 0; m < TM; m += 2) {
                if (n >= nb && m >= mb) continue;
                GradRow g[2][2];
                bool live[2][2];
                for (int a = 0; a < 2; ++a)
                  for (int c = 0; c < 2; ++c) {
                    const int64_t r = (n + a) * TM + m + c;
                    live[a][c] = n + a < nb && m + c < mb;
                    if (live[a][c])
                      g[a][c] = {s + r * z.lds, dp + r * z.lds, mbits + (n + a) * (z.kb / 16), plain[n + a], rmax[r],
                                 rinv[r], dr[r]};
                  }
                for (int64_t v = 0; v < kbp / 16; ++v) {
                  const int64_t left = kv - 16 * v, panel = k0 / 16 + v;
                  const __mmask16 valid = lanes(left);
                  V pv[2][2], dsv[2][2];
                  for (int a = 0; a < 2; ++a)
                    for (int c = 0; c < 2; ++c) {
                      pv[a][c] = dsv[a][c] = _mm512_setzero_ps();
                      if (!live[a][c]) continue;
                      grad16(g[a][c], v, valid, scale, low, &pv[a][c], &dsv[a][c]);
                      const int64_t r = (n + a) * TM + m + c;
                      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dsa + r * z.ldp + 16 * v),
                                          (__m256i)_mm512_cvtneps_pbh(dsv[a][c]));
                    }
                  for (int a = 0; a < 2 && n + a < nb; ++a) {
                    const int64_t at = ((n + a) * z.Kp / 16 + panel) * 16 * Mp + 32 * ((m0 + m) / 2);
                    _mm512_storeu_si512(p1 + at, pairs_of(pv[a][0], pv[a][1]));
                    _mm512_storeu_si512(ds1 + at, pairs_of(dsv[a][0], dsv[a][1]));
                  }
                  for (int c = 0; c < 2 && m + c < mb; ++c) {
                    const int64_t at = ((m0 + m + c) * z.Kp / 16 + panel) * 16 * Np + 32 * ((n0 + n) / 2);
                    _mm512_stream_si512(reinterpret_cast<__m512i*>(p2 + at), pairs_of(pv[0][c], pv[1][c]));
                    _mm512_stream_si512(reinterpret_cast<__m512i*>(ds2 + at), pairs_of(dsv[0][c], dsv[1][c]));
                  }
                }
              }
          }
          OP_PROFILE_SCOPE(kGemm);
          block_contract(z, nb, mb, m0, k0, kbp, dsa, k1p, k2p, dq);
        }
        OP_PROFILE_SCOPE(kOther);
        for (int64_t n = 0; n < nb; ++n)
          for (int64_t m = 0; m < mb; ++m) {
            const int64_t r = n * TM + m, g = (n0 + n) * M + m0 + m;
            isa::store_bf16_row(dq + r * z.ldo, dQ + g * D, D, 1.0f, /*stream=*/true);
          }
      }
      // dK1[n]^T = Q[n]^T dS[n], dV1[n]^T = dY[n]^T P[n], contracting all M rows.
      for (int64_t n = 0; n < nb; ++n) {
        {
          OP_PROFILE_SCOPE(kPack);
          pack_transposed(Q + (n0 + n) * M * D, D, M, D, z.Dv, Mp, stage, qt);
          pack_transposed(dY + (n0 + n) * M * D, D, M, D, z.Dv, Mp, stage, dyt);
        }
        {
          OP_PROFILE_SCOPE(kGemm);
          amx::gemm<false>(z.Dv, z.Kp, Mp, qt, Mp, ds1 + n * z.Kp * Mp, 16 * Mp, ck, ldc);
          amx::gemm<false>(z.Dv, z.Kp, Mp, dyt, Mp, p1 + n * z.Kp * Mp, 16 * Mp, cv, ldc);
        }
        OP_PROFILE_SCOPE(kReduce);
        write_transposed(ck, ldc, K, D, dK1 + (n0 + n) * K * D, D);
        write_transposed(cv, ldc, K, D, dV1 + (n0 + n) * K * D, D);
      }
    }
    _mm_sfence();  // the streamed pairs (and dQ, dK1, dV1) are visible before the m pass reads them
  });
  // dK2[:, m]^T = Q[:, m]^T dS[:, m], dV2 likewise, contracting all N rows.
  op_plugin::parallel_for_dynamic(0, M, 1, [&](int64_t begin, int64_t end) {
    Carve c{static_cast<char*>(workspace) + p.shared_bytes + p.scratch_bytes * op_plugin::thread_num()};
    uint16_t* qt = c.take<uint16_t>(z.Dv * Np);
    uint16_t* dyt = c.take<uint16_t>(z.Dv * Np);
    uint16_t* stage = c.take<uint16_t>(z.Dv * Np);
    float* ck = c.take<float>(z.Dv * ldc);
    float* cv = c.take<float>(z.Dv * ldc);
    amx::TileScope tile_config;
    for (int64_t m = begin; m < end; ++m) {
      {
        OP_PROFILE_SCOPE(kPack);
        pack_transposed(Q + m * D, M * D, N, D, z.Dv, Np, stage, qt);
        pack_transposed(dY + m * D, M * D, N, D, z.Dv, Np, stage, dyt);
      }
      {
        OP_PROFILE_SCOPE(kGemm);
        amx::gemm<false>(z.Dv, z.Kp, Np, qt, Np, ds2 + m * z.Kp * Np, 16 * Np, ck, ldc);
        amx::gemm<false>(z.Dv, z.Kp, Np, dyt, Np, p2 + m * z.Kp * Np, 16 * Np, cv, ldc);
      }
      OP_PROFILE_SCOPE(kReduce);
      write_transposed(ck, ldc, K, D, dK2 + m * D, M * D);
      write_transposed(cv, ldc, K, D, dV2 + m * D, M * D);
    }
    _mm_sfence();  // the streamed dK2 / dV2 rows are visible when the call returns
  });
}

inline void backward(const BwdPlan& p, void* workspace) {
  for (int64_t bh = 0; bh < p.B * p.H; ++bh) backward_bh(p, bh, workspace);
}

}  // namespace amx_flow
}  // namespace avx512
}  // namespace floyd
}  // namespace op_plugin
