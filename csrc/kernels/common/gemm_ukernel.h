// Register-blocked GEMM micro-kernels for the attention kernels (torch-free, per ISA).
//
// Why our own micro-kernels rather than a library (oneDNN's ukernel brgemm from PyPI is the
// alternative that was considered):
//   * The attention GEMMs are tiny (64..128 on every side) and are fused with softmax passes
//     that own the layout of one operand (P, dS); a library call per tile costs a dispatch and
//     forces its packing format, while here the operand formats are chosen so that most
//     operands are read in place (keys, values and Q/dO rows straight from the user tensors).
//   * Determinism and bitwise equality for any thread count need a fixed summation order per
//     output element; our kernels have exactly one (k ascending, one accumulator per element,
//     or per block of k for gemm_dots).
//   * The kernel library must stay torch-free and dependency-free (one compiler, no runtime
//     JIT, no extra wheel); the AVX-512 / AVX2 / baseline variants are three instantiations of
//     the template below, selected once at run time.
//
// Contract (all sizes in elements):
//   C[m][n] (op)= sum_k A(m, k) * B(k, n),  m < M, n < N, k < K
//   A(m, k)  : broadcast operand, element (pair, if Ops::KP == 2) at A + m*sam + k*sak
//   B(k, :)  : row k at B + k*ldb, N contiguous columns (KP == 2: 2N values, pairs of k)
//   C        : fp32/fp64 row-major with ldc >= round_up(N, W); the columns from N up to the
//              next multiple of W are written too (with zeros contributions from B), so C
//              buffers are padded to W.
//   mode     : kOverwrite (C = AB), kAccumulate (C += AB), kScaleAccumulate (C = C*rs[m] + AB)
//   B tails  : when N % W != 0 the last B vector is read with a masked load, so B rows may end
//              exactly at the end of a user tensor.
// Register tile: MR rows x NV vectors of accumulators, one B vector load per (k, vector),
// one broadcast per (k, row). AVX-512: 6 x 4 zmm (24 accumulators + 4 B + 1 A of 32 zmm);
// AVX2: 6 x 2 ymm (12 + 2 + 1 of 16); portable: 4 x 2. bf16 pairs on a CPU with AMX go to the
// tile kernel of gemm_amx.h instead.
#pragma once
#include <cstdint>
#include <optional>

#include "kernels/common/simd.h"
#include "op_plugin/isa.h"

namespace op_plugin {
namespace OP_ISA_NS {
enum GemmMode : int { kOverwrite = 0, kAccumulate = 1, kScaleAccumulate = 2 };
}  // namespace OP_ISA_NS
}  // namespace op_plugin

#include "kernels/common/gemm_amx.h"

