// Fused Floyd attention: the plan shared by the two-stage API (floyd_attention.cpp) and the
// per-ISA compute (floyd_attention_{baseline,avx2,avx512}.cpp). Torch-free, no ISA code here.
//
// Index names follow SPEC §3: n = "i" (rows of K1/V1), m = "k" (columns of K2/V2), k = "j" (the
// softmax / contraction axis), d = head dim.
//   Q, dY, O : [B,H,N,M,D]    K1, V1 : [B,H,N,K,D]    K2, V2 : [B,H,K,M,D]
//   mask     : [B,1,N,1,K] (1 = masked)    max, sum : [B,H,N,M,8] (value replicated 8x)
//   S[n,m,k] = scale * (Q[n,m]·K1[n,k] + Q[n,m]·K2[k,m]), masked -> -FLT_MAX (after scaling)
//   O[n,m]   = sum_k softmax_k(S)[n,m,k] * (V1[n,k] + V2[k,m])
#pragma once
#include <cstdint>

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
  int threads;
  uint64_t scratch_bytes;
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
