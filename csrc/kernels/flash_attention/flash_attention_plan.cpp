// Work split and workspace layout of the flash attention engine (see flash_attention_plan.h).
#include "kernels/flash_attention/flash_attention_plan.h"

#include <algorithm>

#include "op_plugin/isa.h"
#include "op_plugin/workspace.h"

namespace op_plugin {
namespace flash {

namespace isa_base { const Kernels& kernels_table(); }
namespace isa_avx2 { const Kernels& kernels_table(); }
namespace isa_avx512 { const Kernels& kernels_table(bool bf16, bool amx); }

const Kernels& kernels() {
  static const Kernels* chosen = [] {
    switch (active_isa()) {
      case Isa::kAvx512Amx: return &isa_avx512::kernels_table(true, true);
      case Isa::kAvx512Bf16: return &isa_avx512::kernels_table(true, false);
      case Isa::kAvx512: return &isa_avx512::kernels_table(false, false);
      case Isa::kAvx2: return &isa_avx2::kernels_table();
      case Isa::kBaseline: break;
    }
    return &isa_base::kernels_table();
  }();
  return *chosen;
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Key tiles (of block_kv keys) visited by the forward query block [i0, i0 + rows).
int64_t fwd_tiles(const RowWindow& w, int64_t i0, int64_t rows, int64_t block_kv) {
  const int64_t lo = w.lo(i0), hi = w.hi(i0 + rows - 1);
  return hi < lo ? 0 : ceil_div(hi - lo + 1, block_kv);
}

// (key tile, query tile) pairs visited by the backward of one head over key tiles [t0, t1)
// (tiles of block_kv keys and block_q query rows).
int64_t bwd_tiles(const RowWindow& w, int64_t sq, int64_t skv, int64_t t0, int64_t t1, int64_t block_q,
                  int64_t block_kv) {
  int64_t total = 0;
  for (int64_t j0 = t0 * block_kv; j0 < std::min(skv, t1 * block_kv); j0 += block_kv) {
    const int64_t nc = std::min(block_kv, skv - j0);
    const int64_t ilo = std::max<int64_t>(0, w.first_row(j0));
    const int64_t ihi = std::min(sq - 1, w.last_row(j0 + nc - 1));
    if (ilo <= ihi) total += ceil_div(ihi + 1 - (ilo & ~int64_t(1)), block_q);
  }
  return total;
}

// The longest of the batch's sequences (lens[0 .. batch)).
int64_t longest(const int64_t* lens, int64_t batch) {
  int64_t most = 0;
  for (int64_t b = 0; b < batch; ++b) most = std::max(most, lens[b]);
  return most;
}

// The AMX forward's key block: kAmxBlockKV keys, or, under a window through which a task's
// block_q rows see between that and twice as many keys, all of them in one block. With 512 keys
// a window of 512 left every strip a second block of a few dozen keys, which paid a row's
// bookkeeping and two small GEMMs for them.
int64_t amx_fwd_block_kv(const FlashAttnFwdParams& p, int64_t block_q) {
  if (p.win_left >= kUnbounded || p.win_right >= kUnbounded) return kAmxBlockKV;
  // a task's keys: from its first row's window start (rounded down to 32) to its last row's end
  const int64_t range = pad32(p.win_left + p.win_right + block_q + 31);
  return range > kAmxBlockKV && range <= 2 * kAmxBlockKV ? range : kAmxBlockKV;
}

// Bytes of one (b, kv head) item's packed operands in the AMX dataflow (the workspace regions
// below): the forward's K^T and V panels; the backward's K, V, K^T and its query heads' Q^T, dO^T,
// Q and dO panels, lse2 and Delta.
int64_t amx_item_bytes(const FlashAttnFwdParams& p, bool bwd, int64_t parts) {
  const int64_t max_skv = longest(p.seqlen_kv, p.batch), max_sq = longest(p.seqlen_q, p.batch);
  const int64_t D = p.head_dim, Dv = p.head_dim_v, group = std::max<int64_t>(1, p.group);
  if (!bwd) return parts * pad32(max_skv) * (pad32(D) + pad16(Dv)) * 2;
  const int64_t kv = amx_rows(max_skv) * (pad32(D) + pad32(Dv) + pad16(D));
  const int64_t q = amx_rows(max_sq) * (pad32(D) + pad32(Dv) + pad16(D) + pad16(Dv));
  return parts * (kv + group * q) * 2 + group * amx_rows(max_sq) * 8;
}

// Rows of a buffer indexed like the q (or kv) tensor: batch x batch_rows when padded, else up to
// the last TND row.
int64_t tensor_rows(int64_t batch, int64_t batch_rows, const int64_t* start, const int64_t* rows) {
  if (batch_rows > 0) return batch * batch_rows;
  int64_t n = 0;
  for (int64_t b = 0; b < batch; ++b) n = std::max(n, start[b] + rows[b]);
  return n;
}

// The backward's dQ partials of Plan::bwd_chunks key chunks, [chunk][q row][N1][pad16(D)]
// scalars of ss bytes (reduce_dq sums them).
void reserve_dq_partials(const FlashAttnFwdParams& p, int64_t ss, WorkspaceLayout* layout, Plan* plan) {
  const int64_t rows = tensor_rows(p.batch, plan->q_batch_rows, p.q_start, p.rows_q);
  plan->dq_rows = rows;
  plan->dqpart_offset =
      layout->reserve(static_cast<uint64_t>(plan->bwd_chunks * rows * p.heads_q * pad16(p.head_dim) * ss));
}

}  // namespace

// Few query rows: tasks (b, kv head, run of its group's (head, row) pairs) forward and (b, kv
// head, chunk of keys) backward, nothing staged; the row scratch (and the backward's dK | dV
// accumulators of a chunk) per slot. With one chunk no partials; with more, dQ partials
// (reduce_dq).
bool make_small_plan(const FlashAttnFwdParams& p, bool bwd, int64_t threads, PlanStorage* storage, Plan* plan) {
  plan->small = true;
  plan->convert_in_tasks = false;
  plan->stage_mask = 0;
  plan->bwd_chunks = plan->bwd_task_heads = 1;
  plan->vpair_rows = plan->panel_rows = plan->bkv_rows = plan->bq_rows = plan->dq_rows = plan->partial_rows = 0;
  std::vector<Task>* tasks = &storage->tasks;
  tasks->clear();
  int64_t work = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t sq = p.seqlen_q[b], skv = p.seqlen_kv[b];
    const RowWindow w = row_window(p, sq, skv);
    int64_t pairs = 0;
    for (int64_t i = 0; i < sq; ++i) pairs += std::max<int64_t>(0, w.hi(i) - w.lo(i) + 1);
    work += pairs * p.heads_q * (p.head_dim + p.head_dim_v) * (bwd ? 3 : 1);
  }
  const int64_t share = work < kSmallSerialWork ? 1 : threads;
  const int64_t group = std::max<int64_t>(1, p.group);
  // Backward: a task per (b, kv head) and chunk of keys. dK and dV of a key are one task's, but
  // with fewer (b, kv head) items than kSmallBwdMinTasks the calls ran on that many threads (one
  // kv head: one), so their keys are split into up to that many chunks of at least
  // kSmallBwdChunkKeys, each writing a dQ partial summed in chunk order afterwards. A function of
  // the shapes, never of the thread count: the sums do not change with it.
  const int64_t max_skv = longest(p.seqlen_kv, p.batch);
  if (bwd && work >= kSmallSerialWork && p.batch * p.heads_kv < kSmallBwdMinTasks)
    plan->bwd_chunks = std::max<int64_t>(1, std::min(ceil_div(kSmallBwdMinTasks, p.batch * p.heads_kv),
                                                     max_skv / kSmallBwdChunkKeys));
  const int64_t C = plan->bwd_chunks;
  // Forward: long key sequences in splits (split-K decode), so that threads share a kv head's keys
  // rather than each reading all of them for a run of its pairs (below).
  plan->fwd_splits = !bwd && work >= kSmallSerialWork ? small_fwd_splits(max_skv, kSmallFwdMaxSplits) : 1;
  const int64_t splits = plan->fwd_splits;
  // Forward: runs of a kv head's pairs short enough for a task per thread (not two: each run
  // reads its kv head's K and V, and one-row GQA decode is bound by those reads; 8 query heads on
  // 2, 2,048 keys, 2 threads: 171-249 against 248-310 us in float32). A row's result does not
  // depend on the run it is in, so this may follow the thread count. The backward takes a kv
  // head per task (its dK / dV sum over the group's rows in a fixed order) and its pairs
  // kSmallMaxPairs at a time.
  int64_t per = kSmallMaxPairs;
  if (!bwd) {
    int64_t items = 0;  // (b, kv head, split) items
    for (int64_t b = 0; b < p.batch; ++b) items += p.heads_kv * small_fwd_splits(p.seqlen_kv[b], splits);
    per = std::max<int64_t>(1, std::min(kSmallMaxPairs, ceil_div(std::max<int64_t>(1, items) * group * p.max_seqlen_q, share)));
  }
  plan->small_pairs = per;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t sq = p.seqlen_q[b], skv = p.seqlen_kv[b];
    const RowWindow w = row_window(p, sq, skv);
    if (!bwd) {
      const int64_t sb = small_fwd_splits(skv, splits);
      for (int64_t h = 0; h < p.heads_kv; ++h)
        for (int64_t k0 = 0; k0 < group * sq; k0 += per)
          for (int64_t s = 0; s < sb; ++s) {  // task i0: run start k0, split s
            const int64_t c0 = s * skv / sb, c1 = (s + 1) * skv / sb;
            int64_t cost = 1;
            for (int64_t k = k0; k < std::min(k0 + per, group * sq); ++k)
              cost += 1 + std::max<int64_t>(0, std::min(w.hi(k % sq), c1 - 1) - std::max(w.lo(k % sq), c0));
            tasks->push_back(Task{static_cast<int32_t>(b), static_cast<int32_t>(h), k0 * splits + s, cost});
          }
    } else if (p.rows_q[b] > 0 || p.rows_kv[b] > 0) {
      int64_t pairs = 0;
      for (int64_t i = 0; i < sq; ++i) pairs += std::max<int64_t>(0, w.hi(i) - w.lo(i) + 1);
      for (int64_t h = 0; h < p.heads_kv; ++h)
        for (int64_t c = 0; c < C; ++c)  // every chunk writes its partial, empty or not
          tasks->push_back(Task{static_cast<int32_t>(b), static_cast<int32_t>(h), c, 1 + (pairs * group + p.rows_kv[b]) / C});
    }
  }
  std::stable_sort(tasks->begin(), tasks->end(), [](const Task& a, const Task& b) { return a.cost > b.cost; });
  plan->tasks = tasks->data();
  plan->num_tasks = static_cast<int64_t>(tasks->size());
  plan->slots = std::max<int64_t>(1, std::min<int64_t>(share, plan->num_tasks));
  const int64_t ss = plan->compute == Compute::kF64 ? 8 : 4;
  int64_t slot = small_rows_bytes(p.head_dim, p.head_dim_v, p.max_seqlen_kv, ss, per);
  if (bwd) slot += (ceil_div(p.max_seqlen_kv, C) * (pad16(p.head_dim) + pad16(p.head_dim_v)) * ss + 63) / 64 * 64;
  WorkspaceLayout layout;
  plan->slot_bytes = static_cast<uint64_t>(slot);
  plan->slot_offset = layout.reserve(plan->slot_bytes * static_cast<uint64_t>(plan->slots));
  if (C > 1) reserve_dq_partials(p, ss, &layout, plan);
  if (splits > 1) {
    plan->dq_rows = tensor_rows(p.batch, plan->q_batch_rows, p.q_start, p.rows_q);
    plan->fwd_part_offset = layout.reserve(
        static_cast<uint64_t>(splits * plan->dq_rows * p.heads_q * (pad16(p.head_dim_v) + 16) * ss));
  }
  plan->dpse_rows = plan->dpse_cols = 0;
  if (bwd && static_cast<const FlashAttnBwdParams&>(p).want_dpse) {
    plan->dpse_rows = p.max_seqlen_q;
    plan->dpse_cols = p.max_seqlen_kv;
    plan->dpse_offset = layout.reserve(static_cast<uint64_t>(p.batch * p.heads_q * plan->dpse_rows * plan->dpse_cols * ss));
  }
  plan->workspace_bytes = layout.size() + WorkspaceLayout::kAlignment;
  return true;
}

