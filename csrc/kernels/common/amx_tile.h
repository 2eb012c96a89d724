// AMX-BF16 tile GEMM building block for kernels whose operands live in tile layouts
// (torch-free, AVX-512 translation units only).
//
// Why: one TDPBF16PS multiplies a 16x32 bf16 tile by a 32x16 one into 16x16 fp32 accumulators,
// 16,384 FLOP per instruction, about 1,000 FLOP per cycle per core on a Xeon with AMX (a
// register-only loop measures it: benchmarks/kernels/bench_tile_gemm.cpp), against about 80 for
// float32 FMAs. It pays only when the operands are already in the layouts tiles load (a copy per
// GEMM costs as much as the GEMM), so the kernels that use this header write them that way:
//   A (M x K):  bf16 rows, k contiguous: row m at A + m * lda elements; K a multiple of 32.
//   B (K x N):  "VNNI panels": the columns in panels of 16, each panel a column of k pairs,
//               pair row r (k = 2r, 2r+1) holding 16 columns x 2 bf16 = 64 bytes; panel p at
//               B + p * ldp elements, pair row r at + 32 * r. N a multiple of 16.
//   C (M x N):  fp32 rows, ldc floats; M a multiple of 16. Loaded into tiles and stored back,
//               so a contraction split over several calls accumulates in place (kAccumulate).
// Every tile is 16 rows of 64 bytes, so one configuration serves every call: a TileScope loads
// it once per task (ldtilecfg costs as much as a few tile instructions) and releases the tiles
// at its end, since other code on the thread (oneDNN) configures tiles too.
// Register use: 2 A tiles, 2 B tiles, 4 C tiles (a 32 x 32 block of C per pass over K), the
// pattern of vLLM's CPU AMX attention; edges of 16 use the 1- and 2-tile variants.
// The summation order of each C element is fixed (k ascending in steps of 32), so results do
// not depend on the thread count.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/common/simd.h"
#include "op_plugin/scalar_types.h"
#include "kernels/common/amx_intrinsics.h"  // after simd.h: its model lives in OP_ISA_NS

