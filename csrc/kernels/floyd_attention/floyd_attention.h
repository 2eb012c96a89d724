// Fused Floyd attention: the plan shared by the two-stage API (floyd_attention.cpp) and the
// per-ISA compute (floyd_attention_{baseline,avx2,avx512}.cpp). Torch-free, no ISA code here.
//
// Index names follow SPEC §3: n = "i" (rows of K1/V1), m = "k" (columns of K2/V2), k = "j" (the
// softmax / contraction axis), d = head dim.
//   Q, dY, O : [B,H,N,M,D]    K1, V1 : [B,H,N,K,D]    K2, V2 : [B,H,K,M,D]
//   mask     : [B,1,N,1,K] (1 = masked)    max, sum : [B,H,N,M,8] (value replicated 8x)
//   S[n,m,k] = scale * (Q[n,m]·K1[n,k] + Q[n,m]·K2[k,m]), masked -> masked_logit(scale)
//   O[n,m]   = sum_k softmax_k(S)[n,m,k] * (V1[n,k] + V2[k,m])
#pragma once
#include <cstdint>

#include "op_plugin/isa.h"
#include "op_plugin/tensor.h"

namespace op_plugin {
namespace floyd {

// ---- Tiles -----------------------------------------------------------------------------------
// A tile is kBN x kBM query rows (n, m) against kBK keys; logits live k-major ([n][k][m]) so the
// S/dP GEMMs read K1/V1 rows in place (A operand) against a Q^T / dY^T tile packed once per tile,
// and K2/V2 rows through one contiguous copy of the kBK x D column slice (see the driver).
//  * kBK = 64: one K/V slice (64 keys x D=64 floats) is 16 KiB and stays in L1 while the tile's
//    rows stream against it; the online softmax rescales the accumulator once per 64 keys.
//  * kBN = kBM = 16: every K1/V1 slice (one n) is reused by kBM rows and every K2/V2 slice (one m)
//    by kBN rows; the S/dP GEMMs are 64 x 16 (12x1-vector AVX-512 micro-tiles) and every
//    per-tile buffer (16*16*64 floats = 64 KiB) fits L2 together with the others. The backward
//    contracts over kBM (dK1/dV1) and kBN (dK2/dV2). 32 for either was measured no faster
//    (N=M=K=256, D=64, one thread).
constexpr int64_t kBN = 16;
constexpr int64_t kBM = 16;
constexpr int64_t kBK = 64;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The logit of a masked key. op-plugin's golden adds -4e9 to the raw score before scaling; in
// float32, raw - 4e9 rounds to -4e9 for |raw| < 128, so a masked logit is -4e9 * scale: a fully
// masked row keeps uniform weights and gets the golden's finite softmax_max (about -2e9 at scale
// 0.5), and a backward fed the golden's statistics recomputes the golden's P. Clamped to the
// float range, so a huge scale cannot make it infinite.
template <class A>
inline A masked_logit(A scale) {
  const A flt_max = static_cast<A>(3.40282346638528859811704183484516925e+38);
  const A v = static_cast<A>(-4e9) * scale;
  return v < -flt_max ? -flt_max : (v > flt_max ? flt_max : v);
}

// Everything stage 2 needs, frozen by stage 1. Pointers into caller-owned, contiguous tensors.
struct FwdPlan {
  opDataType dtype;          // storage dtype of Q/K/V/O (stats are float32, float64 for double)
  int64_t B, H, N, M, K, D;  // sizes (SPEC §3)
  double scale;              // scale_value
  const void* q;             // [B,H,N,M,D]
  const void* k1;            // [B,H,N,K,D]
  const void* v1;            // [B,H,N,K,D]
  const void* k2;            // [B,H,K,M,D]
  const void* v2;            // [B,H,K,M,D]
  const uint8_t* mask;       // [B,1,N,1,K] bool/uint8, nullptr = no mask
  void* softmax_max;         // [B,H,N,M,8]
  void* softmax_sum;         // [B,H,N,M,8]
  void* out;                 // [B,H,N,M,D]
  int threads;               // per-thread scratch slots reserved in the workspace
  uint64_t scratch_bytes;    // bytes of one slot (multiple of 64)
  uint64_t shared_bytes;     // bytes shared by all threads, before the slots (multiple of 64)
};

struct BwdPlan {
  opDataType dtype;
  int64_t B, H, N, M, K, D;
  double scale;
  const void* dy;            // [B,H,N,M,D] grad_output
  const void* q;
  const void* k1;
  const void* v1;
  const void* k2;
  const void* v2;
  const void* o;             // [B,H,N,M,D] attention_out (forward result)
  const void* softmax_max;   // [B,H,N,M,8], element 0 of the last axis is read
  const void* softmax_sum;
  const uint8_t* mask;
  void* dq;                  // [B,H,N,M,D]
  void* dk1;                 // [B,H,N,K,D]
  void* dv1;
  void* dk2;                 // [B,H,K,M,D]
  void* dv2;
  int64_t chunk_blocks;      // AVX-512 path: n blocks whose P and dS are kept at once (fast::bwd_chunk_blocks)
  int threads;
  uint64_t scratch_bytes;
  uint64_t shared_bytes;
};

// ---- Workspace ---------------------------------------------------------------------------------
// Per-thread scratch, in accumulator elements (float, or double for float64 inputs). The drivers
// (floyd_attention_driver.inc) carve their buffers in exactly this order; both stages call these.
struct FwdScratch {
  // Q^T twice ([n][d][m], [m][d][n]), logits [n][k][m] + the S2 staging block, one converted K/V
  // slice [k][d], the output accumulator [n][m][d], four [n][m] rows (max, sum, new max, spare).
  static int64_t total(int64_t D) {
    return 3 * kBN * kBM * D + 2 * kBN * kBM * kBK + kBK * D + 4 * kBN * kBM;
  }
};

struct BwdScratch {
  // Q^T x2, dY^T x2, Q and dY natural (6 tiles), P, S2 staging and dS tiles, Dr/max/1-over-sum
  // rows, one converted K/V slice, dK/dV accumulators of one n block (kBN x K x D) or one m block
  // (K x kBM x D), and the dQ tile accumulator.
  static int64_t acc(int64_t K, int64_t D) { return (kBN > kBM ? kBN : kBM) * K * D; }
  static int64_t total(int64_t K, int64_t D) {
    return 7 * kBN * kBM * D + 3 * kBN * kBM * kBK + 3 * kBN * kBM + kBK * D + 2 * acc(K, D);
  }
};

// ---- AVX-512 path (floyd_attention_avx512.inc) ---------------------------------------------
// Logits live row-major ([n][m][k], k contiguous): both score GEMMs accumulate into the same rows
// with Q / dY rows as the broadcast operand, against K/V slices packed once ("B along d":
// [d/KP][k][KP]; "B along k": [k/KP][d][KP]; KP = 2 for bf16 pairs, 1 otherwise). K1/V1 slices of
// an n block are packed per work unit, K2/V2 slices of a (b, h) once per (b, h) into the shared
// region. The backward computes P and dS once per tile (S, dP and dQ: 6 GEMM-sized terms) and
// keeps them, in the pair layout of an A operand, for the other 4: dK1/dV1 contract all M rows of
// an n block at its end, dK2/dV2 all n rows of a chunk of n blocks (as many as fit
// kScoreChunkBytes) after the chunk. Each is one deep GEMM with its accumulators in registers:
// a contraction tile by tile (16 rows deep) moved its float accumulators through memory once per
// 16 rows, and that, not arithmetic, bounded those terms (docs/benchmarks.md, 2026-12-03).
// Every output element sums in an order fixed by the sizes: the result does not depend on the
// thread count.
// Sizes below are in 4-byte elements; every buffer is rounded to 16 elements (64 bytes). The
// shared packs and the backward's P and dS buffers hold GEMM operand elements of `eb` bytes
// (operand_bytes); the per-thread slots count every element as 4 bytes.
namespace fast {
constexpr int64_t TN = 16;       // n rows of a tile
constexpr int64_t TM = 16;       // m rows of a tile
constexpr int64_t KB = 64;       // keys per block (row length of the logit tiles)
// Row strides padded by 64 bytes off a power of two, so that rows a GEMM walks down do not all
// map to the same L1 sets: tile rows (LT floats), packed "B along d" rows, score buffer rows.
constexpr int64_t LT = KB + 16;
// The per-m loops (packing K2/V2, writing dK2/dV2 back) go parallel only in chunks of at least
// this many elements: a parallel region costs microseconds, more than packing a decode-size slice.
constexpr int64_t kMinChunkElems = 16384;
inline int64_t m_grain(int64_t K, int64_t D) {
  const int64_t per_m = K * D > 0 ? K * D : 1;
  return kMinChunkElems / per_m > 1 ? kMinChunkElems / per_m : 1;
}
inline int64_t ru(int64_t a, int64_t b) { return (a + b - 1) / b * b; }
inline int64_t bd_elems(int64_t K, int64_t D) { return ru(D, 2) * (ru(K, 2) + 16); }  // one slice
inline int64_t acc_ld(int64_t K) { return ru(K, 16) + 16; }
inline int64_t buf(int64_t elems) { return ru(elems, 16); }
// Bytes of a GEMM operand element: bf16 pairs (vdpbf16ps) where the ISA level has them, else float.
// Stage 1 sizes the workspace and stage 2 picks the kernel with it.
inline int64_t operand_bytes(opDataType dt) {
  return dt == OP_DT_BF16 && active_isa() >= Isa::kAvx512Bf16 ? 2 : 4;
}
inline int64_t elems4(int64_t count, int64_t eb) { return (count * eb + 3) / 4; }  // in 4-byte elements
// One (b, h): K2 and V2 packed ("B along d" for the logits, "B along k" for the output).
inline int64_t fwd_shared(int64_t M, int64_t K, int64_t D, int64_t eb) {
  return 2 * buf(elems4(M * bd_elems(K, D), eb));
}
inline int64_t fwd_slot(int64_t K, int64_t D) {
  const int64_t tile = TN * TM;
  return 2 * buf(TN * bd_elems(K, D)) + 2 * buf(tile * ru(D, 2)) + 2 * buf(tile * LT) +
         buf(tile * ru(D, 16)) + 3 * buf(tile) + buf(TN * KB);
}
// The backward's chunk of n blocks: its P and dS, [m][n][acc_ld(K)] each, fit kScoreChunkBytes,
// at least one block. 256 MiB holds N = M = K = 256 in one chunk (even in float32); the
// composite einsum materialises four such float tensors per head.
constexpr int64_t kScoreChunkBytes = int64_t(256) << 20;
inline int64_t bwd_chunk_blocks(int64_t N, int64_t M, int64_t K, int64_t eb) {
  const int64_t nNB = ceil_div(N, TN), per_block = 2 * M * TN * acc_ld(K) * eb;
  const int64_t fit = per_block > 0 ? kScoreChunkBytes / per_block : nNB;
  return fit < 1 ? 1 : (fit < nNB ? fit : (nNB > 0 ? nNB : 1));
}
// K2 ("B along d"), V2 ("B along d"), K2 ("B along k"); P and dS of a chunk; when N takes more
// than one chunk, dK2/dV2 float accumulators [m][k][Dp].
inline int64_t bwd_shared(int64_t N, int64_t M, int64_t K, int64_t D, int64_t NC, int64_t eb) {
  const int64_t chunked = NC < ceil_div(N, TN) ? 1 : 0;
  return 3 * buf(elems4(M * bd_elems(K, D), eb)) + 2 * buf(elems4(M * NC * TN * acc_ld(K), eb)) +
         2 * chunked * buf(M * K * ru(D, 16));
}
// The larger of the n-block pass (packs and tiles, P and dS of the block, B operand rows of one
// n, dK1/dV1 of one n) and the dK2/dV2 pass (B operand rows of one m over a chunk, dK2/dV2 of one m).
inline int64_t bwd_slot(int64_t M, int64_t K, int64_t D, int64_t NC, int64_t eb) {
  const int64_t tile = TN * TM, Mr = ru(M, 2), NCr = NC * TN, Dp = ru(D, 16);
  const int64_t n_pass = 3 * buf(TN * bd_elems(K, D)) + 4 * buf(tile * ru(D, 2)) + 4 * buf(tile * LT) +
                         buf(tile * Dp) + 3 * buf(tile) + buf(TN * KB) + 2 * buf(elems4(TN * Mr * acc_ld(K), eb)) +
                         2 * buf(Mr * D) + 2 * buf(K * Dp);
  const int64_t m_pass = 2 * buf(NCr * D) + 2 * buf(K * Dp);
  return n_pass > m_pass ? n_pass : m_pass;
}
}  // namespace fast

// Bytes of the shared region and of one per-thread slot, for any ISA build.
struct WorkspaceSizes { uint64_t shared, slot; };
inline uint64_t round64(uint64_t b) { return (b + 63) / 64 * 64; }
inline WorkspaceSizes fwd_workspace(opDataType dt, int64_t N, int64_t M, int64_t K, int64_t D) {
  (void)N;
  if (dt == OP_DT_DOUBLE) return {0, round64(static_cast<uint64_t>(FwdScratch::total(D)) * 8)};
  const int64_t slot = FwdScratch::total(D) > fast::fwd_slot(K, D) ? FwdScratch::total(D) : fast::fwd_slot(K, D);
  return {round64(static_cast<uint64_t>(fast::fwd_shared(M, K, D, fast::operand_bytes(dt))) * 4),
          round64(static_cast<uint64_t>(slot) * 4)};
}
// chunk_blocks: the plan's (fast::bwd_chunk_blocks unless a test asks for smaller chunks).
inline WorkspaceSizes bwd_workspace(opDataType dt, int64_t N, int64_t M, int64_t K, int64_t D,
                                    int64_t chunk_blocks) {
  if (dt == OP_DT_DOUBLE) return {0, round64(static_cast<uint64_t>(BwdScratch::total(K, D)) * 8)};
  const int64_t eb = fast::operand_bytes(dt);
  const int64_t fast_slot = fast::bwd_slot(M, K, D, chunk_blocks, eb);
  const int64_t slot = BwdScratch::total(K, D) > fast_slot ? BwdScratch::total(K, D) : fast_slot;
  return {round64(static_cast<uint64_t>(fast::bwd_shared(N, M, K, D, chunk_blocks, eb)) * 4),
          round64(static_cast<uint64_t>(slot) * 4)};
}

// ---- Per-ISA entry points (floyd_attention_<isa>.cpp) ------------------------------------------
// Each runs the whole op with op_plugin::parallel_for; results do not depend on the thread count.
namespace baseline {
void forward(const FwdPlan& plan, void* workspace);
void backward(const BwdPlan& plan, void* workspace);
}  // namespace baseline
namespace avx2 {
void forward(const FwdPlan& plan, void* workspace);
void backward(const BwdPlan& plan, void* workspace);
}  // namespace avx2
namespace avx512 {
void forward(const FwdPlan& plan, void* workspace);
void backward(const BwdPlan& plan, void* workspace);
}  // namespace avx512

}  // namespace floyd
}  // namespace op_plugin