namespace op_plugin {
namespace OP_ISA_NS {

template <class Ops>
struct GemmTile {
#if defined(OP_AVX512)
  static constexpr int MR = 6;
  static constexpr int NV = 4;
#elif defined(__AVX2__)
  static constexpr int MR = 6;
  static constexpr int NV = 2;
#else
  static constexpr int MR = 4;
  static constexpr int NV = 2;
#endif
};

template <class Ops, int MR, int NV, bool TAIL>
__attribute__((always_inline)) inline void gemm_ukernel(int64_t K, const typename Ops::T* __restrict A, int64_t sam,
                                                        int64_t sak, const typename Ops::T* __restrict B, int64_t ldb,
                                                        typename Ops::S* __restrict C, int64_t ldc, int tail_n,
                                                        const typename Ops::S* __restrict rs, int mode,
                                                        int64_t kblock) {
  using V = typename Ops::V;
  constexpr int W = Ops::W;
  constexpr int KP = Ops::KP;
  // The product starts from zero and C is added once at the end (as BLAS does for beta = 1):
  // a long reduction accumulated tile by tile (dK/dV over every query block) is then a sum of
  // K-term blocks, not one chain of rounded FMAs whose error grows with the sequence length.
  // With kblock > 0 the k range itself goes in blocks of kblock steps the same way: each block
  // from zero, added to C (the first block by mode, the later ones accumulated).
  for (int64_t k0 = 0;;) {
    const int64_t k1 = kblock > 0 && K - k0 > kblock ? k0 + kblock : K;
    V acc[MR][NV];
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[m][v] = Ops::zero();
    for (int64_t k = k0; k < k1; ++k) {
      typename Ops::BV b[NV];
      const typename Ops::T* bk = B + k * ldb;
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) {
        if (TAIL && v == NV - 1)
          b[v] = Ops::loadb_tail(bk + v * W * KP, tail_n);
        else
          b[v] = Ops::loadb(bk + v * W * KP);
      }
      const typename Ops::T* ak = A + k * sak;
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) {
        const typename Ops::AV a = Ops::bcast(ak + m * sam);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[m][v] = Ops::fma(acc[m][v], a, b[v]);
      }
    }
    if (mode == kAccumulate || (mode == kScaleAccumulate && rs == nullptr)) {
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[m][v] = Ops::add(Ops::loadc(C + m * ldc + v * W), acc[m][v]);
    } else if (mode == kScaleAccumulate) {
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) {
        const V s = Ops::set1(rs[m]);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[m][v] = Ops::add(Ops::mul(Ops::loadc(C + m * ldc + v * W), s), acc[m][v]);
      }
    }
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) Ops::storec(C + m * ldc + v * W, acc[m][v]);
    if (k1 == K) break;
    k0 = k1;
    mode = kAccumulate;
  }
}

// Calls the micro-kernel with MR rows (1..MR) and nv vectors (1..NV) chosen at run time.
template <class Ops, int MR, int NV, bool TAIL>
inline void gemm_rows(int mr, int64_t K, const typename Ops::T* A, int64_t sam, int64_t sak,
                      const typename Ops::T* B, int64_t ldb, typename Ops::S* C, int64_t ldc, int tail_n,
                      const typename Ops::S* rs, int mode, int64_t kblock) {
  if constexpr (MR > 1) {
    if (mr < MR) {
      gemm_rows<Ops, MR - 1, NV, TAIL>(mr, K, A, sam, sak, B, ldb, C, ldc, tail_n, rs, mode, kblock);
      return;
    }
  }
  gemm_ukernel<Ops, MR, NV, TAIL>(K, A, sam, sak, B, ldb, C, ldc, tail_n, rs, mode, kblock);
}

template <class Ops, int NV, bool TAIL>
inline void gemm_strip(int64_t M, int64_t K, const typename Ops::T* A, int64_t sam, int64_t sak,
                       const typename Ops::T* B, int64_t ldb, typename Ops::S* C, int64_t ldc, int tail_n,
                       const typename Ops::S* rs, int mode, int64_t kblock) {
  constexpr int MR = GemmTile<Ops>::MR;
  int64_t m = 0;
  for (; m + MR <= M; m += MR)
    gemm_ukernel<Ops, MR, NV, TAIL>(K, A + m * sam, sam, sak, B, ldb, C + m * ldc, ldc, tail_n,
                                    rs ? rs + m : nullptr, mode, kblock);
  if (m < M)
    gemm_rows<Ops, MR - 1, NV, TAIL>(static_cast<int>(M - m), K, A + m * sam, sam, sak, B, ldb, C + m * ldc,
                                     ldc, tail_n, rs ? rs + m : nullptr, mode, kblock);
}