#if defined(OP_AVX512_BF16)
namespace op_plugin {
namespace OP_ISA_NS {
namespace amx {

struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// Loads the one configuration (8 tiles of 16 x 64 bytes) for the lifetime of the scope. Scopes
// nest: only the outermost loads the configuration and releases the tiles, so a kernel can hold
// one over a task while the GEMMs it calls open their own.
struct TileScope {
  static inline thread_local int depth = 0;
  OP_AMX_TARGET TileScope() {
    if (depth++ > 0) return;
    TileConfig cfg;
    std::memset(&cfg, 0, sizeof(cfg));
    cfg.palette_id = 1;
    for (int t = 0; t < 8; ++t) {
      cfg.rows[t] = 16;
      cfg.colsb[t] = 64;
    }
    __asm__ volatile("" ::: "memory");  // ldtilecfg's asm names only cfg's first bytes
    OP_TILE_LOADCONFIG(&cfg);
  }
  OP_AMX_TARGET ~TileScope() {
    if (--depth == 0) OP_TILE_RELEASE();
  }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
};

// The tile instructions are inline asm naming only base pointers: order them against the
// surrounding C++ stores (operands packed just before) and loads (C read just after).
inline void compiler_barrier() { __asm__ volatile("" ::: "memory"); }

// float32 on bf16 tiles (Henry, Tang, Heinecke, "Leveraging the bfloat16 Artificial Intelligence
// Datatype For Higher-Precision Computations", 2019: "bf16x6"). A float x is exactly the sum of
// three bf16 parts x0 + x1 + x2, each the round-to-nearest of what the earlier ones leave
// (split<3>: 8 + 8 + 8 significant bits cover float's 24). Of the nine products of parts in x * y,
// the six with i + j <= 2 are kept; the three dropped ones sum to at most about 2^-24 |x y|, one
// float ulp, so a GEMM over the parts, accumulated in fp32 by the tiles, keeps float32's accuracy
// at six tile GEMMs' cost (against float FMAs, tiles do about 12 times the work per cycle).
// Operands in parts: part i of A at A + i * a_part elements, of B at B + i * b_part, each part in
// the layout above. The pairs (A part, B part) run smallest first.
// float16 inputs need only two parts: 8 + 8 bits hold float16's 11 exactly, and all four products
// (kSplitPairs2) keep the logits exact, as PyTorch's float32 accumulation of float16 products does
// (dropping the product of the low parts, up to 2^-16 of |x y|, put the float32 softmax_lse 10-25
// times further from float64 than PyTorch's). P, a float, gets two parts too: within 2^-16 of
// itself, where PyTorch rounds P to float16.
// kSwapParts walks the pairs as (B part, A part): the products of a GEMM with A and B exchanged
// (S^T = K Q^T against S = Q K^T) then come in the same order, so both are rounded alike bit for
// bit: the flash backward recomputes the forward's logits, not logits one rounding away.
inline constexpr int kSplitPairs[6][2] = {{2, 0}, {1, 1}, {0, 2}, {1, 0}, {0, 1}, {0, 0}};
inline constexpr int kSplitPairs2[4][2] = {{1, 1}, {1, 0}, {0, 1}, {0, 0}};
template <int kParts>
inline constexpr int kPairsOf = kParts == 1 ? 1 : kParts == 2 ? 4 : 6;
template <int kParts, bool kSwapParts = false>
constexpr int pair_part(int q, int side) {
  if (kSwapParts) side = 1 - side;
  return kParts == 1 ? 0 : kParts == 2 ? kSplitPairs2[q][side] : kSplitPairs[q][side];
}

// One MT x NT block of 16 x 16 C tiles (MT, NT in {1, 2}) over the whole contraction, of bf16
// operands (kParts 1), or of float16 (kParts 2) or float (3) ones in parts (the pairs above).
// Tiles: C 0..3 (index 2 * mt + nt), A 4..5, B 6..7. kStreamB: B tiles load with the
// non-temporal hint (tileloaddt1), see gemm_parts.
template <int MT, int NT, bool kAccumulate, int kParts, bool kSwapParts, bool kStreamB>
OP_AMX_TARGET inline void block(int64_t K, const char* a, int64_t lda_bytes, int64_t a_part_bytes, const char* b0,
                                const char* b1, int64_t b_part_bytes, char* c, int64_t ldc_bytes) {
  static_assert(kParts >= 1 && kParts <= 3, "bf16 operands, or float16 / float ones in two / three bf16 parts");
  static_assert(!kStreamB || kParts == 1, "in parts, each B part is loaded once per pair: keep it cached");
  char* c1 = c + 16 * ldc_bytes;
  if constexpr (kAccumulate) {
    OP_TILE_LOADD(0, c, ldc_bytes);
    if constexpr (NT > 1) OP_TILE_LOADD(1, c + 64, ldc_bytes);
    if constexpr (MT > 1) OP_TILE_LOADD(2, c1, ldc_bytes);
    if constexpr (MT > 1 && NT > 1) OP_TILE_LOADD(3, c1 + 64, ldc_bytes);
  } else {
    OP_TILE_ZERO(0);
    if constexpr (NT > 1) OP_TILE_ZERO(1);
    if constexpr (MT > 1) OP_TILE_ZERO(2);
    if constexpr (MT > 1 && NT > 1) OP_TILE_ZERO(3);
  }
  for (int q = 0; q < kPairsOf<kParts>; ++q) {
    const int64_t ao = pair_part<kParts, kSwapParts>(q, 0) * a_part_bytes;
    const int64_t bo = pair_part<kParts, kSwapParts>(q, 1) * b_part_bytes;
    const char* a0 = a + ao;
    const char* a1 = a0 + 16 * lda_bytes;
    const char* p0 = b0 + bo;
    const char* p1 = b1 + bo;
    for (int64_t k = 0; k < K; k += 32) {
      OP_TILE_LOADD(4, a0 + 2 * k, lda_bytes);
      if constexpr (kStreamB)  // (the tile number must be a literal: it is pasted into the asm)
        OP_TILE_STREAM_LOADD(6, p0 + 32 * k, 64);
      else
        OP_TILE_LOADD(6, p0 + 32 * k, 64);
      OP_TILE_DPBF16PS(0, 4, 6);
      if constexpr (NT > 1) {
        if constexpr (kStreamB)
          OP_TILE_STREAM_LOADD(7, p1 + 32 * k, 64);
        else
          OP_TILE_LOADD(7, p1 + 32 * k, 64);
        OP_TILE_DPBF16PS(1, 4, 7);
      }
      if constexpr (MT > 1) {
        OP_TILE_LOADD(5, a1 + 2 * k, lda_bytes);
        OP_TILE_DPBF16PS(2, 5, 6);
        if constexpr (NT > 1) OP_TILE_DPBF16PS(3, 5, 7);
      }
    }
  }
  OP_TILE_STORED(0, c, ldc_bytes);
  if constexpr (NT > 1) OP_TILE_STORED(1, c + 64, ldc_bytes);
  if constexpr (MT > 1) OP_TILE_STORED(2, c1, ldc_bytes);
  if constexpr (MT > 1 && NT > 1) OP_TILE_STORED(3, c1 + 64, ldc_bytes);
}

// C (=|+=) A * B in the layouts above, inside a TileScope. M, N multiples of 16, K of 32.
// Column blocks outer, row blocks inner: a block of B (the large operand of the attention GEMMs,
// streamed from L2) is loaded from memory once and reused from L1 for every row block, while A
// (a few query rows, or P) stays in L1 throughout.
// `between()` runs after each block of C is issued: vector work placed there (memory the GEMM
// does not touch) executes while the block's tile instructions do, since the core overlaps tile
// and vector instructions that are close in the instruction stream (docs/decisions.md).
// kParts 2 / 3: float16 / float operands in parts (a_part, b_part: elements between parts), see
// kSplitPairs (and kSwapParts).
// kStreamB (bf16 operands): B's tiles are loaded with the non-temporal hint, for a B that this
// call reads once and no later call finds in L1 (the forward's K / V panels: a block of 32 query
// rows, the panels 40-130 KB); its lines then do not evict the scores, P and O the softmax works
// on from L1. Not for a B reused across row blocks (M > 32) or across a task's calls, nor in
// parts (each part is loaded once per pair).
template <bool kAccumulate, int kParts, bool kSwapParts = false, bool kStreamB = false, class Between>
OP_AMX_TARGET inline void gemm_parts(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, int64_t a_part,
                                     const uint16_t* B, int64_t ldp, int64_t b_part, float* C, int64_t ldc,
                                     Between&& between) {
  compiler_barrier();
  const int64_t lda_b = lda * 2, ldc_b = ldc * 4, ap_b = a_part * 2, bp_b = b_part * 2;
  for (int64_t n0 = 0; n0 < N; n0 += 32) {
    const bool two_n = n0 + 32 <= N;
    const char* b0 = reinterpret_cast<const char*>(B + (n0 / 16) * ldp);
    const char* b1 = b0 + ldp * 2;
    for (int64_t m0 = 0; m0 < M; m0 += 32) {
      const bool two_m = m0 + 32 <= M;
      const char* a = reinterpret_cast<const char*>(A + m0 * lda);
      char* c = reinterpret_cast<char*>(C + m0 * ldc + n0);
      if (two_m && two_n)
        block<2, 2, kAccumulate, kParts, kSwapParts, kStreamB>(K, a, lda_b, ap_b, b0, b1, bp_b, c, ldc_b);
      else if (two_m)
        block<2, 1, kAccumulate, kParts, kSwapParts, kStreamB>(K, a, lda_b, ap_b, b0, b1, bp_b, c, ldc_b);
      else if (two_n)
        block<1, 2, kAccumulate, kParts, kSwapParts, kStreamB>(K, a, lda_b, ap_b, b0, b1, bp_b, c, ldc_b);
      else
        block<1, 1, kAccumulate, kParts, kSwapParts, kStreamB>(K, a, lda_b, ap_b, b0, b1, bp_b, c, ldc_b);
      between();
    }
  }
  compiler_barrier();
}

template <bool kAccumulate, class Between>
OP_AMX_TARGET inline void gemm(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, const uint16_t* B,
                               int64_t ldp, float* C, int64_t ldc, Between&& between) {
  gemm_parts<kAccumulate, 1>(M, N, K, A, lda, 0, B, ldp, 0, C, ldc, between);
}

// Number of C blocks gemm() issues (the calls of `between`).
inline int64_t gemm_blocks(int64_t M, int64_t N) { return ((M + 31) / 32) * ((N + 31) / 32); }

template <bool kAccumulate>
OP_AMX_TARGET inline void gemm(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, const uint16_t* B,
                               int64_t ldp, float* C, int64_t ldc) {
  gemm<kAccumulate>(M, N, K, A, lda, B, ldp, C, ldc, [] {});
}

// ---- packing into the tile layouts (AVX-512) ------------------------------------------------

// Transposes a 16 x 16 block of 32-bit words: dst row r, word c = src row c, word r. src rows
// past `rows` and words past `cols` read as zero (masked loads); all 16 dst rows are written.
inline void transpose16x16_u32(const uint32_t* src, int64_t lds, int rows, int cols, uint32_t* dst, int64_t ldd) {
  const __mmask16 m = static_cast<__mmask16>(cols >= 16 ? 0xffffu : (1u << cols) - 1u);
  __m512i r[16];
  for (int i = 0; i < 16; ++i) r[i] = i < rows ? _mm512_maskz_loadu_epi32(m, src + i * lds) : _mm512_setzero_si512();
  // Stage 1: 32-bit interleave of row pairs; stage 2: 64-bit of those; stages 3-4: 128-bit lanes.
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  // r[4g + q] now holds, in 128-bit lane L, words (4L + q) of rows 4g..4g+3.
  for (int i = 0; i < 4; ++i) {
    t[i + 0] = _mm512_shuffle_i32x4(r[i + 0], r[i + 4], 0x88);   // lanes 0,2 of g0 | lanes 0,2 of g1
    t[i + 4] = _mm512_shuffle_i32x4(r[i + 0], r[i + 4], 0xdd);   // lanes 1,3
    t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 4; ++i) {
    // words q of lane L for rows 0..15: combine the g0g1 and g2g3 halves
    const __m512i lo02 = _mm512_shuffle_i32x4(t[i + 0], t[i + 8], 0x88);  // L = 0 (rows 0-15)
    const __m512i lo13 = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88); // L = 1
    const __m512i hi02 = _mm512_shuffle_i32x4(t[i + 0], t[i + 8], 0xdd);  // L = 2
    const __m512i hi13 = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xdd); // L = 3
    _mm512_storeu_si512(dst + (0 + i) * ldd, lo02);
    _mm512_storeu_si512(dst + (4 + i) * ldd, lo13);
    _mm512_storeu_si512(dst + (8 + i) * ldd, hi02);
    _mm512_storeu_si512(dst + (12 + i) * ldd, hi13);
  }
}

// B panels of X^T for a row-major bf16 X (n rows of k values, row stride ld elements), i.e.
// B(k, n) = X[n][k]: panel p = rows 16p..16p+15 of X, pair row r = their 32-bit words r. Panels of
// 16 * kpad elements, kpad = round_up(k, 32); rows past n and values past k are zero.
inline void pack_b_transposed(const uint16_t* X, int64_t ld, int64_t n, int64_t k, uint16_t* dst, int64_t kpad) {
  const int64_t words = (k + 1) / 2, wpad = kpad / 2;
  for (int64_t p = 0; p * 16 < n; ++p) {
    const int rows = static_cast<int>(n - p * 16 < 16 ? n - p * 16 : 16);
    uint32_t* panel = reinterpret_cast<uint32_t*>(dst + p * 16 * kpad);
    for (int64_t w0 = 0; w0 < wpad; w0 += 16) {
      const int cols = static_cast<int>(words - w0 <= 0 ? 0 : words - w0 < 16 ? words - w0 : 16);
      const uint16_t* src = X + p * 16 * ld + 2 * w0;
      if ((ld & 1) == 0 && 2 * (w0 + cols) <= k) {
        // rows of whole 32-bit words: transpose them in place
        transpose16x16_u32(reinterpret_cast<const uint32_t*>(src), ld / 2, rows, cols, panel + w0 * 16, 16);
      } else {
        // an odd row stride (words straddle rows) or a last word with one value: gather first,
        // reading no value past k (a row may end its tensor)
        alignas(64) uint32_t tmp[16 * 16];
        for (int i = 0; i < rows; ++i)
          for (int c = 0; c < cols; ++c) {
            const uint16_t* e = src + i * ld + 2 * c;
            const uint32_t hi = 2 * (w0 + c) + 1 < k ? e[1] : 0u;
            tmp[i * 16 + c] = static_cast<uint32_t>(e[0]) | (hi << 16);
          }
        transpose16x16_u32(tmp, 16, rows, cols, panel + w0 * 16, 16);
      }
    }
  }
}

// Pair row of two rows a, b of 32 bf16 values (columns c0 .. c0 + 31, cn of them valid): columns
// 0-15 interleaved (a0 b0 a1 b1 ...) at d, columns 16-31 at d + ldp (the next panel) if cn > 16.
inline void store_pair_row(uint16_t* d, int64_t ldp, __m512i a, __m512i b, int64_t cn) {
  const __m512i idx_lo = _mm512_setr_epi32(0x00200000, 0x00210001, 0x00220002, 0x00230003, 0x00240004, 0x00250005,
                                           0x00260006, 0x00270007, 0x00280008, 0x00290009, 0x002a000a, 0x002b000b,
                                           0x002c000c, 0x002d000d, 0x002e000e, 0x002f000f);
  _mm512_storeu_si512(d, _mm512_permutex2var_epi16(a, idx_lo, b));
  if (cn > 16) {
    const __m512i idx_hi = _mm512_add_epi16(idx_lo, _mm512_set1_epi16(16));
    _mm512_storeu_si512(d + ldp, _mm512_permutex2var_epi16(a, idx_hi, b));
  }
}

// B panels of a row-major bf16 X (k rows of n values, row stride ld elements), i.e. B(k, n) =
// X[k][n]: pair row r of panel p interleaves rows 2r and 2r+1, columns 16p..16p+15. Panel stride
// ldp elements (>= 32 * pair rows); pair rows up to kpad / 2 are written, zero past k rows; columns
// past n are zero up to the next multiple of 16.
inline void pack_b_rows(const uint16_t* X, int64_t ld, int64_t k, int64_t n, uint16_t* dst, int64_t ldp, int64_t kpad) {
  for (int64_t r = 0; r < kpad / 2; ++r) {
    const int64_t k0 = 2 * r;
    for (int64_t c0 = 0; c0 < n; c0 += 32) {
      const int64_t cn = n - c0 < 32 ? n - c0 : 32;
      const __mmask32 m = static_cast<__mmask32>(cn >= 32 ? 0xffffffffu : (1u << cn) - 1u);
      const __m512i a = k0 < k ? _mm512_maskz_loadu_epi16(m, X + k0 * ld + c0) : _mm512_setzero_si512();
      const __m512i b = k0 + 1 < k ? _mm512_maskz_loadu_epi16(m, X + (k0 + 1) * ld + c0) : _mm512_setzero_si512();
      store_pair_row(dst + (c0 / 16) * ldp + 32 * r, ldp, a, b, cn);
    }
  }
}

// ---- float16 / float operands in two / three bf16 parts (kParts 2 / 3) -----------------------

// bf16 values (as from _mm512_cvtneps_pbh) widened to the floats they are.
inline __m512 bf16_to_float(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

// The input element type of kParts parts: float16 in two, float in three.
template <int kParts>
using PartsInput = std::conditional_t<kParts == 2, Half, float>;

// The kParts bf16 parts of 16 floats (see kSplitPairs): their sum is x exactly for a float16 x in
// two parts and for any float in three (vcvtneps2bf16 flushes parts below 2^-126 to zero, 1e-38).
template <int kParts>
struct Parts16 {
  __m256i part[kParts];
};
template <int kParts>
inline Parts16<kParts> split(__m512 x) {
  Parts16<kParts> r;
  for (int i = 0; i < kParts; ++i) {
    r.part[i] = (__m256i)_mm512_cvtneps_pbh(x);
    if (i + 1 < kParts) x = _mm512_sub_ps(x, bf16_to_float(r.part[i]));
  }
  return r;
}

inline __mmask16 first_lanes(int64_t n) {
  return static_cast<__mmask16>(n >= 16 ? 0xffffu : n <= 0 ? 0u : (1u << n) - 1u);
}
// 16 values from p as floats, zero past the first n.
inline __m512 load16(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(first_lanes(n), p); }
inline __m512 load16(const Half* p, int64_t n) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(first_lanes(n), p));
}

