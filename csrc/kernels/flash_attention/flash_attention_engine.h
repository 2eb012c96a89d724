// The flash attention engine: forward and backward entry points of one ISA level (torch-free).
//
// Included once by each ISA translation unit (flash_attention_kernels{,.avx2,.avx512}.cpp),
// whose compiler flags pick the namespace (see kernels/common/simd.h) and the Ops structs.
// The engine's parts, one job per file:
//   flash_attention_common.h        output stores, lse access, packing, scratch, task runner
//   flash_attention_swa_features.h  swa's pse / full mask / dropout as compile-time features
//   flash_attention_staging.h       head-major copies of strided inputs, 16-bit rows converted
//   flash_attention_forward.h       forward tile loop (vector dataflow)
//   flash_attention_backward.h      backward tile loop (vector dataflow)
//   flash_attention_small.h         row kernels for few query rows (decode), every dtype
//   flash_attention_amx_forward.h   forward tile loop (AMX-BF16 dataflow; AVX512_BF16 TU only)
//   flash_attention_amx_backward.h  backward tile loop (AMX-BF16 dataflow; AVX512_BF16 TU only)
// Tile sizes: flash_attention_params.h.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/flash_attention/flash_attention_amx_backward.h"
#include "kernels/flash_attention/flash_attention_amx_forward.h"
#include "kernels/flash_attention/flash_attention_backward.h"
#include "kernels/flash_attention/flash_attention_common.h"
#include "kernels/flash_attention/flash_attention_forward.h"
#include "kernels/flash_attention/flash_attention_small.h"
#include "kernels/flash_attention/flash_attention_staging.h"
#include "kernels/flash_attention/flash_attention_swa_features.h"

