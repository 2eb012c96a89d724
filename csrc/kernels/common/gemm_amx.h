// AMX-BF16 GEMM for the bf16 pair operands of gemm_ukernel.h (torch-free, AVX-512 translation unit).
//
// Why: on CPUs with AMX (Intel Xeon 4th generation and later) one TDPBF16PS multiplies a 16x32
// bf16 tile by a 32x16 one into 16x16 fp32 accumulators: 8192 multiply-adds per instruction,
// where vdpbf16ps does 32. PyTorch's bf16 matmuls use it through oneDNN; without it our bf16
// attention ran at a quarter of SDPA's speed on such a host (docs/benchmarks.md).
//
// Included by gemm_ukernel.h (after its GemmMode). Same contract as gemm<Ops512Bf16>: C (mode)=
// A * B, K counted in bf16 pairs, A(m, k) the pair at A + m*sam + k*sak, B row k (N pairs, VNNI
// order: exactly AMX's B-tile row layout) at B + k*ldb, C fp32 with columns written up to the
// next multiple of 16. The product starts from zero and C is combined once at the end, as in the
// vector kernel. A and B are read straight into tiles where their layout allows; otherwise they
// are copied into zero-padded stack blocks, which also covers every tail: A once per 16-row strip,
// B once per (strip, 16-column panel) (a tail-free B, the common case, is never copied). Each
// call loads its own tile configuration and releases the tiles at the end: other code on the
// thread (oneDNN) configures tiles too. The summation order is fixed (k blocks of 16 pairs
// ascending), so results do not depend on the thread count; they differ from vdpbf16ps's in the
// last bits.
#pragma once
#include <cstdint>
#include <cstring>

#include "kernels/common/amx_tile.h"
#include "kernels/common/simd.h"

#if defined(__AVX512BF16__)
namespace op_plugin {
namespace OP_ISA_NS {
namespace amx {

constexpr int kTile = 16;  // rows of every tile; 16 pairs (64 bytes) per row

// The tile instructions are inline asm that name only the base pointer: tell the compiler that
// memory is read (after our packing stores) and written (by a tile store).
inline void memory_barrier() { __asm__ volatile("" ::: "memory"); }

inline int64_t round16(int64_t n) { return (n + kTile - 1) / kTile * kTile; }

// Operands are copied into stack blocks (the kernels never allocate in stage 2), which bounds the
// contraction: longer ones (none of the attention kernels' GEMMs) return false and the caller runs
// the vector kernel.
constexpr int64_t kMaxPairs = 512;

__attribute__((target("amx-tile,amx-bf16"))) inline bool gemm_bf16(int64_t M, int64_t N, int64_t K,
                                                                    const uint16_t* A, int64_t sam, int64_t sak,
                                                                    const uint16_t* B, int64_t ldb, float* C,
                                                                    int64_t ldc, const float* rs, int mode) {
  if (K > kMaxPairs) return false;
  const int64_t Kp = round16(K);
  alignas(64) uint32_t a_strip[kTile * kMaxPairs];  // 16 rows x Kp pairs, zero-padded (32 KB)
  alignas(64) uint32_t b_panel[kMaxPairs * kTile];  // Kp pairs x 16 columns, zero-padded (32 KB)
  alignas(64) float product[kTile * kTile];

  TileConfig cfg;
  std::memset(&cfg, 0, sizeof(cfg));
  cfg.palette_id = 1;
  for (int t = 0; t < 3; ++t) {
    cfg.rows[t] = kTile;
    cfg.colsb[t] = kTile * 4;
  }
  memory_barrier();  // ldtilecfg's asm names only the first bytes of cfg: make every field stored
  _tile_loadconfig(&cfg);
  for (int64_t m0 = 0; m0 < M; m0 += kTile) {
    const int64_t rows = M - m0 < kTile ? M - m0 : kTile;
    // A's 16-row strip, in place when its pairs run along k with no tail, else copied once.
    const char* a_ptr = reinterpret_cast<const char*>(A + m0 * sam);
    int64_t a_stride = sam * 2;
    if (sak != 2 || rows < kTile || K != Kp) {
      for (int64_t m = 0; m < kTile; ++m)
        for (int64_t k = 0; k < Kp; ++k) {
          uint32_t pair = 0;
          if (m < rows && k < K) std::memcpy(&pair, A + (m0 + m) * sam + k * sak, 4);
          a_strip[m * Kp + k] = pair;
        }
      a_ptr = reinterpret_cast<const char*>(a_strip);
      a_stride = Kp * 4;
    }
    for (int64_t n0 = 0; n0 < N; n0 += kTile) {
      const int64_t cols = N - n0 < kTile ? N - n0 : kTile;
      // B's 16-column panel, in place without tails, else copied (pair rows are already VNNI).
      const char* b_ptr = reinterpret_cast<const char*>(B + n0 * 2);
      int64_t b_stride = ldb * 2;
      if (cols < kTile || K != Kp) {
        for (int64_t k = 0; k < Kp; ++k) {
          uint32_t* row = b_panel + k * kTile;
          std::memset(row, 0, kTile * 4);
          if (k < K) std::memcpy(row, B + k * ldb + n0 * 2, static_cast<size_t>(cols) * 4);
        }
        b_ptr = reinterpret_cast<const char*>(b_panel);
        b_stride = kTile * 4;
      }
      memory_barrier();
      _tile_zero(0);
      for (int64_t k0 = 0; k0 < Kp; k0 += kTile) {
        _tile_loadd(1, a_ptr + k0 * 4, a_stride);
        _tile_loadd(2, b_ptr + k0 * b_stride, b_stride);
        _tile_dpbf16ps(0, 1, 2);
      }
      _tile_stored(0, product, kTile * 4);
      memory_barrier();
      for (int64_t r = 0; r < rows; ++r) {
        float* c = C + (m0 + r) * ldc + n0;
        __m512 p = _mm512_load_ps(product + r * kTile);
        if (mode == kAccumulate || (mode == kScaleAccumulate && rs == nullptr))
          p = _mm512_add_ps(_mm512_loadu_ps(c), p);
        else if (mode == kScaleAccumulate)
          p = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(c), _mm512_set1_ps(rs[m0 + r])), p);
        _mm512_storeu_ps(c, p);
      }
    }
  }
  _tile_release();
  return true;
}

}  // namespace amx
}  // namespace OP_ISA_NS
}  // namespace op_plugin
#endif  // __AVX512BF16__
