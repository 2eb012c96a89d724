// AMX-BF16 GEMM for the bf16 pair operands of gemm_ukernel.h (torch-free, AVX-512 translation unit).
//
// Why: on CPUs with AMX (Intel Xeon 4th generation and later) one TDPBF16PS multiplies a 16x32
// bf16 tile by a 32x16 one into 16x16 fp32 accumulators: 8192 multiply-adds per instruction,
// where vdpbf16ps does 32. Used by the kernels whose GEMMs are many small ones on operands in the
// vector kernels' layouts (Floyd's generic algorithm, where its AMX dataflow does not apply); the
// flash engine's and Floyd's AMX dataflows use amx_tile.h directly.
//
// Included by gemm_ukernel.h (after its GemmMode). Same contract as gemm<Ops512Bf16>: C (mode)=
// A * B, K counted in bf16 pairs, A(m, k) the pair at A + m*sam + k*sak, B row k (N pairs, VNNI
// order: exactly AMX's B-tile row layout) at B + k*ldb, C fp32 with columns written up to the
// next multiple of 16. Per 16-row strip, up to four 16-column C tiles stay in tile registers for
// the whole contraction (one A tile load feeds four TDPBF16PS). A full strip of C is loaded into
// and stored from the tiles directly (kAccumulate; kScaleAccumulate scales its rows first); a
// strip of fewer rows goes through a stack block. A and B are read straight into tiles where
// their layout allows; otherwise they are copied into zero-padded stack blocks, which also
// covers every tail: A once per strip, B once per (strip, panel) (a tail-free B, the common case,
// is never copied). The tile configuration is an amx::TileScope: a caller holding one over its
// task pays for it once. The summation order is fixed (k blocks of 16 pairs ascending), so
// results do not depend on the thread count; they differ from vdpbf16ps's in the last bits.
#pragma once
#include <cstdint>
#include <cstring>

#include "kernels/common/amx_tile.h"
#include "kernels/common/simd.h"

