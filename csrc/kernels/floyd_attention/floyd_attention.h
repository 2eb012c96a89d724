// Fused Floyd attention: the plan shared by the two-stage API (floyd_attention.cpp) and the
// per-ISA builds of its one algorithm (floyd_attention_kernel.inc, compiled by
// floyd_attention_kernels{,.avx2,.avx512}.cpp). Torch-free, no ISA code here.
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
  int64_t chunk_blocks;      // n blocks whose P and dS are kept at once (fast::bwd_chunk_blocks)
  int threads;
  uint64_t scratch_bytes;
  uint64_t shared_bytes;
};

// ---- The algorithm (floyd_attention_kernel.inc, one for every ISA build and dtype; bf16 at level
// avx512_amx runs the AMX dataflow of floyd_attention_amx.h, namespace tiles below) ---------------
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
// thread count. The ISA builds differ only in their GEMM micro-kernels (gemm_ukernel.h's Ops),
// their 16-lane vector helpers and, on AVX512_BF16, the bf16 pair layouts.
// Sizes below are in bytes, every buffer rounded up to 64. Operand elements (the shared packs,
// the backward's P and dS buffers) take `eb` bytes (operand_bytes), accumulator elements `ab`
// (accumulator_bytes: float, or double for float64 inputs).
namespace fast {
constexpr int64_t TN = 16;       // n rows of a tile
constexpr int64_t TM = 16;       // m rows of a tile
// Keys per block (the row length of the logit tiles): all K keys up to kMaxKeyBlock, else K split
// into equal blocks (multiples of 16), so that most calls run one block and need no online
// rescale of the output. Every key block costs a pass of kScaleAccumulate over the output
// accumulators and one more GEMM call per row of the tile. Measured on Zen 5 (one thread, B1 H4
// D64): against blocks of 64 keys, 256-key blocks made N=M=K=256 bf16 1.24x (forward) / 1.09x
// (backward) faster and float32 1.24x / 1.12x; at N=M=K=512, 512-key blocks 1.35x / 1.16x (bf16).
constexpr int64_t kMaxKeyBlock = 512;
constexpr int64_t kMaskBytes = 4;  // one lane mask of the key masks (any build's 16-lane mask fits)
// The per-m loops (packing K2/V2, writing dK2/dV2 back) go parallel only in chunks of at least
// this many elements: a parallel region costs microseconds, more than packing a decode-size slice.
constexpr int64_t kMinChunkElems = 16384;
inline int64_t m_grain(int64_t K, int64_t D) {
  const int64_t per_m = K * D > 0 ? K * D : 1;
  return kMinChunkElems / per_m > 1 ? kMinChunkElems / per_m : 1;
}
template <class X, class Y> struct IsSame { static constexpr bool value = false; };
template <class X> struct IsSame<X, X> { static constexpr bool value = true; };
inline int64_t ru(int64_t a, int64_t b) { return (a + b - 1) / b * b; }
inline int64_t bytes(int64_t count, int64_t size) { return ru(count * size, 64); }  // one buffer
// Bump allocator over a 64-byte aligned region: `count` elements of X, rounded up to 64 bytes
// (bytes(), as the sizes here count them). Both Floyd algorithms carve their slots with it.
struct Carve {
  char* p;
  template <class X>
  X* take(int64_t count) {
    X* r = reinterpret_cast<X*>(p);
    p += bytes(count, static_cast<int64_t>(sizeof(X)));
    return r;
  }
};
inline int64_t key_block(int64_t K) {
  if (K <= 0) return 16;
  const int64_t blocks = ceil_div(K, kMaxKeyBlock);
  return ru(ceil_div(K, blocks), 16);
}
// Row strides padded by 64 bytes off a power of two, so that rows a GEMM walks down do not all
// map to the same L1 sets: tile rows (tile_ld elements), packed "B along d" rows, score buffer rows.
inline int64_t tile_ld(int64_t K) { return key_block(K) + 16; }
inline int64_t bd_elems(int64_t K, int64_t D) { return ru(D, 2) * (ru(K, 2) + 16); }  // one slice
inline int64_t acc_ld(int64_t K) { return ru(K, 16) + 16; }
// Bytes of a GEMM operand element in the build that runs at ISA level `isa`: bf16 pairs
// (vdpbf16ps) where the level has them, double for float64, else float. Stage 1 sizes the
// workspace and stage 2 picks the kernel with it (both at active_isa()).
inline int64_t operand_bytes(opDataType dt, Isa isa = active_isa()) {
  if (dt == OP_DT_DOUBLE) return 8;
  return dt == OP_DT_BF16 && isa >= Isa::kAvx512Bf16 ? 2 : 4;
}
inline int64_t accumulator_bytes(opDataType dt) { return dt == OP_DT_DOUBLE ? 8 : 4; }
// One (b, h): K2 and V2 packed ("B along d" for the logits, "B along k" for the output).
inline int64_t fwd_shared(int64_t M, int64_t K, int64_t D, int64_t eb) { return 2 * bytes(M * bd_elems(K, D), eb); }
// The tile's P / dS as operands take buffers of their own only when operands are not accumulators.
inline int64_t fwd_slot(int64_t K, int64_t D, int64_t eb, int64_t ab) {
  const int64_t tile = TN * TM;
  const int64_t lt = tile_ld(K);
  return 2 * bytes(TN * bd_elems(K, D), eb) + 2 * bytes(tile * ru(D, 2), eb) + bytes(tile * lt, ab) +
         (eb != ab ? bytes(tile * lt, eb) : 0) + bytes(tile * ru(D, 16), ab) + 3 * bytes(tile, ab) +
         bytes(TN * 2 * key_block(K) / 16, kMaskBytes);
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
// than one chunk, dK2/dV2 accumulators [m][k][Dp].
inline int64_t bwd_shared(int64_t N, int64_t M, int64_t K, int64_t D, int64_t NC, int64_t eb, int64_t ab) {
  const int64_t chunked = NC < ceil_div(N, TN) ? 1 : 0;
  return 3 * bytes(M * bd_elems(K, D), eb) + 2 * bytes(M * NC * TN * acc_ld(K), eb) +
         2 * chunked * bytes(M * K * ru(D, 16), ab);
}
// The larger of the n-block pass (packs and tiles, P and dS of the block, B operand rows of one
// n, dK1/dV1 of one n) and the dK2/dV2 pass (B operand rows of one m over a chunk, dK2/dV2 of one m).
inline int64_t bwd_slot(int64_t M, int64_t K, int64_t D, int64_t NC, int64_t eb, int64_t ab) {
  const int64_t tile = TN * TM, Mr = ru(M, 2), NCr = NC * TN, Dp = ru(D, 16), lt = tile_ld(K);
  const int64_t n_pass = 3 * bytes(TN * bd_elems(K, D), eb) + 4 * bytes(tile * ru(D, 2), eb) +
                         2 * bytes(tile * lt, ab) + (eb != ab ? 2 * bytes(tile * lt, eb) : 0) +
                         bytes(tile * Dp, ab) + 3 * bytes(tile, ab) + bytes(TN * 2 * key_block(K) / 16, kMaskBytes) +
                         2 * bytes(TN * Mr * acc_ld(K), eb) + 2 * bytes(Mr * D, eb) + 2 * bytes(K * Dp, ab);
  const int64_t m_pass = 2 * bytes(NCr * D, eb) + 2 * bytes(K * Dp, ab);
  return n_pass > m_pass ? n_pass : m_pass;
}
}  // namespace fast

// ---- The AMX-BF16 dataflow (floyd_attention_amx.h: bf16 at ISA level avx512_amx) -----------------
// Blocks of TN rows n x TM rows m (16-row tiles on both axes), key blocks of up to kKeyBlock keys;
// operands in the layouts of amx_tile.h, padded: keys to 32 (Kp), the head dim to 32 (Dp) as a
// contraction and to 16 (Dv) as columns.
namespace tiles {
// 32 rows m per n: the per-n products (term 1) then run 2 x 2 tile blocks, each K1 / V1 tile
// serving two A tiles. Measured, one thread, B1 H4 N=M=K=256 D64 (forward / backward, binaries
// alternated three times, the final dataflow): 16 x 16 rows with 256-key blocks 119 / 327 ms,
// 16 x 32 117 / 313, 16 x 64 120 / 322, 32 x 32 112 / 344 (the backward's P / dS buffers of the
// block, TN * Kp * Mp each, double to 4 MB); earlier 32 x 32 x 128 keys and 32 x 16 measured
// no faster than 16 x 16.
constexpr int64_t TN = 16;
constexpr int64_t TM = 32;
constexpr int64_t kKeyBlock = 256;
inline int64_t pad16(int64_t x) { return (x + 15) / 16 * 16; }
inline int64_t pad32(int64_t x) { return (x + 31) / 32 * 32; }
constexpr int64_t kMaxDv = 512;  // head dims up to this (the NPU's are 32-128)
inline bool applies(opDataType dt, Isa isa, int64_t K, int64_t D) {
  return dt == OP_DT_BF16 && isa == Isa::kAvx512Amx && K > 0 && D > 0 && D <= kMaxDv;
}
struct Dims {
  int64_t Kp, Dp, Dv, kb;  // padded keys, head dim as contraction / as columns, keys per block
  int64_t kt, vp, vld;     // one slice's K^T panels, its V panels, and the stride of a V panel
  int64_t ldq, lds, ldp, ldo;  // row strides (elements) of the Q copy, S, P and O of a block
  Dims(int64_t K, int64_t D)
      : Kp(pad32(K)), Dp(pad32(D)), Dv(pad16(D)), kb(Kp < kKeyBlock ? Kp : kKeyBlock), kt(Kp * Dp), vp(Dv * Kp),
        vld(16 * Kp), ldq(TM * Dp + 32), lds(kb + 16), ldp(kb + 32), ldo(Dv + 16) {}
};
// K2, V2 packed for every m of one (b, h).
inline int64_t fwd_shared(int64_t M, const Dims& z) { return fast::bytes(M * z.kt, 2) + fast::bytes(M * z.vp, 2); }
// K1, V1 packs of the n block, the Q copy, S, P, O, the row statistics, the key masks.
inline int64_t fwd_slot(const Dims& z) {
  const int64_t rows = TN * TM;
  return fast::bytes(TN * z.kt, 2) + fast::bytes(TN * z.vp, 2) + fast::bytes(TN * z.ldq, 2) +
         fast::bytes(rows * z.lds, 4) + fast::bytes(rows * z.ldp, 2) + fast::bytes(rows * z.ldo, 4) +
         2 * fast::bytes(rows, 4) + fast::bytes(TN * z.kb / 16, 2);
}
// The backward keeps P and dS of every (n, m) row of a (b, h) for the dK2 / dV2 pass, as VNNI pairs
// of n ([m][key panel][n pair]): when they would take more than fast::kScoreChunkBytes the
// backward runs floyd_attention_kernel.inc, which splits n into chunks.
inline bool bwd_applies(opDataType dt, Isa isa, int64_t N, int64_t M, int64_t K, int64_t D) {
  return applies(dt, isa, K, D) && N > 0 && M > 0 && 4 * M * pad32(K) * pad32(N) <= fast::kScoreChunkBytes;
}
// K2^T, V2^T, K2 (pairs of keys) packed for every m; P and dS of every row as pairs of n.
inline int64_t bwd_shared(int64_t N, int64_t M, const Dims& z) {
  return 2 * fast::bytes(M * z.kt, 2) + fast::bytes(M * z.vp, 2) + 2 * fast::bytes(M * z.Kp * pad32(N), 2);
}
// The larger of the n pass (the three packs of the block's n, the Q / dY copies, S, dP, dS rows,
// dQ, the row statistics, the key masks, P and dS of the block as pairs of m, Q^T / dY^T of one n
// and their staging, dK1 / dV1 of one n) and the m pass (Q^T / dY^T over n, their staging, dK2 /
// dV2 of one m).
inline int64_t bwd_slot(int64_t N, int64_t M, const Dims& z) {
  const int64_t rows = TN * TM, Mp = pad32(M), Np = pad32(N), ldc = z.Kp + 16;
  const int64_t n_pass = 2 * fast::bytes(TN * z.kt, 2) + fast::bytes(TN * z.vp, 2) + 2 * fast::bytes(TN * z.ldq, 2) +
                         2 * fast::bytes(rows * z.lds, 4) + fast::bytes(rows * z.ldp, 2) +
                         fast::bytes(rows * z.ldo, 4) + 3 * fast::bytes(rows, 4) + fast::bytes(TN * z.kb / 16, 2) +
                         2 * fast::bytes(TN * z.Kp * Mp, 2) + 3 * fast::bytes(z.Dv * Mp, 2) +
                         2 * fast::bytes(z.Dv * ldc, 4);
  const int64_t m_pass = 3 * fast::bytes(z.Dv * Np, 2) + 2 * fast::bytes(z.Dv * ldc, 4);
  return n_pass > m_pass ? n_pass : m_pass;
}
}  // namespace tiles

// Bytes of the shared region and of one per-thread slot (multiples of 64), for any ISA build.
struct WorkspaceSizes { uint64_t shared, slot; };
// isa: the level of the build that will run (tests run each build at any level).
inline WorkspaceSizes fwd_workspace(opDataType dt, int64_t N, int64_t M, int64_t K, int64_t D,
                                    Isa isa = active_isa()) {
  (void)N;
  if (tiles::applies(dt, isa, K, D)) {
    const tiles::Dims z(K, D);
    return {static_cast<uint64_t>(tiles::fwd_shared(M, z)), static_cast<uint64_t>(tiles::fwd_slot(z))};
  }
  const int64_t eb = fast::operand_bytes(dt, isa), ab = fast::accumulator_bytes(dt);
  return {static_cast<uint64_t>(fast::fwd_shared(M, K, D, eb)), static_cast<uint64_t>(fast::fwd_slot(K, D, eb, ab))};
}
// chunk_blocks: the plan's (fast::bwd_chunk_blocks unless a test asks for smaller chunks).
inline WorkspaceSizes bwd_workspace(opDataType dt, int64_t N, int64_t M, int64_t K, int64_t D,
                                    int64_t chunk_blocks, Isa isa = active_isa()) {
  if (tiles::bwd_applies(dt, isa, N, M, K, D)) {
    const tiles::Dims z(K, D);
    return {static_cast<uint64_t>(tiles::bwd_shared(N, M, z)), static_cast<uint64_t>(tiles::bwd_slot(N, M, z))};
  }
  const int64_t eb = fast::operand_bytes(dt, isa), ab = fast::accumulator_bytes(dt);
  return {static_cast<uint64_t>(fast::bwd_shared(N, M, K, D, chunk_blocks, eb, ab)),
          static_cast<uint64_t>(fast::bwd_slot(M, K, D, chunk_blocks, eb, ab))};
}

// ---- Per-ISA entry points (floyd_attention_kernels{,.avx2,.avx512}.cpp) -------------------------
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