// A rows of X (rows x k, row stride ld; float or float16) in parts: part i of row r at
// dst + i * part + r * ldd, k zero-padded to kpad (a multiple of 16) columns.
template <int kParts, class T>
void pack_a_rows_split(const T* X, int64_t ld, int64_t rows, int64_t k, uint16_t* dst, int64_t ldd, int64_t kpad,
                       int64_t part) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < kpad; c += 16) {
      const Parts16<kParts> s = split<kParts>(load16(X + r * ld + c, k - c));
      for (int i = 0; i < kParts; ++i)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i * part + r * ldd + c), s.part[i]);
    }
}

// pack_b_transposed for a float or float16 X, in parts (part i at dst + i * part).
template <int kParts, class T>
void pack_b_transposed_split(const T* X, int64_t ld, int64_t n, int64_t k, uint16_t* dst, int64_t kpad, int64_t part) {
  for (int64_t p = 0; p * 16 < n; ++p) {
    const int rows = static_cast<int>(n - p * 16 < 16 ? n - p * 16 : 16);
    for (int64_t c0 = 0; c0 < kpad; c0 += 32) {
      // rows of 32 values (16 words) per part, then each part's block transposed into its panel
      alignas(64) uint16_t tmp[kParts][16 * 32];
      for (int r = 0; r < rows; ++r)
        for (int h = 0; h < 2; ++h) {
          const int64_t c = c0 + 16 * h;
          const Parts16<kParts> s = split<kParts>(load16(X + (p * 16 + r) * ld + c, k - c));
          for (int i = 0; i < kParts; ++i)
            _mm256_store_si256(reinterpret_cast<__m256i*>(tmp[i] + r * 32 + 16 * h), s.part[i]);
        }
      for (int i = 0; i < kParts; ++i)
        transpose16x16_u32(reinterpret_cast<const uint32_t*>(tmp[i]), 16, rows, 16,
                           reinterpret_cast<uint32_t*>(dst + i * part + p * 16 * kpad) + (c0 / 2) * 16, 16);
    }
  }
}

