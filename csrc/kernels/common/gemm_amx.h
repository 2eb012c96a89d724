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
// are copied once per call into zero-padded 16-row / 16-pair blocks, which also covers every tail.
// Each call loads its own tile configuration and releases the tiles at the end: other code on the
// thread (oneDNN) configures tiles too. The summation order is fixed (k blocks of 16 pairs
// ascending), so results do not depend on the thread count; they differ from vdpbf16ps's in the
// last bits.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/common/simd.h"

#if defined(__AVX512BF16__)
namespace op_plugin {
namespace OP_ISA_NS {
namespace amx {

constexpr int kTile = 16;  // rows of every tile; 16 pairs (64 bytes) per row

struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// Per-thread scratch for the copied operands, 64-byte aligned, grown and never shrunk, freed when
// the thread ends.
struct Scratch {
  void* buf = nullptr;
  int64_t cap = 0;
  ~Scratch() { std::free(buf); }
  uint32_t* get(int64_t bytes) {
    if (bytes > cap) {
      std::free(buf);
      const int64_t rounded = (bytes + 4095) & ~int64_t{4095};
      buf = std::aligned_alloc(64, static_cast<size_t>(rounded));
      cap = buf ? rounded : 0;
    }
    return static_cast<uint32_t*>(buf);
  }
};

inline uint32_t* scratch(int slot, int64_t bytes) {
  static thread_local Scratch buffers[2];
  return buffers[slot].get(bytes);
}

// The tile instructions are inline asm that name only the base pointer: tell the compiler that
// memory is read (after our packing stores) and written (by a tile store).
inline void memory_barrier() { __asm__ volatile("" ::: "memory"); }

inline int64_t round16(int64_t n) { return (n + kTile - 1) / kTile * kTile; }

// Returns false (and computes nothing) if a scratch buffer cannot be had; the caller then runs
// the vector kernel.
__attribute__((target("amx-tile,amx-bf16"))) inline bool gemm_bf16(int64_t M, int64_t N, int64_t K,
                                                                    const uint16_t* A, int64_t sam, int64_t sak,
                                                                    const uint16_t* B, int64_t ldb, float* C,
                                                                    int64_t ldc, const float* rs, int mode) {
  const int64_t Mp = round16(M), Np = round16(N), Kp = round16(K);
  // A straight into tiles: pairs contiguous along k and no tails in M or K.
  const bool a_direct = sak == 2 && M == Mp && K == Kp;
  // B straight into tiles: no tails in N or K (rows are already pair-interleaved).
  const bool b_direct = N == Np && K == Kp;
  const uint32_t* a_base = reinterpret_cast<const uint32_t*>(A);
  int64_t a_stride = sam * 2;  // bytes between rows of A
  if (!a_direct) {
    uint32_t* pa = scratch(0, Mp * Kp * 4);
    if (pa == nullptr) return false;
    for (int64_t m = 0; m < Mp; ++m)
      for (int64_t k = 0; k < Kp; ++k) {
        uint32_t pair = 0;
        if (m < M && k < K) std::memcpy(&pair, A + m * sam + k * sak, 4);
        pa[m * Kp + k] = pair;
      }
    a_base = pa;
    a_stride = Kp * 4;
  }
  const uint32_t* b_base = reinterpret_cast<const uint32_t*>(B);
  int64_t b_stride = ldb * 2;  // bytes between pair rows of B
  if (!b_direct) {
    uint32_t* pb = scratch(1, Kp * Np * 4);
    if (pb == nullptr) return false;
    for (int64_t k = 0; k < Kp; ++k) {
      uint32_t* row = pb + k * Np;
      if (k < K) {
        std::memcpy(row, B + k * ldb, static_cast<size_t>(N) * 4);
        std::memset(row + N, 0, static_cast<size_t>(Np - N) * 4);
      } else {
        std::memset(row, 0, static_cast<size_t>(Np) * 4);
      }
    }
    b_base = pb;
    b_stride = Np * 4;
  }

  TileConfig cfg;
  std::memset(&cfg, 0, sizeof(cfg));
  cfg.palette_id = 1;
  for (int t = 0; t < 3; ++t) {
    cfg.rows[t] = kTile;
    cfg.colsb[t] = kTile * 4;
  }
  _tile_loadconfig(&cfg);
  alignas(64) float product[kTile * kTile];
  memory_barrier();
  for (int64_t m0 = 0; m0 < Mp; m0 += kTile) {
    const int64_t rows = M - m0 < kTile ? M - m0 : kTile;
    for (int64_t n0 = 0; n0 < Np; n0 += kTile) {
      _tile_zero(0);
      for (int64_t k0 = 0; k0 < Kp; k0 += kTile) {
        _tile_loadd(1, reinterpret_cast<const char*>(a_base) + m0 * a_stride + k0 * 4, a_stride);
        _tile_loadd(2, reinterpret_cast<const char*>(b_base) + k0 * b_stride + n0 * 4, b_stride);
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
