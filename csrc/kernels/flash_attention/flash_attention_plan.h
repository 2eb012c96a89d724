// Host-side plan of the flash attention engine: work split, workspace layout, kernel table.
// Built by stage 1 (ISA-neutral code), frozen in the executor, read by the ISA kernels.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/flash_attention/flash_attention_params.h"

namespace op_plugin {
namespace flash {

// How the kernels see the operands.
enum class Compute : int32_t {
  kF32 = 0,        // float operands, fp32 FMA (float inputs; fp16 / bf16 inputs staged to float)
  kBf16Pairs = 1,  // bf16 operands, AVX512_BF16 vdpbf16ps with fp32 accumulation
  kF64 = 2,        // double operands and accumulation
};

// One unit of work. Forward: (b, n, query block starting at row i0). Backward: (b, n, key
// chunk i0): the task owns the dK/dV rows of its key tiles (or their partial for its query head
// under GQA) and a dQ partial of the head, so no two tasks ever write the same element and
// nothing needs atomics.
struct Task {
  int32_t b;
  int32_t n;
  int64_t i0;   // forward: first query row; backward: key chunk index
  int64_t cost;  // tiles visited; tasks run longest first (LPT) from a shared queue
};

struct Plan {
  Compute compute = Compute::kF32;
  // Staging: some inputs are first copied into head-major [B][N][rows][dim] ([N][T][dim] for
  // TND) buffers in the workspace. `stage_convert`: every input is converted to float there
  // (fp16, or bf16 without AVX512_BF16). Otherwise, on the fp32/fp64 paths, the operands read
  // as GEMM vector rows (v in the forward; q, k, attn_out/dout in the backward) are copied when
  // their rows are not contiguous (BSND/TND with several heads): rows N*D apart alias in L1
  // (4 KiB strides) and a 96-row tile would thrash it. O(S) memory, one pass. The broadcast-only
  // operands (k in the forward, v in the backward) are copied for BSND but read in place for
  // TND (see make_plan).
  bool stage_convert = false;
  int32_t stage_mask = 0;        // bit t: tensor t (q, k, v, out, dout) is staged
  int64_t slots = 1;             // per-thread scratch regions (= max_threads() at stage 1)
  const Task* tasks = nullptr;   // sorted by cost, descending
  int64_t num_tasks = 0;
  // workspace layout (byte offsets)
  uint64_t slot_offset = 0, slot_bytes = 0;
  uint64_t stage_offset[5] = {0, 0, 0, 0, 0};  // q, k, v, out, dout copies
  int64_t stage_numel[5] = {0, 0, 0, 0, 0};
  // Forward, bf16 pairs: v staged as key-row pairs per kv head, [N2][pair rows][Dvp][2];
  // sequence b starts at pair row vpair_row0[b] (its keys 2r, 2r+1 form pair row r).
  uint64_t vpair_offset = 0;
  int64_t vpair_rows = 0;
  const int64_t* vpair_row0 = nullptr;
  // Backward key chunks: the key tiles of a head are split into `bwd_chunks` contiguous ranges
  // (a function of the shapes only, never of the thread count). With more than one chunk each
  // chunk writes a dQ partial, [chunk][q row][N1][Dp], summed in chunk order afterwards.
  int64_t bwd_chunks = 1;
  uint64_t dqpart_offset = 0;
  int64_t dq_rows = 0;           // q rows of all batches (rows of the dQ partial)
  uint64_t partial_offset = 0;   // backward GQA: fp32/fp64 dK|dV per (kv row, query head)
  int64_t partial_rows = 0;      // rows of the partial buffer (all kv rows of all batches)
  int64_t kv_batch_rows = 0;     // kv rows per batch in the kv tensor (0 for TND)
  int64_t q_batch_rows = 0;      // q rows per batch (0 for TND)
  // swa_backward with pse: scale * dS as [B][N1][dpse_rows][dpse_cols] (max Sq x max Skv), in the
  // accumulation type; zero where a tile was skipped.
  uint64_t dpse_offset = 0;
  int64_t dpse_rows = 0, dpse_cols = 0;
  uint64_t workspace_bytes = 0;
};

// Kernel table of one ISA level, chosen once by active_isa().
struct Kernels {
  const char* name;
  bool bf16_pairs;  // has the kBf16Pairs compute path
  void (*forward)(const FlashAttnFwdParams& p, const Plan& plan, void* workspace);
  void (*backward)(const FlashAttnBwdParams& p, const Plan& plan, void* workspace);
};
const Kernels& kernels();

// Arrays the plan points into, owned by the executor.
struct PlanStorage {
  std::vector<Task> tasks;
  std::vector<int64_t> vpair_row0;
};

// Builds the task list and workspace layout. `bwd` selects the backward plan; `numel` are the
// element counts of q, k, v, out, dout (for staging). Returns false if sizes overflow.
bool make_plan(const FlashAttnFwdParams& p, bool bwd, const int64_t numel[5], int64_t threads, PlanStorage* storage,
               Plan* plan);

}  // namespace flash
}  // namespace op_plugin