template <class Ops, int NV>
inline void gemm_strip_nv(int nv, bool tail, int64_t M, int64_t K, const typename Ops::T* A, int64_t sam,
                          int64_t sak, const typename Ops::T* B, int64_t ldb, typename Ops::S* C, int64_t ldc,
                          int tail_n, const typename Ops::S* rs, int mode, int64_t kblock) {
  if constexpr (NV > 1) {
    if (nv < NV) {
      gemm_strip_nv<Ops, NV - 1>(nv, tail, M, K, A, sam, sak, B, ldb, C, ldc, tail_n, rs, mode, kblock);
      return;
    }
  }
  if (tail)
    gemm_strip<Ops, NV, true>(M, K, A, sam, sak, B, ldb, C, ldc, tail_n, rs, mode, kblock);
  else
    gemm_strip<Ops, NV, false>(M, K, A, sam, sak, B, ldb, C, ldc, tail_n, rs, mode, kblock);
}

// C (mode)= A * B over M x N x K (K counted in k steps of Ops::KP elements); kblock > 0 sums
// the products in blocks of kblock k steps (gemm_dots).
template <class Ops>
inline void gemm(int64_t M, int64_t N, int64_t K, const typename Ops::T* A, int64_t sam, int64_t sak,
                 const typename Ops::T* B, int64_t ldb, typename Ops::S* C, int64_t ldc,
                 const typename Ops::S* rs, int mode, int64_t kblock = 0) {
  constexpr int W = Ops::W;
  constexpr int KP = Ops::KP;
  constexpr int NV = GemmTile<Ops>::NV;
  if (M <= 0 || N <= 0) return;
#if defined(OP_AVX512_BF16)
  if constexpr (Ops::kNativeBf16) {
    // AMX tiles where the CPU has them (Isa::kAvx512Amx); gemm_amx.h says why and how.
    static const bool amx = active_isa() == Isa::kAvx512Amx;
    if (amx && K > 0 && amx::gemm_bf16(M, N, K, A, sam, sak, B, ldb, C, ldc, rs, mode)) return;
  }
#endif
  for (int64_t n0 = 0; n0 < N; n0 += NV * W) {
    const int64_t ncols = imin(N - n0, NV * W);
    const int nv = static_cast<int>((ncols + W - 1) / W);
    const int tail_n = static_cast<int>(ncols - (nv - 1) * W);
    gemm_strip_nv<Ops, NV>(nv, tail_n != W, M, K, A, sam, sak, B + n0 * KP, ldb, C + n0, ldc, tail_n, rs, mode,
                           kblock);
  }
}

// C = A * B for the attention's dot products (scores K Q^T, the backward's dP = V dO^T), whose
// k runs over the head dim: up to 256 products an element. One FMA chain over them all rounds
// each partial sum at the magnitude of the whole; PyTorch's GEMMs carry fewer roundings, and
// with few keys a logit is nearly all of a row's result (a float32 call with 1-3 keys went over
// its budget, docs/reliability.md). So float products are summed in blocks of kDotBlockK, each
// block one chain from zero (the micro-kernel's contract) and the blocks' sums added in order:
// ((b0 + b1) + b2) + ... The bf16 pair kernels keep one chain: their inputs' rounding dominates.
constexpr int64_t kDotBlockK = 32;

template <class Ops>
inline void gemm_dots(int64_t M, int64_t N, int64_t K, const typename Ops::T* A, int64_t sam, int64_t sak,
                      const typename Ops::T* B, int64_t ldb, typename Ops::S* C, int64_t ldc) {
  gemm<Ops>(M, N, K, A, sam, sak, B, ldb, C, ldc, nullptr, kOverwrite, Ops::KP == 1 ? kDotBlockK : 0);
}

// Holds the AMX tile configuration over a task whose gemm<Ops> calls run on tiles, so that each
// call does not load it again (nothing otherwise).
template <class Ops>
struct GemmTaskScope {
#if defined(OP_AVX512_BF16)
  std::optional<amx::TileScope> tiles;
  GemmTaskScope() {
    if constexpr (Ops::kNativeBf16)
      if (active_isa() == Isa::kAvx512Amx) tiles.emplace();
  }
#endif
};

}  // namespace OP_ISA_NS
}  // namespace op_plugin