#if defined(OP_AVX512_BF16)
namespace op_plugin {
namespace OP_ISA_NS {
namespace amx {

constexpr int kTile = 16;  // rows of every tile; 16 pairs (64 bytes) per row

inline int64_t round16(int64_t n) { return (n + kTile - 1) / kTile * kTile; }
// The first n (>= 1) of 16 lanes.
inline __mmask16 tail_mask(int64_t n) { return static_cast<__mmask16>(n >= kTile ? 0xffff : (1u << n) - 1); }

// Operands are copied into stack blocks (the kernels never allocate in stage 2), which bounds the
// contraction to 128 pairs (Floyd's head dims up to 256; 44 KB of stack): longer ones return false
// and the caller runs the vector kernel.
constexpr int64_t kMaxPairs = 128;

OP_AMX_TARGET inline bool gemm_bf16(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t sam, int64_t sak,
                                   const uint16_t* B, int64_t ldb, float* C, int64_t ldc, const float* rs, int mode) {
  if (K > kMaxPairs) return false;
  constexpr int64_t kPanels = 4;  // C tiles held per strip (tiles 0..3; A is tile 4, B tiles 5..6)
  const int64_t Kp = round16(K);
  alignas(64) uint32_t a_strip[kTile * kMaxPairs];             // 16 rows x Kp pairs, zero-padded (8 KB)
  alignas(64) uint32_t b_panel[kPanels][kMaxPairs * kTile];    // Kp pairs x 16 columns per panel (32 KB)
  alignas(64) float product[kPanels][kTile * kTile];
  TileScope tiles;
  const bool accumulate = mode == kAccumulate || (mode == kScaleAccumulate && rs == nullptr);
  // A full 16-row strip of C lives in the tiles: scaled in place first (kScaleAccumulate), then
  // loaded (accumulating) or zeroed, and stored back whole. A partial strip: product blocks.
  if (mode == kScaleAccumulate && rs != nullptr)
    for (int64_t r = 0; r < M / kTile * kTile; ++r) {
      const __m512 f = _mm512_set1_ps(rs[r]);
      float* c = C + r * ldc;
      for (int64_t n = 0; n < N; n += kTile) _mm512_storeu_ps(c + n, _mm512_mul_ps(_mm512_loadu_ps(c + n), f));
    }
  // Column groups of up to four panels outside, strips inside: a B panel that must be copied
  // (a column tail, or K not a multiple of 16 pairs) is copied once per call.
  for (int64_t n0 = 0; n0 < N; n0 += kPanels * kTile) {
    const int64_t np = (N - n0 + kTile - 1) / kTile < kPanels ? (N - n0 + kTile - 1) / kTile : kPanels;
    const char* b_ptr[kPanels];
    int64_t b_stride[kPanels];
    for (int64_t p = 0; p < np; ++p) {
      const int64_t c0 = n0 + p * kTile, cols = N - c0 < kTile ? N - c0 : kTile;
      // B's 16-column panel, in place without tails, else copied (pair rows are already VNNI).
      b_ptr[p] = reinterpret_cast<const char*>(B + c0 * 2);
      b_stride[p] = ldb * 2;
      if (cols < kTile || K != Kp) {
        const __mmask16 live = tail_mask(cols);
        for (int64_t k = 0; k < Kp; ++k)
          _mm512_store_si512(b_panel[p] + k * kTile,
                             k < K ? _mm512_maskz_loadu_epi32(live, B + k * ldb + c0 * 2) : _mm512_setzero_si512());
        b_ptr[p] = reinterpret_cast<const char*>(b_panel[p]);
        b_stride[p] = kTile * 4;
      }
    }
    for (int64_t m0 = 0; m0 < M; m0 += kTile) {
      const int64_t rows = M - m0 < kTile ? M - m0 : kTile;
      // A's 16-row strip, in place when its pairs run along k with no tail, else copied.
      const char* a_ptr = reinterpret_cast<const char*>(A + m0 * sam);
      int64_t a_stride = sam * 2;
      if (sam == 2 && sak % 2 == 0 && sak != 2) {
        // Pairs of adjacent rows adjacent (the transposed layout of Floyd's score buffers, the
        // A of its dK / dV GEMMs): 16 x 16 blocks of pairs transposed in registers (a pair at a
        // time, this copy took 10x the strip's TDPBF16PS time).
        const uint32_t* at = reinterpret_cast<const uint32_t*>(A + m0 * sam);
        for (int64_t k = 0; k < Kp; k += kTile)
          transpose16x16_u32(at + k * (sak / 2), sak / 2, static_cast<int>(K - k < kTile ? K - k : kTile),
                             static_cast<int>(rows), a_strip + k, Kp);
        a_ptr = reinterpret_cast<const char*>(a_strip);
        a_stride = Kp * 4;
      } else if (sak != 2 || rows < kTile || K != Kp) {
        for (int64_t m = 0; m < kTile; ++m)
          for (int64_t k = 0; k < Kp; k += kTile) {
            __m512i v = _mm512_setzero_si512();
            const __mmask16 live = k < K ? tail_mask(K - k) : 0;
            if (m < rows && sak == 2)  // pairs contiguous along k: masked vector loads
              v = _mm512_maskz_loadu_epi32(live, A + (m0 + m) * sam + k * 2);
            else if (m < rows)
              for (int64_t j = k; j < K && j < k + kTile; ++j) {
                uint32_t pair;
                std::memcpy(&pair, A + (m0 + m) * sam + j * sak, 4);
                v = _mm512_mask_set1_epi32(v, static_cast<__mmask16>(1u << (j - k)), static_cast<int>(pair));
              }
            _mm512_store_si512(a_strip + m * Kp + k, v);
          }
        a_ptr = reinterpret_cast<const char*>(a_strip);
        a_stride = Kp * 4;
      }
      const bool direct = rows == kTile;
      char* c_ptr = reinterpret_cast<char*>(C + m0 * ldc + n0);
      const int64_t c_stride = ldc * 4;
      compiler_barrier();
      // Tile numbers are immediates: the four C tiles are spelled out.
#define OP_GEMM_AMX_PANELS(X) X(0, 5) if (np > 1) { X(1, 6) } if (np > 2) { X(2, 5) } if (np > 3) { X(3, 6) }
#define OP_GEMM_AMX_INIT(p, b)                                                             \
  if (direct && mode != kOverwrite) OP_TILE_LOADD(p, c_ptr + (p) * kTile * 4, c_stride); \
  else OP_TILE_ZERO(p);
      OP_GEMM_AMX_PANELS(OP_GEMM_AMX_INIT)
      for (int64_t k0 = 0; k0 < Kp; k0 += kTile) {
        OP_TILE_LOADD(4, a_ptr + k0 * 4, a_stride);
#define OP_GEMM_AMX_STEP(p, b)                               \
  OP_TILE_LOADD(b, b_ptr[p] + k0 * b_stride[p], b_stride[p]); \
  OP_TILE_DPBF16PS(p, 4, b);
        OP_GEMM_AMX_PANELS(OP_GEMM_AMX_STEP)
      }
#define OP_GEMM_AMX_STORE(p, b)                                    \
  if (direct) OP_TILE_STORED(p, c_ptr + (p) * kTile * 4, c_stride); \
  else OP_TILE_STORED(p, product[p], kTile * 4);
      OP_GEMM_AMX_PANELS(OP_GEMM_AMX_STORE)
#undef OP_GEMM_AMX_STORE
#undef OP_GEMM_AMX_STEP
#undef OP_GEMM_AMX_INIT
#undef OP_GEMM_AMX_PANELS
      compiler_barrier();
      if (direct) continue;
      for (int64_t p = 0; p < np; ++p)
        for (int64_t r = 0; r < rows; ++r) {
          float* c = C + (m0 + r) * ldc + n0 + p * kTile;
          __m512 v = _mm512_load_ps(product[p] + r * kTile);
          if (accumulate)
            v = _mm512_add_ps(_mm512_loadu_ps(c), v);
          else if (mode == kScaleAccumulate)
            v = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(c), _mm512_set1_ps(rs[m0 + r])), v);
          _mm512_storeu_ps(c, v);
        }
    }
  }
  return true;
}

}  // namespace amx
}  // namespace OP_ISA_NS
}  // namespace op_plugin
#endif  // OP_AVX512_BF16