// pack_b_rows for a float or float16 X, in parts (part i at dst + i * part).
template <int kParts, class T>
void pack_b_rows_split(const T* X, int64_t ld, int64_t k, int64_t n, uint16_t* dst, int64_t ldp, int64_t kpad,
                       int64_t part) {
  auto row_parts = [&](int64_t row, int64_t c0, __m512i out[kParts]) {  // 32 values of a row, in parts
    Parts16<kParts> lo{}, hi{};
    if (row < k) {
      lo = split<kParts>(load16(X + row * ld + c0, n - c0));
      hi = split<kParts>(load16(X + row * ld + c0 + 16, n - c0 - 16));
    }
    for (int i = 0; i < kParts; ++i)
      out[i] = row < k ? _mm512_inserti64x4(_mm512_castsi256_si512(lo.part[i]), hi.part[i], 1) : _mm512_setzero_si512();
  };
  for (int64_t r = 0; r < kpad / 2; ++r) {
    for (int64_t c0 = 0; c0 < n; c0 += 32) {
      __m512i a[kParts], b[kParts];
      row_parts(2 * r, c0, a);
      row_parts(2 * r + 1, c0, b);
      for (int i = 0; i < kParts; ++i) store_pair_row(dst + i * part + (c0 / 16) * ldp + 32 * r, ldp, a[i], b[i], n - c0);
    }
  }
}

}  // namespace amx
}  // namespace OP_ISA_NS
}  // namespace op_plugin
#endif  // OP_AVX512_BF16