namespace op_plugin {
namespace OP_ISA_NS {
namespace fa {

#if defined(OP_AVX512_BF16)
// The AMX dataflow's compute kinds, and the bf16 parts of each operand they use as a compile-time
// constant: 1 for bf16, 2 for float16, 3 for float (amx::kSplitPairs).
inline bool amx_compute(flash::Compute c) {
  return c == flash::Compute::kBf16Amx || c == flash::Compute::kF32Amx || c == flash::Compute::kF16Amx;
}
template <class F>
void with_amx_parts(flash::Compute c, F&& f) {
  if (c == flash::Compute::kF32Amx)
    f(std::integral_constant<int, 3>{});
  else if (c == flash::Compute::kF16Amx)
    f(std::integral_constant<int, 2>{});
  else
    f(std::integral_constant<int, 1>{});
}
#endif

template <class Ops>
void run_forward(const FlashAttnFwdParams& p, const Plan& plan, void* ws, int out_kind) {
  with_features(p, [&](auto feat) {
    run_tasks(plan, ws, [&](const Task& t, char* slot) {
      Forward<Ops>::template task<decltype(feat)::value>(p, plan, ws, out_kind, t, slot);
    });
  });
}

template <class Ops>
void run_backward(const FlashAttnBwdParams& p, const Plan& plan, int out_kind, void* ws) {
  with_features(p, [&](auto feat) {
    run_tasks(plan, ws, [&](const Task& t, char* slot) {
      Backward<Ops>::template task<decltype(feat)::value>(p, plan, out_kind, ws, t, slot);
    });
  });
  if (p.group > plan.bwd_task_heads) Backward<Ops>::reduce_group(p, plan, out_kind, ws);
  if (plan.bwd_chunks > 1) Backward<Ops>::reduce_dq(p, plan, out_kind, ws);
}

template <class OpsF32, class OpsBf16, class OpsF64>
void forward_entry(const FlashAttnFwdParams& p0, const Plan& plan, void* ws_base) {
  void* ws = align_workspace(ws_base);
  FlashAttnFwdParams p = p0;
  const int out_kind = out_kind_of(p0.dtype);
  if (plan.stage_mask) {
    const void* unused = nullptr;
    if (plan.compute == flash::Compute::kF32)
      stage_inputs<float>(p0, nullptr, nullptr, plan, ws, &p, &unused, &unused);
    else if (plan.compute == flash::Compute::kF64)
      stage_inputs<double>(p0, nullptr, nullptr, plan, ws, &p, &unused, &unused);
    else
      stage_inputs<uint16_t>(p0, nullptr, nullptr, plan, ws, &p, &unused, &unused);
  }
  if (plan.compute == flash::Compute::kBf16Pairs && !plan.small) stage_vpairs(p, plan, ws);
  p.out = p0.out;
  p.o_batch_stride = p0.o_batch_stride;
  p.o_row_stride = p0.o_row_stride;
  p.o_head_stride = p0.o_head_stride;
  if (plan.small) {
    if (plan.compute == flash::Compute::kF64)
      run_small_forward<OpsF64>(p, plan, ws, out_kind);
    else
      run_small_forward<OpsF32>(p, plan, ws, out_kind);
  } else
#if defined(OP_AVX512_BF16)
  if (amx_compute(plan.compute)) {
    with_amx_parts(plan.compute, [&](auto parts) {
      with_features(p, [&](auto feat) {
        run_waves(
            plan, ws,
            [&](int64_t wave) {
              OP_PROFILE_SCOPE(kPack);
              stage_amx_panels<decltype(parts)::value>(p, plan, ws, wave);
            },
            [&](const Task& t, char* slot) {
              AmxForward::task<decltype(feat)::value, decltype(parts)::value>(p, plan, ws, out_kind, t, slot);
            });
      });
    });
  } else
#endif
  if (plan.compute == flash::Compute::kF64)
    run_forward<OpsF64>(p, plan, ws, out_kind);
  else if (plan.compute == flash::Compute::kBf16Pairs)
    run_forward<OpsBf16>(p, plan, ws, out_kind);
  else
    run_forward<OpsF32>(p, plan, ws, out_kind);
  // Padding rows (past seqused_q): out 0, lse +inf.
  const int64_t ob = out_elem_bytes(out_kind);
  LseRef lse{p.lse, p.lse_dtype == OP_DT_DOUBLE};
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t n = 0; n < p.heads_q; ++n) {
      for (int64_t i = p.seqlen_q[b]; i < p.rows_q[b]; ++i) {
        char* orow = static_cast<char*>(p.out) +
                     (b * p.o_batch_stride + (p.q_start[b] + i) * p.o_row_stride + n * p.o_head_stride) * ob;
        zero_row(out_kind, orow, p.head_dim_v);
        if (p.lse && !p.softmax_sum)
          lse.set(b * p.lse_batch_stride + n * p.lse_head_stride + (p.q_start[b] + i) * p.lse_row_stride, INFINITY);
      }
    }
  }
}

template <class OpsF32, class OpsBf16, class OpsF64>
void backward_entry(const FlashAttnBwdParams& p0, const Plan& plan, void* ws_base) {
  void* ws = align_workspace(ws_base);
  FlashAttnBwdParams p = p0;
  const int out_kind = out_kind_of(p0.dtype);
  if (plan.stage_mask) {
    const void* out_s = p0.out;
    const void* dout_s = p0.dout;
    if (plan.compute == flash::Compute::kF32)
      stage_inputs<float>(p0, p0.out, p0.dout, plan, ws, &p, &out_s, &dout_s);
    else if (plan.compute == flash::Compute::kF64)
      stage_inputs<double>(p0, p0.out, p0.dout, plan, ws, &p, &out_s, &dout_s);
    else
      stage_inputs<uint16_t>(p0, p0.out, p0.dout, plan, ws, &p, &out_s, &dout_s);
    p.out = const_cast<void*>(out_s);
    p.dout = dout_s;
  }
  // dq/dk/dv keep the caller's layout: the kernels write them with the strides of p0.
  if (p.want_dpse) {  // tiles outside the window never write their dS: zero the buffer first
    const int64_t rows = p.batch * p.heads_q * plan.dpse_rows;
    const size_t row_bytes = static_cast<size_t>(plan.dpse_cols) * (plan.compute == flash::Compute::kF64 ? 8 : 4);
    char* base = static_cast<char*>(ws) + plan.dpse_offset;
    op_plugin::parallel_for(0, rows, 64, [&](int64_t r0, int64_t r1) {
      std::memset(base + r0 * row_bytes, 0, static_cast<size_t>(r1 - r0) * row_bytes);
    });
  }
  if (plan.small) {
    if (plan.compute == flash::Compute::kF64) {
      run_small_backward<OpsF64>(p, plan, out_kind, ws);
      if (plan.bwd_chunks > 1) Backward<OpsF64>::reduce_dq(p, plan, out_kind, ws);
    } else {
      run_small_backward<OpsF32>(p, plan, out_kind, ws);
      if (plan.bwd_chunks > 1) Backward<OpsF32>::reduce_dq(p, plan, out_kind, ws);
    }
  } else
#if defined(OP_AVX512_BF16)
  if (amx_compute(plan.compute)) {
    with_amx_parts(plan.compute, [&](auto parts) {
      with_features(p, [&](auto feat) {
        run_waves(
            plan, ws,
            [&](int64_t wave) {
              OP_PROFILE_SCOPE(kPack);
              stage_amx_backward<decltype(parts)::value>(p, plan, ws, wave);
            },
            [&](const Task& t, char* slot) {
              AmxBackward::task<decltype(feat)::value, decltype(parts)::value>(p, plan, out_kind, ws, t, slot);
            });
      });
    });
    OP_PROFILE_SCOPE(kReduce);
    if (p.group > plan.bwd_task_heads) Backward<OpsBf16>::reduce_group(p, plan, out_kind, ws);
    if (plan.bwd_chunks > 1) Backward<OpsBf16>::reduce_dq(p, plan, out_kind, ws);
  } else
#endif
  if (plan.compute == flash::Compute::kF64)
    run_backward<OpsF64>(p, plan, out_kind, ws);
  else if (plan.compute == flash::Compute::kBf16Pairs)
    run_backward<OpsBf16>(p, plan, out_kind, ws);
  else
    run_backward<OpsF32>(p, plan, out_kind, ws);
  // Batches with no query rows produced no task: zero their dq rows (dk/dv rows are covered by
  // the task of any head with keys, or by reduce_group).
  const int64_t ob = out_elem_bytes(out_kind);
  for (int64_t b = 0; b < p.batch; ++b) {
    if (p.seqlen_q[b] > 0 || p.seqlen_kv[b] > 0) continue;
    for (int64_t n = 0; n < p.heads_q; ++n)
      for (int64_t i = 0; i < p.rows_q[b]; ++i)
        zero_row(out_kind, static_cast<char*>(p.dq) + (b * p.dq_batch_stride + (p.q_start[b] + i) * p.dq_row_stride + n * p.dq_head_stride) * ob, p.head_dim);
    if (p.group == plan.bwd_task_heads)  // no reduce_group: dK / dV written by the tasks
      for (int64_t h = 0; h < p.heads_kv; ++h)
        for (int64_t j = 0; j < p.rows_kv[b]; ++j) {
          zero_row(out_kind, static_cast<char*>(p.dk) + (b * p.dk_batch_stride + (p.kv_start[b] + j) * p.dk_row_stride + h * p.dk_head_stride) * ob, p.head_dim);
          zero_row(out_kind, static_cast<char*>(p.dv) + (b * p.dv_batch_stride + (p.kv_start[b] + j) * p.dv_row_stride + h * p.dv_head_stride) * ob, p.head_dim_v);
        }
  }
}

}  // namespace fa
}  // namespace OP_ISA_NS
}  // namespace op_plugin