// The most query rows the row kernels take, where bf16 is not on AMX (its own rule is below)
static int64_t small_rows_limit(Compute compute, bool bwd, int64_t max_seqlen_kv) {
  if (compute == Compute::kBf16Pairs)
    return !bwd && max_seqlen_kv >= kSmallLongKeys ? kSmallRowsQBf16PairsLongKeys : kSmallRowsQBf16Pairs;
  if (active_isa() <= Isa::kAvx2) return kSmallRowsQAvx2;
  return bwd ? kSmallRowsQBwd : kSmallRowsQFwd;
}

bool make_plan(const FlashAttnFwdParams& p, bool bwd, const int64_t numel[5], int64_t threads, PlanStorage* storage,
               Plan* plan) {
  const bool bf16_tiles = plan->compute == Compute::kBf16Pairs && kernels().amx;
  const int64_t rows = p.max_seqlen_q;
  const int64_t max_rows = small_rows_limit(plan->compute, bwd, p.max_seqlen_kv);
  const bool small = bf16_tiles ? rows <= kSmallRowsQBf16Amx &&
                                      (bwd || rows == 1 || rows * p.max_seqlen_kv < kSmallWorkBf16AmxFwd)
                                : rows <= max_rows;
  if (small) return make_small_plan(p, bwd, threads, storage, plan);
  plan->small = false;
  plan->fwd_splits = 1;
  // bf16 on a CPU with AMX: the tile dataflow for every call the row kernels above do not take.
  if (bf16_tiles) plan->compute = Compute::kBf16Amx;
  // float32 inputs likewise, every operand in three bf16 parts: six tile GEMMs per GEMM, float32's
  // accuracy, and still faster than float FMAs (docs/decisions.md).
  // float16 in two parts: exact, four tile GEMMs per GEMM. The forward and the backward always take
  // the same dataflow, so the backward's logits are the forward's bit for bit and its
  // P = exp(S - lse) is off the forward's by lse's rounding alone (a float32 backward on FMAs after
  // a forward on tiles put a row with one visible key at P = 1 - 1.4e-6, docs/decisions.md).
  if (plan->compute == Compute::kF32 && kernels().amx && p.max_seqlen_q >= kAmxMinRowsQ) {
    if (!plan->convert_in_tasks) {
      plan->compute = Compute::kF32Amx;
    } else if (p.dtype == OP_DT_FLOAT16) {
      plan->compute = Compute::kF16Amx;
      plan->convert_in_tasks = false;
    }
  }
  const bool amx = plan->compute == Compute::kBf16Amx || plan->compute == Compute::kF32Amx ||
                   plan->compute == Compute::kF16Amx;
  // bf16 parts of an operand
  const int64_t parts = plan->compute == Compute::kF32Amx ? 3 : plan->compute == Compute::kF16Amx ? 2 : 1;
  if (amx) {
    bool sliding = false;  // the last row's window does not reach key 0
    for (int64_t b = 0; b < p.batch; ++b)
      if (p.seqlen_q[b] > 0 && row_window(p, p.seqlen_q[b], p.seqlen_kv[b]).lo(p.seqlen_q[b] - 1) > 0) sliding = true;
    plan->amx_block_q = bwd ? kAmxBwdBlockQ : parts > 1 ? kAmxPartsBlockQ : kAmxBlockQ;
    plan->amx_block_kv = !bwd ? amx_fwd_block_kv(p, plan->amx_block_q)
                              : parts == 1 && !sliding ? kAmxBwdBlockKVBf16 : kAmxBwdBlockKV;
  }
  const int64_t block_q = amx ? plan->amx_block_q : kBlockQ, block_kv = amx ? plan->amx_block_kv : kBlockKV;
  std::vector<Task>* tasks = &storage->tasks;
  tasks->clear();
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t sq = p.seqlen_q[b], skv = p.seqlen_kv[b];
    const RowWindow w = row_window(p, sq, skv);
    if (!bwd) {
      // Head-major, so that tasks of equal cost (all of them when dense) that run back to back
      // read the same K/V from cache.
      for (int64_t n = 0; n < p.heads_q; ++n)
        for (int64_t i0 = 0; i0 < sq; i0 += block_q) {
          const int64_t cost = 1 + fwd_tiles(w, i0, std::min(block_q, sq - i0), block_kv) * 4;
          tasks->push_back(Task{static_cast<int32_t>(b), static_cast<int32_t>(n), i0, cost});
        }
    }
  }
  plan->bwd_chunks = plan->bwd_task_heads = 1;
  const int64_t group = std::max<int64_t>(1, p.heads_q / std::max<int64_t>(1, p.heads_kv));
  const int64_t kv_items = std::max<int64_t>(1, p.batch * p.heads_kv);
  if (bwd) {
    // Enough tasks to balance a few threads even when B * N1 is small (and to survive a
    // preempted thread): at least kBwdMinTasks when the keys allow it. A constant, not the
    // thread count: the chunks set the dQ summation order, which must not depend on the threads.
    // The dQ partials cost chunks x |dQ| in fp32, written, read back and summed, so large
    // problems (which have enough heads or enough rows to balance anyway) are capped at 2^24
    // partial elements. 4, not 8 (2026-12-05): at B * N1 = 4 two chunks per head cost the bf16
    // AMX backward 19% on the training benchmark's window layers (S=4096 N=4 GQA 4:2 D=64, 2
    // threads: 8.7-9.0 -> 7.1-7.2 ms) and 10% or more on its causal one; 8, not 16: at B * N1 = 8
    // two chunks per head cost the AMX backward 4 of 65 ms (one thread, S=2048 D=128) and the
    // fp32 one 3-9% (docs/decisions.md).
    constexpr int64_t kBwdMinTasks = 4;
    constexpr int64_t kMaxPartialElems = int64_t(1) << 24;
    int64_t tiles_max = 0, q_rows = 0, kv_rows = 0;
    for (int64_t b = 0; b < p.batch; ++b) {
      tiles_max = std::max(tiles_max, ceil_div(p.seqlen_kv[b], block_kv));
      q_rows += p.rows_q[b];
      kv_rows += p.rows_kv[b];
    }
    // GQA: a task runs several query heads of its kv head, accumulating their dK / dV in its own
    // block, so that no per-head dK | dV partial is written, read back and summed (they took
    // heads_q x |dK| + |dV| of fp32 workspace: 256 MiB at S=8192, 32 query heads on 8, D=128).
    // The group is split only as far as kBwdMinTasks asks, into `subgroups` (a divisor of the
    // group) before any key chunks. An AMX task keeps a dQ^T block per head; a vector task runs its
    // heads one after the other, with dK / dV accumulators for every key of its chunk.
    int64_t subgroups = std::min(group, ceil_div(kBwdMinTasks, kv_items));
    while (group % subgroups != 0) ++subgroups;
    // Few query rows against many keys (vector dataflow): key chunks instead, when their dQ
    // partials (chunks x q rows x N1 x D) are fewer elements than the dK | dV partials of the
    // split group (kv rows x N2 x subgroups x (D + Dv)). 12 rows, 8 query heads on 2, 2,048
    // keys, D128: the split group's partials and their sum took 19% of the backward; with the
    // keys split it is 1.25x faster, 32-48 rows 1.14-1.23x, 128 rows 1.03x (Zen 3, 2 threads).
    // Not on the AMX dataflow, where it is not measured.
    if (!amx && subgroups > 1) {
      const int64_t chunks = std::min(tiles_max, ceil_div(kBwdMinTasks, kv_items));
      const int64_t dq_part = chunks * q_rows * p.heads_q * pad16(p.head_dim);
      const int64_t kv_part = kv_rows * p.heads_kv * subgroups * (pad16(p.head_dim) + pad16(p.head_dim_v));
      if (chunks > 1 && dq_part < kv_part) subgroups = 1;
    }
    plan->bwd_task_heads = group / subgroups;
    const int64_t heads = kv_items * subgroups;
    const int64_t dq_elems = std::max<int64_t>(1, q_rows * p.heads_q * pad16(p.head_dim));
    int64_t chunks = std::min(tiles_max, ceil_div(kBwdMinTasks, heads));
    chunks = std::min(chunks, kMaxPartialElems / dq_elems);
    plan->bwd_chunks = std::max<int64_t>(1, chunks);
    const int64_t C = plan->bwd_chunks;
    plan->bwd_acc_rows = (plan->bwd_task_heads == 1 ? 1 : ceil_div(tiles_max, C)) * block_kv;
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t sq = p.seqlen_q[b], skv = p.seqlen_kv[b];
      if (sq == 0 && skv == 0) continue;
      const RowWindow w = row_window(p, sq, skv);
      const int64_t tiles = ceil_div(skv, block_kv);
      // a task's heads: n .. n + bwd_task_heads - 1
      for (int64_t n = 0; n < p.heads_q; n += plan->bwd_task_heads)
        for (int64_t c = 0; c < C; ++c) {
          const int64_t t0 = c * tiles / C, t1 = (c + 1) * tiles / C;
          const int64_t cost = plan->bwd_task_heads * (1 + ceil_div(sq, block_q) + (t1 - t0) +
                                                       bwd_tiles(w, sq, skv, t0, t1, block_q, block_kv) * 4);
          tasks->push_back(Task{static_cast<int32_t>(b), static_cast<int32_t>(n), c, cost});
        }
    }
  }
  // The AMX dataflow's waves of (b, kv head) items (Plan::amx_wave_kv): enough items that each
  // wave has a task per thread, which balances when its tasks cost alike (every head of a dense
  // or causal call; TND's heads of one sequence), while the packed operands of the rest of the
  // call do not sit in memory; and at least kWaveBytesPerThread of packed operands a thread, so
  // that many short sequences do not cost a parallel region per item. Measured (docs/decisions.md,
  // "packs its operands a wave of heads at a time"): float32 fwd+bwd peak extra memory 121 -> 57
  // MB at B1 N8 S2048 D128, its backward steadier and faster, the bf16 forward 10-20% faster (the
  // panels are used while in cache); two tasks per thread a wave measured slower.
  constexpr int64_t kWaveTasksPerThread = 1;
  constexpr int64_t kWaveBytesPerThread = int64_t(2) << 20;
  plan->amx_wave_kv = kv_items;
  if (amx) {
    // The forward's item has a task per block_q query rows of each of its query heads.
    const int64_t item_tasks = bwd ? group / plan->bwd_task_heads * plan->bwd_chunks
                                   : group * std::max<int64_t>(1, ceil_div(p.max_seqlen_q, block_q));
    const int64_t nthreads = std::max<int64_t>(1, threads);
    const int64_t by_tasks = ceil_div(kWaveTasksPerThread * nthreads, item_tasks);
    const int64_t by_bytes = kWaveBytesPerThread * nthreads / std::max<int64_t>(1, amx_item_bytes(p, bwd, parts));
    plan->amx_wave_kv = std::min(kv_items, std::max(by_tasks, by_bytes));
  }
  const int64_t wave_kv = plan->amx_wave_kv;
  const int64_t heads_kv = std::max<int64_t>(1, p.heads_kv);
  auto wave_of = [&](const Task& t) { return (t.b * heads_kv + t.n / group) / wave_kv; };
  plan->num_waves = ceil_div(kv_items, wave_kv);
  // By wave, then longest first; ties in (b, n, i0) order. Only the schedule depends on this
  // order, never the numbers: every task computes its own outputs from scratch.
  std::stable_sort(tasks->begin(), tasks->end(), [&](const Task& a, const Task& b) {
    const int64_t wa = wave_of(a), wb = wave_of(b);
    return wa != wb ? wa < wb : a.cost > b.cost;
  });
  storage->wave_task0.assign(static_cast<size_t>(plan->num_waves + 1), static_cast<int64_t>(tasks->size()));
  for (int64_t t = static_cast<int64_t>(tasks->size()) - 1; t >= 0; --t) storage->wave_task0[wave_of((*tasks)[t])] = t;
  for (int64_t w = plan->num_waves - 1; w >= 0; --w)  // waves without tasks start where the next does
    storage->wave_task0[w] = std::min(storage->wave_task0[w], storage->wave_task0[w + 1]);
  plan->wave_task0 = storage->wave_task0.data();
  plan->tasks = tasks->data();
  plan->num_tasks = static_cast<int64_t>(tasks->size());
  plan->slots = std::max<int64_t>(1, std::min<int64_t>(threads, std::max<int64_t>(1, plan->num_tasks)));

  const bool f64 = plan->compute == Compute::kF64;
  const bool pairs = plan->compute == Compute::kBf16Pairs;
  const int64_t es = f64 ? 8 : pairs ? 2 : 4;  // operand element size
  const int64_t ss = f64 ? 8 : 4;               // accumulator element size
  const int64_t D = p.head_dim, Dv = p.head_dim_v;
  const int64_t Dp = pad16(D), Dvp = pad16(Dv);
  const int64_t D2 = (D + 1) / 2 * 2, Dv2 = (Dv + 1) / 2 * 2;  // pair-padded reduction dims
  const int64_t Br = kBlockQ, Bc = kBlockKV;
  constexpr int64_t kAlign = 64;
  auto up = [](int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; };

  int64_t slot = 0;
  if (amx && bwd) {  // flash_attention_amx_backward.h carves these in this order
    const int64_t bq = plan->amx_block_q, bkv = plan->amx_block_kv;
    plan->amx_dq_ld = amx_rows(p.max_seqlen_q) + 16;
    slot += plan->bwd_task_heads * up(Dp * plan->amx_dq_ld * 4);  // dQ^T accumulator of each head
    slot += 2 * up(bkv * (bq + 16) * 4);         // S^T, dP^T
    slot += 2 * up(parts * bkv * (bq + 32) * 2); // P^T, dS^T rows (A tiles)
    slot += up(parts * bq * bkv * 2);            // dS^T key-pair panels (B tiles)
    slot += up(bkv * (Dp + 16) * 4);             // dK accumulator
    slot += up(bkv * (Dvp + 16) * 4);            // dV accumulator
    slot += up(17 * (Dp + 16) * 4);              // dQ rows being transposed, conversion scratch
    if (p.full_mask || p.pse) slot += up(bkv * bq * 4) + up(bkv * bq);  // additive mask / pse tile, mask bytes
  } else if (amx) {  // flash_attention_amx_forward.h carves these in this order
    const int64_t Dpad = pad32(D);
    const int64_t bq = plan->amx_block_q, bkv = plan->amx_block_kv;
    slot += up(parts * bq * Dpad * 2);           // Q rows (A tiles)
    slot += up(64 * amx_ld_scores(bkv) * 4);     // scores: two strips of 32 rows
    slot += up(parts * bq * amx_ld_p(bkv) * 2);  // P (A tiles)
    slot += up(bq * (Dvp + 16) * 4);             // output accumulator
    slot += 2 * up(bq * 4);                      // m, l
    slot += up((Dvp + 16) * 4);                        // conversion scratch
  } else if (!bwd) {
    slot += up(D2 * Br * es);          // Qt
    slot += up(Bc * Br * ss);          // scores / P (fp32)
    slot += up(Bc * Br * es);          // P in operand format (bf16 pairs)
    slot += up(Br * Dvp * ss);         // output accumulator
    slot += 3 * up(Br * ss);           // m, l, alpha
    slot += up((Dvp + Br) * 4);        // conversion scratch
    if (p.full_mask || p.pse) slot += up(Bc * Br * ss) + up(Bc * Br);  // additive mask / pse tile, mask bytes
    if (plan->convert_in_tasks)  // the block's q rows, a key tile's k and v rows, converted
      slot += up(Br * Dp * 4) + up(Bc * Dp * 4) + up(Bc * Dvp * 4);
  } else {
    const int64_t S1 = p.max_seqlen_q;
    const int64_t S1p = pad16(S1) + Br;  // columns of the transposed Q / dO panels
    slot += up(D2 * S1p * es);           // Qt
    slot += up(Dv2 * S1p * es);          // dOt
    if (pairs) {
      slot += up(S1p * Dp * es);         // Q row pairs
      slot += up(S1p * Dvp * es);        // dO row pairs
      slot += up(Bc * Dp * es);          // K row pairs of one key tile
    }
    slot += up(2 * S1p * ss);            // lse*log2(e), Delta
    slot += up(S1p * Dp * ss);           // dQ accumulator
    slot += up(2 * Bc * Br * ss);        // scores, dP
    slot += up(3 * Bc * Br * es);        // P, dS, dS interleaved (operand format)
    slot += up(plan->bwd_acc_rows * (Dp + Dvp) * ss);  // dK, dV accumulators
    slot += up((Dp + Dvp) * 4);          // conversion scratch
    if (p.full_mask || p.pse) slot += up(Bc * Br * ss) + up(Bc * Br);  // additive mask / pse tile, mask bytes
    if (plan->convert_in_tasks)  // the head's q and dout rows, a key tile's k and v rows, converted
      slot += up(S1 * Dp * 4) + up(S1 * Dvp * 4) + up(Bc * Dp * 4) + up(Bc * Dvp * 4);
  }
  WorkspaceLayout layout;
  plan->slot_bytes = static_cast<uint64_t>(slot);
  plan->slot_offset = layout.reserve(plan->slot_bytes * static_cast<uint64_t>(plan->slots));
  plan->stage_mask = 0;
  const bool tnd = plan->kv_batch_rows == 0;
  if (plan->convert_in_tasks) {
    // 16-bit inputs computed in float: nothing staged, each task converts the rows it reads
    // (flash_attention_staging.h)
  } else if (amx) {
    // nothing staged: the AMX forward reads q in place per task and packs k and v into tile
    // panels below; the AMX backward packs everything itself (stage_amx_backward)
  } else if (!bwd) {
    // TND: k is only ever the broadcast operand (S^T = K Qt reads 6 key rows per micro-kernel
    // step, which do not thrash L1) and is read in place. A copy of k spans every sequence of the
    // token tensor (32 MiB at T = 8192, N = 8, D = 128): a DRAM round trip and fresh workspace
    // pages per call that cost more than the strided reads (measured: the mixed-length causal
    // forward ~8% faster without it). BSND/BNSD keep their measured choice (copy when strided).
    if (p.k_row_stride != D && !tnd) plan->stage_mask |= 1 << 1;
    if (!pairs && p.v_row_stride != Dv) plan->stage_mask |= 1 << 2;
  } else {
    if (p.q_row_stride != D) plan->stage_mask |= 1 << 0;
    if (p.k_row_stride != D) plan->stage_mask |= 1 << 1;
    // v is only the broadcast operand of dP^T = V dO^T: TND reads it in place (as k in the forward).
    if (p.v_row_stride != Dv && !tnd) plan->stage_mask |= 1 << 2;
    // attn_out (read once per head for D_i) is copied with dout: reading it in place measured
    // slower (TND fp32 fwd+bwd ~2%, BSND bf16 swa band ~6%).
    if (p.o_row_stride != Dv) plan->stage_mask |= (1 << 3) | (1 << 4);
  }
  const int64_t stage_es = static_cast<int64_t>(dtype_size(p.dtype));
  for (int t = 0; t < 5; ++t) {
    plan->stage_numel[t] = (plan->stage_mask >> t) & 1 ? numel[t] : 0;
    plan->stage_offset[t] =
        plan->stage_numel[t] > 0 ? layout.reserve(static_cast<uint64_t>(numel[t] * stage_es)) : 0;
  }
  plan->vpair_rows = 0;
  plan->vpair_row0 = nullptr;
  if (!bwd && pairs) {
    storage->vpair_row0.assign(static_cast<size_t>(p.batch), 0);
    int64_t rows = 0;
    for (int64_t b = 0; b < p.batch; ++b) {
      storage->vpair_row0[b] = rows;
      rows += (p.rows_kv[b] + 1) / 2;
    }
    plan->vpair_rows = rows;
    plan->vpair_row0 = storage->vpair_row0.data();
    plan->vpair_offset = layout.reserve(static_cast<uint64_t>(p.heads_kv * rows * 2 * Dvp * 2));
  }
  plan->panel_rows = 0;
  plan->bkv_rows = plan->bq_rows = 0;
  if (amx && bwd) {
    plan->bkv_rows = amx_rows(longest(p.seqlen_kv, p.batch));
    plan->bq_rows = amx_rows(longest(p.seqlen_q, p.batch));
    const uint64_t kvr = static_cast<uint64_t>(wave_kv * plan->bkv_rows);
    const uint64_t qr = static_cast<uint64_t>(wave_kv * group * plan->bq_rows);
    const uint64_t pb = static_cast<uint64_t>(parts) * 2;  // bytes of an element in all its parts
    plan->bkv_k_offset = layout.reserve(kvr * pad32(D) * pb);
    plan->bkv_v_offset = layout.reserve(kvr * pad32(Dv) * pb);
    plan->bkv_kt_offset = layout.reserve(kvr * Dp * pb);
    plan->bq_qt_offset = layout.reserve(qr * pad32(D) * pb);
    plan->bq_dot_offset = layout.reserve(qr * pad32(Dv) * pb);
    plan->bq_qp_offset = layout.reserve(qr * Dp * pb);
    plan->bq_dop_offset = layout.reserve(qr * Dvp * pb);
    plan->bq_lse_offset = layout.reserve(qr * 4);
    plan->bq_delta_offset = layout.reserve(qr * 4);
  } else if (amx) {
    plan->panel_rows = pad32(longest(p.seqlen_kv, p.batch));
    const uint64_t rows = static_cast<uint64_t>(wave_kv * plan->panel_rows);
    plan->kpanel_offset = layout.reserve(static_cast<uint64_t>(parts) * rows * pad32(D) * 2);
    plan->vpanel_offset = layout.reserve(static_cast<uint64_t>(parts) * rows * Dvp * 2);
  }
  plan->dq_rows = 0;
  if (bwd && plan->bwd_chunks > 1) reserve_dq_partials(p, ss, &layout, plan);
  plan->partial_rows = 0;
  if (bwd && p.group > plan->bwd_task_heads) {
    const int64_t rows = tensor_rows(p.batch, plan->kv_batch_rows, p.kv_start, p.rows_kv);
    plan->partial_rows = rows;
    plan->partial_offset =
        layout.reserve(static_cast<uint64_t>(rows * (p.heads_q / plan->bwd_task_heads) * (Dp + Dvp) * ss));
  }
  plan->dpse_rows = plan->dpse_cols = 0;
  if (bwd && static_cast<const FlashAttnBwdParams&>(p).want_dpse) {
    plan->dpse_rows = p.max_seqlen_q;
    plan->dpse_cols = p.max_seqlen_kv;
    const double bytes = static_cast<double>(p.batch) * p.heads_q * plan->dpse_rows * plan->dpse_cols * ss;
    if (bytes > 1e15) return false;
    plan->dpse_offset = layout.reserve(static_cast<uint64_t>(bytes));
  }
  // + one cache line: stage 2 aligns the caller's base to 64 bytes (align_workspace), since tile
  // loads of rows that straddle cache lines run at half speed and a C caller may pass malloc memory
  plan->workspace_bytes = layout.size() + WorkspaceLayout::kAlignment;
  return true;
}

}  // namespace flash
}  // namespace op_plugin
