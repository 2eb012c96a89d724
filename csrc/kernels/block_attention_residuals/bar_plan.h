// Block Attention Residuals (SPEC section 4): the parameters both stages share, the plan that
// stage 1 freezes, and the tile constants with the reasons for their values.
//
// Layout of one token row t (all tensors contiguous, strides in elements):
//   v[t, i, :] = block_res[t, i, :] = block_res + (t * N + i) * H     for i < N
//   v[t, N, :] = partial_block[t, :] = partial_block + t * H           (the partial row is LAST)
//   inv_norm[t, :], probs[t, :]      = inv_norm/probs + t * (N + 1)    (acc_t: float, or double)
//
// Work split: rows t are grouped into fixed chunks of `rows_per_chunk` rows. The chunking depends
// only on the shape (never on the thread count), so the backward's per-chunk partial sums of
// gsw[h] = sum_{t,i} gs[t,i] * inv[t,i] * v[t,i,h], added up in chunk order, are bitwise identical
// for any number of threads.
#pragma once
#include <cstdint>

#include "op_plugin/isa.h"
#include "op_plugin/status.h"
#include "op_plugin/tensor.h"

namespace op_plugin {
namespace bar {

// At most this many chunks over T. 128 chunks keep 2..32 threads balanced to within a few percent
// (each thread gets >= 4 chunks) while the backward's per-chunk gsw partials stay small
// (128 * H * 4 bytes = 2 MiB at H = 4096) and their final chunk-order sum costs nothing.
constexpr int64_t kMaxChunks = 128;
// A chunk holds at least this many elements of v ((N + 1) * H per row), so a chunk costs far more
// than the parallel_for dispatch and the zeroing of its gsw partial (H elements).
constexpr int64_t kMinChunkElements = int64_t(1) << 16;
// The forward's hidden states, when larger than this, are written with non-temporal (streaming)
// stores: beyond the size of the L3 (32 MiB on the reference machine) the consumer cannot find
// them in cache anyway. Smaller outputs stay cached for the consumer. The backward writes plain
// stores whatever the size (bar_rows_simd.h, `step`).
constexpr uint64_t kStreamingStoreMinBytes = uint64_t(64) << 20;
// Elements of H per task of the backward's final gsw reduction (and weight-grad write).
constexpr int64_t kReduceGrain = 1024;

// Sizes of one call, read from the tensors by stage 1.
struct Shape {
  int64_t T = 0;  // tokens: partial_block.shape[0]
  int64_t N = 0;  // finished blocks: block_res.shape[1]; rows per token are N + 1
  int64_t H = 0;  // hidden size: partial_block.shape[1]
};

// The frozen work split; made by make_plan from the shape alone (plus the ISA level).
struct Plan {
  int64_t rows_per_chunk = 1;  // rows t per chunk (>= 1)
  int64_t num_chunks = 0;      // ceil(T / rows_per_chunk); 0 when T == 0
  bool stream_stores = false;  // write the forward's hidden states with non-temporal stores
  Isa isa = Isa::kBaseline;    // row kernels to use (see bar_rows.h)
};

// The one tiling heuristic of the family (tested in tests/kernels/test_block_attention_residuals.cpp).
// `output_bytes` is the size of the output that may be streamed (0 for the backward).
Plan make_plan(const Shape& shape, uint64_t output_bytes, Isa isa);

// Forward parameters: raw pointers into the caller's tensors plus derived scalars.
struct FwdParams {
  Shape shape;
  opDataType dtype = OP_DT_FLOAT;  // dtype of partial_block/block_res/weights/hidden_states
  const void* partial_block = nullptr;  // [T, H]
  const void* block_res = nullptr;      // [T, N, H]
  const void* proj_weight = nullptr;    // [H] (or [1, H])
  const void* norm_weight = nullptr;    // [H]
  void* hidden_states = nullptr;        // [T, H], out
  void* inv_norm = nullptr;             // [T, N + 1] acc_t, out
  void* probs = nullptr;                // [T, N + 1] acc_t, out
  double norm_eps = 1e-6;               // > 0, inside the sqrt
};

// Backward parameters.
struct BwdParams {
  Shape shape;
  opDataType dtype = OP_DT_FLOAT;
  const void* partial_block = nullptr;       // [T, H]
  const void* block_res = nullptr;           // [T, N, H]
  const void* proj_weight = nullptr;         // [H]
  const void* norm_weight = nullptr;         // [H]
  const void* grad_hidden_states = nullptr;  // [T, H]
  const void* inv_norm = nullptr;            // [T, N + 1] acc_t, saved by the forward
  const void* probs = nullptr;               // [T, N + 1] acc_t, saved by the forward
  void* grad_partial_block = nullptr;        // [T, H], out
  void* grad_block_res = nullptr;            // [T, N, H], out
  void* grad_proj_weight = nullptr;          // [H], out
  void* grad_norm_weight = nullptr;          // [H], out
};

// The sizes of a call whose arguments <Kernel>CheckArguments accepted: partial_block [T, H],
// block_res [T, N, H].
inline Shape shape_of(const opTensor& partial_block, const opTensor& block_res) {
  Shape s;
  s.T = partial_block.shape[0];
  s.H = partial_block.shape[1];
  s.N = block_res.shape[1];
  return s;
}
// The dtype of inv_norm/probs for inputs of dtype `dtype`: float64 for float64, else float32.
inline opDataType stats_dtype(opDataType dtype) {
  return dtype == OP_DT_DOUBLE ? OP_DT_DOUBLE : OP_DT_FLOAT;
}

}  // namespace bar
}  // namespace op_plugin
