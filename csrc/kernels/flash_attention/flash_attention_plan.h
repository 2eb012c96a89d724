// Host-side plan of the flash attention engine: work split, workspace layout, kernel table.
// Built by stage 1 (ISA-neutral code), frozen in the executor, read by the ISA kernels.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/flash_attention/flash_attention_params.h"
#include "op_plugin/workspace.h"

namespace op_plugin {
namespace flash {

// How the kernels see the operands.
enum class Compute : int32_t {
  kF32 = 0,        // float operands, fp32 FMA (float inputs; fp16 / bf16 inputs staged to float)
  kBf16Pairs = 1,  // bf16 operands, AVX512_BF16 vdpbf16ps with fp32 accumulation
  kF64 = 2,        // double operands and accumulation
  kBf16Amx = 3,    // bf16 operands in AMX tile layouts (flash_attention_amx_forward.h)
  kF32Amx = 4,     // float operands as three bf16 parts in AMX tile layouts (amx::kSplitPairs)
  kF16Amx = 5,     // float16 operands as two bf16 parts in AMX tile layouts (amx::kSplitPairs2)
};

// AMX-BF16 dataflow (kBf16Amx): query rows per task and keys per block (multiples of 32: strips
// of 2 A tiles, and the tile contraction). Measured (docs/decisions.md): 64 to 256 rows are
// within noise of each other, and 64 give more tasks to balance; 512 keys beat 256 by 3-5%
// (dense S=2048 D=128 and window W=512 D=64), since each row's online-softmax bookkeeping (two
// reductions, the rescale of its O row) is amortised over twice the keys.
constexpr int64_t kAmxBlockQ = 64;
constexpr int64_t kAmxBlockKV = 512;
// Operands in parts (kF32Amx, kF16Amx): a head's K and V panels take 3 MB (float32, S=2048
// D=128), more than L2, so each task streams them from L3; 256 rows per task (4 strips reading
// each key block from L2) measured 1.08x faster than 64, and 512 no faster (docs/decisions.md).
constexpr int64_t kAmxPartsBlockQ = 256;
// Row strides of the score (fp32) and P (bf16) blocks for a key block of bkv keys, off powers of
// two so that the 16 rows of a tile do not share a few L1 sets.
constexpr int64_t amx_ld_scores(int64_t bkv) { return bkv + 16; }
constexpr int64_t amx_ld_p(int64_t bkv) { return bkv + 32; }
// Backward (flash_attention_amx_backward.h): query rows per strip and keys per block; both are
// contraction lengths of the accumulating GEMMs (dK, dV over queries, dQ^T over keys), so that
// each fp32 accumulator tile loaded and stored again meets 4 steps of 32.
constexpr int64_t kAmxBwdBlockQ = 128;
constexpr int64_t kAmxBwdBlockKV = 128;
// bf16 without a sliding window: 256 keys, so that dQ^T's accumulators meet 8 steps per load and
// store (they live in L2, whose bandwidth bounds these GEMMs). One thread, B=1 N=8 S=2048 D=128:
// dense 53.7 -> 48.7 ms (medians of five alternations), causal unchanged; slower under a window
// of 512 (more of each block falls outside the band: S=8192 D=64 48 -> 53-58 ms) and for the
// float32 parts (220-232 -> 230-249 ms), float16 parts within noise.
constexpr int64_t kAmxBwdBlockKVBf16 = 256;
// Below this many query rows float32 / float16 inputs (in bf16 parts) run on the vector path: on
// 5-12 rows their tile dataflow measured 15-25% slower than float FMAs (fwd+bwd, B1 N8 Skv=1024
// D128, 2 threads). bf16 takes the tiles wherever the row kernels do not run (below).
constexpr int64_t kAmxMinRowsQ = 16;
// Rows of a sequence in the backward's packed operands: a multiple of 32 for the tiles, and one
// tile more, so that the d-major K^T has no power-of-two row stride (16 rows in a few L1 sets).
constexpr int64_t amx_rows(int64_t len) { return (len + 31) / 32 * 32 + 32; }

constexpr int64_t pad32(int64_t n) { return (n + 31) / 32 * 32; }

// One unit of work. Forward: (b, n, query block starting at row i0). Backward: (b, n, key
// chunk i0): the task owns the dK/dV rows of its key tiles (or their partial for its query head
// under GQA) and a dQ partial of the head, so no two tasks ever write the same element and
// nothing needs atomics.
struct Task {
  int32_t b;
  int32_t n;
  int64_t i0;   // forward: first query row (the row kernels: first (head, row) pair of kv head
                //   n); backward: key chunk index
  int64_t cost;  // tiles visited; tasks run longest first (LPT) from a shared queue
};

// Few query rows (flash_attention_small.h): at most small_rows_limit() rows in every sequence run
// row by row, without tiles; below kSmallSerialWork multiply-adds the call stays on one thread.
// At 5 rows the row kernels' 32-way split dot products keep float32 within the error budget,
// where the vector score GEMM's one chain per logit was up to 2.4x over it (PyTorch's own GEMM is
// more accurate below 6 rows), so no limit is below 5 for a float part.
// The limits, by dataflow and direction, each where the row kernels stopped beating the vector
// tiles (which compute only the lane groups of their rows, and whose backward of few rows splits
// keys rather than a GQA group, since 2026-12-07):
//   AVX-512 levels, float parts (float32, float16; bf16 where vdpbf16ps is slow): forward 8,
//     backward 6. Zen 4, B1, 8 or 32 query heads on 8, D128, 1,024-16,384 keys, 2 threads, both
//     dataflows alternated in one process (tile / row time): forward 0.89-1.46 at 8 rows,
//     0.74-1.11 at 10 and 0.61-0.90 at 15; backward 0.74-1.36 at 6, 0.69-1.15 at 8 and
//     0.56-0.83 at 15 (docs/decisions.md, "Few query rows, fifth round"). Earlier both were 15,
//     measured before the tiles' two changes. On Intel's AVX-512 not measured yet.
//   bf16 on the vector pair tiles (vdpbf16ps at the FMA rate, AMD): backward 3; forward 3, or 6
//     from kSmallLongKeys keys (the tiles' share of a short call is larger: at 6 rows tile / row
//     was 0.66-0.70 with 1,024 keys and 1.10-1.43 with 4,096-16,384; at 4 rows backward
//     0.69-0.95, except 32 heads on 8 with 16,384 keys, 1.27).
//   avx2 and baseline: 11, both directions (Zen 3, float32, float16, bf16, 512-2,048 keys, 1-8 kv
//     heads, one and two threads: the tiles took 0.56-1.09 of the row kernels' time forward and
//     0.60-0.96 fwd+bwd at 12-15 rows; mixed at 8-10, 0.70-1.35; docs/decisions.md, "Few query
//     rows, fourth round").
// From 16 rows on the AMX hosts' float parts take over (kAmxMinRowsQ).
constexpr int64_t kSmallRowsQFwd = 8;
constexpr int64_t kSmallRowsQBwd = 6;
constexpr int64_t kSmallRowsQAvx2 = 11;
constexpr int64_t kSmallRowsQBf16Pairs = 3;
constexpr int64_t kSmallRowsQBf16PairsLongKeys = 6;
constexpr int64_t kSmallLongKeys = 4096;
// bf16 on AMX: the row kernels up to 4 rows only; at 5 rows one 16-row tile beat them 1.3-1.5x
// forward (128-1024 keys) and 1.1-1.35x backward. And the forward of 2-4 rows takes the tile once
// rows x keys reach kSmallWorkBf16AmxFwd: one tile's cost hardly grows with the rows, the row
// kernels' grows with each (B1, 8 query heads on 2, D128, 2 threads: 4 rows x 1024 keys 136
// against 323 us, 2 rows x 1024 131 against 190; 2 rows x 128 keys 40 against 37). The
// backward's row kernels stayed faster up to 4 rows (1.03-2.1x, 16-1024 keys), and a bf16
// backward does not need the forward's dataflow (docs/decisions.md, "Few query rows, second
// round"). bf16 takes the tiles for every call the row kernels do not.
constexpr int64_t kSmallRowsQBf16Amx = 4;
constexpr int64_t kSmallWorkBf16AmxFwd = 384;
constexpr int64_t kSmallSerialWork = int64_t(1) << 18;

// The row kernels take a kv head's query rows (of all the heads of its group) together, up to
// kSmallMaxPairs (head, row) pairs at a time, so that each K / V row is read and converted once
// for all of them, not once per row.
constexpr int64_t kSmallMaxPairs = 16;
// They go over the keys kSmallKeys at a time: a block's logits are reduced together and P V keeps
// a row's accumulators in registers across the block.
constexpr int64_t kSmallKeys = 16;
// The backward's key chunks (make_small_plan): up to kSmallBwdMinTasks tasks per call, chunks of
// at least kSmallBwdChunkKeys keys (with 256, one kv head and 256 keys stayed one task and 12-15
// rows lost to the tiles; a chunk's own cost, its rows' q / dO loads and dQ partial, is about 1%
// of 64 keys' work).
constexpr int64_t kSmallBwdMinTasks = 4;
constexpr int64_t kSmallBwdChunkKeys = 64;
// The forward's key splits (split-K decode, make_small_plan): a sequence's keys are split into
// ceil(keys / kSmallFwdSplitKeys) ranges, at most kSmallFwdMaxSplits. A split's task writes its
// rows' maximum, exp sum and unnormalised O (Plan::fwd_part_offset), and combine_splits merges
// them in split order. So each K / V row is read by one task per run of pairs, where without
// splits a call with fewer kv heads than threads ran several runs over all the keys, and the
// split count is a function of the key length only, so the results do not change with the
// thread count.
constexpr int64_t kSmallFwdSplitKeys = 2048;
constexpr int64_t kSmallFwdMaxSplits = 64;
inline int64_t small_fwd_splits(int64_t keys, int64_t max_splits) {
  const int64_t s = (keys + kSmallFwdSplitKeys - 1) / kSmallFwdSplitKeys;
  return s < 1 ? 1 : s > max_splits ? max_splits : s;
}
// The first key of split s of `splits` over `keys` keys (s = splits: keys): even shares, each
// starting on a block of kSmallKeys, so that no key block straddles two splits and a paged
// cache's blocks of a multiple of 16 keys are read whole, in place.
inline int64_t small_fwd_split_start(int64_t keys, int64_t splits, int64_t s) {
  return s >= splits ? keys : s * keys / splits / kSmallKeys * kSmallKeys;
}

// Bytes of the small path's per-task row scratch (Small<Ops>::carve) for `pairs` query rows: a
// block of kSmallKeys K rows and one of V rows, an O row of pad16(max(D, Dv)) accumulation scalars
// and a conversion row, then the rows' q, accumulator and dO rows and the logits of max_skv keys.
inline int64_t small_rows_bytes(int64_t D, int64_t Dv, int64_t max_skv, int64_t scalar_bytes, int64_t pairs) {
  auto up = [](int64_t x) { return (x + 63) / 64 * 64; };
  const int64_t Dm = pad16(D > Dv ? D : Dv);
  return 3 * up(pairs * Dm * scalar_bytes) + up(pairs * pad16(max_skv) * scalar_bytes) +
         2 * up(kSmallKeys * Dm * scalar_bytes) + up(Dm * scalar_bytes) + up(Dm * 4);
}

struct Plan {
  Compute compute = Compute::kF32;
  bool small = false;  // the row kernels of flash_attention_small.h (small_rows_limit)
  // Row kernels: (head, row) pairs of a kv head per forward task and per backward pass over the keys
  int64_t small_pairs = 1;
  // Row kernels' forward: the most key splits of a sequence (kSmallFwdSplitKeys; sequence b has
  // small_fwd_splits(its keys, fwd_splits)); with more than one, each (split, q row, head) has a
  // record of pad16(Dv) + 16 scalars at fwd_part_offset, [split][q row][N1]: its max (log2 units)
  // and exp sum in the first two, O's unnormalised row from the 16th.
  int64_t fwd_splits = 1;
  uint64_t fwd_part_offset = 0;
  // `convert_in_tasks`: 16-bit inputs computed in float (fp16, or bf16 without AMX); each task
  // converts the rows it reads into its slot and nothing is staged (flash_attention_staging.h).
  // Staging: some inputs are first copied into head-major [B][N][rows][dim] ([N][T][dim] for
  // TND) buffers in the workspace. On the fp32/fp64 paths, the operands read
  // as GEMM vector rows (v in the forward; q, k, attn_out/dout in the backward) are copied when
  // their rows are not contiguous (BSND/TND with several heads): rows N*D apart alias in L1
  // (4 KiB strides) and a 96-row tile would thrash it. O(S) memory, one pass. The broadcast-only
  // operands (k in the forward, v in the backward) are copied for BSND but read in place for
  // TND (see make_plan).
  bool convert_in_tasks = false;
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
  // Forward, AMX: K^T and V of the (batch, kv head) items as tile panels
  // (flash_attention_amx_forward.h), packed a wave at a time as the backward's operands (below):
  // per slot [panel_rows][pad32(D)] and [panel_rows][pad16(Dv)] elements, panel_rows =
  // pad32(the longest key sequence).
  int64_t amx_block_q = kAmxBlockQ, amx_block_kv = kAmxBlockKV;  // forward: rows per task, keys per block;
                                                                  // backward: rows per strip, keys per block
  uint64_t kpanel_offset = 0, vpanel_offset = 0;
  int64_t panel_rows = 0;
  // AMX, both directions: the (b, kv head) items run in waves of amx_wave_kv items, item i in
  // slot i % amx_wave_kv (amx_kv_slot): each wave packs its items' operands into the slots, then
  // runs their tasks (tasks[wave_task0[w] .. wave_task0[w + 1])), so the packed operands take
  // amx_wave_kv heads' worth of memory, not the call's.
  // Backward, AMX: the operands packed per wave (flash_attention_amx_backward.h). Per kv slot,
  // bkv_rows rows (amx_rows of the longest key sequence) of K rows (pad32(D) wide), V rows
  // (pad32(Dv)), K^T (pad16(D) rows of bkv_rows keys); per query slot (kv slot * group + n %
  // group), bq_rows rows of Q^T and dO^T panels, Q and dO pair panels, lse * log2(e) and Delta
  // (fp32). amx_dq_ld: the row stride of a task's dQ^T.
  uint64_t bkv_k_offset = 0, bkv_v_offset = 0, bkv_kt_offset = 0;
  uint64_t bq_qt_offset = 0, bq_dot_offset = 0, bq_qp_offset = 0, bq_dop_offset = 0;
  uint64_t bq_lse_offset = 0, bq_delta_offset = 0;
  int64_t bkv_rows = 0, bq_rows = 0, amx_dq_ld = 0;
  int64_t amx_wave_kv = 1, num_waves = 1;
  const int64_t* wave_task0 = nullptr;
  // Backward key chunks: the key tiles of a head are split into `bwd_chunks` contiguous ranges
  // (a function of the shapes only, never of the thread count). With more than one chunk each
  // chunk writes a dQ partial, [chunk][q row][N1][Dp], summed in chunk order afterwards.
  int64_t bwd_chunks = 1;
  uint64_t dqpart_offset = 0;
  int64_t dq_rows = 0;           // q rows of all batches (rows of the dQ partial, and of the forward's split records)
  // Backward, GQA: the query heads of a kv head that one task runs (bwd_task_heads, a divisor of
  // the group). With fewer than the whole group, each task writes an fp32/fp64 dK|dV partial,
  // [kv row][N1 / bwd_task_heads][Dp + Dvp], summed in head order afterwards (reduce_group); with
  // the whole group, the task writes dK / dV itself. bwd_acc_rows: the vector backward's dK / dV
  // accumulator rows in a slot, one key tile for one head, every key of a chunk for several.
  int64_t bwd_task_heads = 1, bwd_acc_rows = 0;
  uint64_t partial_offset = 0;
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
  bool amx;         // has the kBf16Amx compute path (the CPU and the OS allow AMX tiles)
  void (*forward)(const FlashAttnFwdParams& p, const Plan& plan, void* workspace);
  void (*backward)(const FlashAttnBwdParams& p, const Plan& plan, void* workspace);
};
const Kernels& kernels();

// The workspace base rounded up to a cache line (the plan asks for one line more).
using op_plugin::align_workspace;

// Arrays the plan points into, owned by the executor.
struct PlanStorage {
  std::vector<Task> tasks;
  std::vector<int64_t> vpair_row0;
  std::vector<int64_t> wave_task0;
};

// Builds the task list and workspace layout. `bwd` selects the backward plan; `numel` are the
// element counts of q, k, v, out, dout (for staging). Returns false if sizes overflow.
bool make_plan(const FlashAttnFwdParams& p, bool bwd, const int64_t numel[5], int64_t threads, PlanStorage* storage,
               Plan* plan);

}  // namespace flash
}  // namespace op_plugin
