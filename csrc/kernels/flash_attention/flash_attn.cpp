// flash_attn: stage 1 (FlashAttnGetWorkspaceSize) validates, fills FlashAttnFwdParams and
// freezes the plan in an executor; stage 2 (FlashAttn) runs the engine of the active ISA.
#include "op_plugin/ops/flash_attn.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/flash_attention/flash_attention_entry.h"

namespace op_plugin {
namespace flash {
namespace {

class FlashAttnExecutor final : public opExecutor {
 public:
  const char* op_name() const override { return "flash_attn"; }
  uint64_t workspace_size() const override { return plan.workspace_bytes; }
  opStatus execute(void* workspace) override {
    kernels().forward(params, plan, workspace);
    // return_softmax_lse=False: the lse output is a 1-element zero tensor (SPEC §1.2).
    if (lse_placeholder.data != nullptr)
      std::memset(lse_placeholder.data, 0, static_cast<size_t>(numel(lse_placeholder)) * dtype_size(lse_placeholder.dtype));
    return OP_SUCCESS;
  }

  opTensor lse_placeholder{};  // set when return_softmax_lse is false
  FlashAttnFwdParams params;
  Plan plan;
  Sequences seq;
  std::vector<double> sinks;
  PlanStorage storage;
};

}  // namespace
}  // namespace flash
}  // namespace op_plugin

using namespace op_plugin;
using namespace op_plugin::flash;

opStatus FlashAttnGetWorkspaceSize(const opTensor* q, const opTensor* k, const opTensor* v, const opTensor* block_table,
                                   const opTensor* cu_seqlens_q, const opTensor* cu_seqlens_kv,
                                   const opTensor* seqused_q, const opTensor* seqused_kv, const opTensor* sinks,
                                   const opTensor* attn_mask, const opTensor* metadata, double softmax_scale,
                                   int64_t mask_mode, int64_t win_left, int64_t win_right, int64_t max_seqlen_q,
                                   int64_t max_seqlen_kv, const char* layout_q, const char* layout_kv,
                                   const char* layout_out, bool return_softmax_lse, opTensor* attn_out,
                                   opTensor* softmax_lse, uint64_t* workspace_size, opExecutor** executor) {
  (void)metadata;  // a device schedule: length-checked by the registry, ignored on CPU (Decision 7)
  OP_CHECK_NOT_NULL(workspace_size);
  OP_CHECK_NOT_NULL(executor);
  *executor = nullptr;
  *workspace_size = 0;
  OP_TRY(FlashAttnCheckArguments(q, k, v, block_table, cu_seqlens_q, cu_seqlens_kv, seqused_q, seqused_kv, sinks,
                                 attn_mask, metadata, softmax_scale, mask_mode, win_left, win_right, max_seqlen_q,
                                 max_seqlen_kv, layout_q, layout_kv, layout_out, return_softmax_lse, attn_out,
                                 softmax_lse));

  Layout lq = Layout::kBSND, lo = Layout::kBSND;
  parse_layout(layout_q, &lq);
  parse_layout(layout_out, &lo);
  const opDataType dt = q->dtype;
  const Dims qd = dims_of(*q, lq), kd = dims_of(*k, lq), vd = dims_of(*v, lq);
  int64_t left, right;
  window_of(mask_mode, win_left, win_right, &left, &right);

  auto ex = std::make_unique<FlashAttnExecutor>();
  int64_t B = 0;
  OP_TRY(build_sequences(lq, qd, kd, cu_seqlens_q, cu_seqlens_kv, seqused_q, seqused_kv, &ex->seq, &B));
  const int64_t Dv = vd.dim;
  const Dims od = dims_of(*attn_out, lo);
  if (!return_softmax_lse) ex->lse_placeholder = *softmax_lse;

  FlashAttnFwdParams& p = ex->params;
  fill_operands(*q, *k, *v, qd, kd, vd, B, ex->seq, &p);
  p.out = attn_out->data;
  set_strides(od, &p.o_batch_stride, &p.o_row_stride, &p.o_head_stride);
  if (return_softmax_lse) set_lse(*softmax_lse, lq, &p);
  p.scale = softmax_scale;  // forward: used as given (default 1.0)
  p.win_left = left;
  p.win_right = right;
  p.align = MaskAlign::kBottomRight;
  if (sinks != nullptr) {
    sinks_to_doubles(sinks, &ex->sinks);
    p.sinks = ex->sinks.data();
  }

  choose_compute(dt, p.head_dim, Dv, &ex->plan);
  ex->plan.kv_batch_rows = lq == Layout::kTND ? 0 : kd.rows;
  ex->plan.q_batch_rows = lq == Layout::kTND ? 0 : qd.rows;
  const int64_t numel[5] = {op_plugin::numel(*q), op_plugin::numel(*k), op_plugin::numel(*v), 0, 0};
  if (!make_plan(p, false, numel, op_plugin::max_threads(), &ex->storage, &ex->plan))
    return fail(OP_ERR_TILING_ERROR, "flash_attn: no valid plan for these sizes");
  *workspace_size = ex->plan.workspace_bytes;
  *executor = ex.release();
  return OP_SUCCESS;
}

opStatus FlashAttn(void* workspace, uint64_t workspace_size, opExecutor* executor, opStream stream) {
  (void)stream;
  return op_plugin::run_executor(workspace, workspace_size, executor);
}
