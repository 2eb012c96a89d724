// flash_attn_grad: stage 1 (FlashAttnGradGetWorkspaceSize) validates, fills FlashAttnBwdParams
// and freezes the plan; stage 2 (FlashAttnGrad) runs the engine of the active ISA.
#include "op_plugin/ops/flash_attn_grad.h"

#include <cmath>
#include <memory>
#include <vector>

#include "kernels/flash_attention/flash_attention_entry.h"

namespace op_plugin {
namespace flash {
namespace {

class FlashAttnGradExecutor final : public opExecutor {
 public:
  const char* op_name() const override { return "flash_attn_grad"; }
  uint64_t workspace_size() const override { return plan.workspace_bytes; }
  opStatus execute(void* workspace) override {
    kernels().backward(params, plan, workspace);
    return OP_SUCCESS;
  }

  FlashAttnBwdParams params;
  Plan plan;
  Sequences seq;
  PlanStorage storage;
};

}  // namespace
}  // namespace flash
}  // namespace op_plugin

using namespace op_plugin;
using namespace op_plugin::flash;

opStatus FlashAttnGradGetWorkspaceSize(const opTensor* q, const opTensor* k, const opTensor* v, const opTensor* dout,
                                       const opTensor* attn_out, const opTensor* softmax_lse,
                                       const opTensor* cu_seqlens_q, const opTensor* cu_seqlens_kv,
                                       const opTensor* seqused_q, const opTensor* seqused_kv, const opTensor* sinks,
                                       const opTensor* attn_mask, const opTensor* metadata, double softmax_scale,
                                       int64_t mask_mode, int64_t win_left, int64_t win_right, int64_t max_seqlen_q,
                                       int64_t max_seqlen_kv, const char* layout_q, const char* layout_kv,
                                       const char* layout_out, opTensor* dq, opTensor* dk, opTensor* dv,
                                       uint64_t* workspace_size, opExecutor** executor) {
  (void)metadata;  // ignored on CPU (Decision 7)
  OP_CHECK_NOT_NULL(workspace_size);
  OP_CHECK_NOT_NULL(executor);
  *executor = nullptr;
  *workspace_size = 0;
  OP_TRY(FlashAttnGradCheckArguments(q, k, v, dout, attn_out, softmax_lse, cu_seqlens_q, cu_seqlens_kv, seqused_q,
                                     seqused_kv, sinks, attn_mask, metadata, softmax_scale, mask_mode, win_left,
                                     win_right, max_seqlen_q, max_seqlen_kv, layout_q, layout_kv, layout_out, dq, dk,
                                     dv));

  // BNSD in with BSND out, as the forward allows, so autograd can pair any forward call with its grad.
  Layout lq = Layout::kBSND, lo = Layout::kBSND;
  parse_layout(layout_q, &lq);
  parse_layout(layout_out, &lo);
  const opDataType dt = q->dtype;
  const Dims qd = dims_of(*q, lq), kd = dims_of(*k, lq), vd = dims_of(*v, lq);
  const Dims od = dims_of(*attn_out, lo);
  int64_t left, right;
  window_of(mask_mode, win_left, win_right, &left, &right);  // sinks: the lse is authoritative (Decision 6)

  auto ex = std::make_unique<FlashAttnGradExecutor>();
  int64_t B = 0;
  OP_TRY(build_sequences(lq, qd, kd, cu_seqlens_q, cu_seqlens_kv, seqused_q, seqused_kv, &ex->seq, &B));

  FlashAttnBwdParams& p = ex->params;
  fill_operands(*q, *k, *v, qd, kd, vd, B, ex->seq, &p);
  p.out = attn_out->data;
  p.dout = dout->data;
  p.dq = dq->data;
  p.dk = dk->data;
  p.dv = dv->data;
  // dq/dk/dv have the shapes of q/k/v and dout that of attn_out, all contiguous: the same strides
  // (but in size-1 dimensions, where no index reaches them).
  const Dims dqd = dims_of(*dq, lq), dkd = dims_of(*dk, lq), dvd = dims_of(*dv, lq);
  set_strides(od, &p.o_batch_stride, &p.o_row_stride, &p.o_head_stride);
  set_strides(dqd, &p.dq_batch_stride, &p.dq_row_stride, &p.dq_head_stride);
  set_strides(dkd, &p.dk_batch_stride, &p.dk_row_stride, &p.dk_head_stride);
  set_strides(dvd, &p.dv_batch_stride, &p.dv_row_stride, &p.dv_head_stride);
  set_lse(*softmax_lse, lq, &p);
  p.scale = softmax_scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(qd.dim)) : softmax_scale;
  p.win_left = left;
  p.win_right = right;
  p.align = MaskAlign::kBottomRight;

  choose_compute(dt, p.head_dim, p.head_dim_v, &ex->plan);
  ex->plan.kv_batch_rows = lq == Layout::kTND ? 0 : kd.rows;
  ex->plan.q_batch_rows = lq == Layout::kTND ? 0 : qd.rows;
  const int64_t numel[5] = {op_plugin::numel(*q), op_plugin::numel(*k), op_plugin::numel(*v),
                            op_plugin::numel(*attn_out), op_plugin::numel(*dout)};
  if (!make_plan(p, true, numel, op_plugin::max_threads(), &ex->storage, &ex->plan))
    return fail(OP_ERR_TILING_ERROR, "flash_attn_grad: no valid plan for these sizes");
  *workspace_size = ex->plan.workspace_bytes;
  *executor = ex.release();
  return OP_SUCCESS;
}

opStatus FlashAttnGrad(void* workspace, uint64_t workspace_size, opExecutor* executor, opStream stream) {
  (void)stream;
  return op_plugin::run_executor(workspace, workspace_size, executor);
}
