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
  OP_CHECK_NOT_NULL(q);
  OP_CHECK_NOT_NULL(k);
  OP_CHECK_NOT_NULL(v);
  OP_CHECK_NOT_NULL(dout);
  OP_CHECK_NOT_NULL(attn_out);
  OP_CHECK_NOT_NULL(softmax_lse);
  OP_CHECK_NOT_NULL(dq);
  OP_CHECK_NOT_NULL(dk);
  OP_CHECK_NOT_NULL(dv);
  OP_CHECK_NOT_NULL(workspace_size);
  OP_CHECK_NOT_NULL(executor);
  *executor = nullptr;
  *workspace_size = 0;

  Layout lq, lkv, lo;
  OP_CHECK(parse_layout(layout_q, &lq), "layout_q only supports BSND, TND, BNSD, but got ", layout_q ? layout_q : "(null)", ".");
  // BNSD in with BSND out, as the forward allows, so autograd can pair any forward call with its grad.
  OP_CHECK(parse_layout(layout_kv, &lkv) && parse_layout(layout_out, &lo) && lkv == lq &&
               (lo == lq || (lq == Layout::kBNSD && lo == Layout::kBSND)),
           "layout_q(", layout_q, "), layout_kv(", layout_kv ? layout_kv : "(null)", "), layout_out(",
           layout_out ? layout_out : "(null)", ") must be the same (BNSD may give BSND out).");
  OP_CHECK(is_float_dtype(q->dtype), "q must be float16, bfloat16, float32 or float64, but got ", dtype_name(q->dtype));
  const opDataType dt = q->dtype;
  const int rank = layout_rank(lq);
  opStatus st;
  const struct { const opTensor* t; const char* name; } ins[] = {
      {q, "q"}, {k, "k"}, {v, "v"}, {dout, "dout"}, {attn_out, "attn_out"}, {dq, "dq"}, {dk, "dk"}, {dv, "dv"}};
  for (const auto& in : ins)
    if ((st = check_tensor(in.t, in.name, dt, rank)) != OP_SUCCESS) return st;
  const Dims qd = dims_of(*q, lq), kd = dims_of(*k, lq), vd = dims_of(*v, lq);
  OP_CHECK(qd.dim == kd.dim, "D dim of k (", kd.dim, ") must equal D dim of q (", qd.dim, ").");
  OP_CHECK(vd.dim <= qd.dim, "D dim of v must not exceed D dim of q.");
  OP_CHECK(kd.batch == qd.batch, "batch of k (", kd.batch, ") must equal batch of q (", qd.batch, ").");
  OP_CHECK(vd.batch == kd.batch && vd.rows == kd.rows && vd.heads == kd.heads,
           "v must match k in batch, sequence and head dims.");
  OP_CHECK(qd.heads % kd.heads == 0, "N dim of q must be divisible by N dim of k.");
  const Dims od = dims_of(*attn_out, lo), dod = dims_of(*dout, lo);
  for (const Dims& o : {od, dod})
    OP_CHECK(o.batch == qd.batch && o.rows == qd.rows && o.heads == qd.heads && o.dim == vd.dim,
             "dout and attn_out must have the shape of q with the last dim Dv (", vd.dim, ") in layout_out.");
  for (int d = 0; d < rank; ++d) {
    OP_CHECK(dout->shape[d] == attn_out->shape[d], "dout and attn_out must have the same shape.");
    OP_CHECK(dq->shape[d] == q->shape[d] && dk->shape[d] == k->shape[d] && dv->shape[d] == v->shape[d],
             "dq, dk, dv must have the shapes of q, k, v.");
  }
  if ((st = check_max_seqlen(max_seqlen_q, "max_seqlen_q")) != OP_SUCCESS) return st;
  if ((st = check_max_seqlen(max_seqlen_kv, "max_seqlen_kv")) != OP_SUCCESS) return st;
  int64_t left, right;
  if ((st = resolve_mask(mask_mode, win_left, win_right, attn_mask, &left, &right)) != OP_SUCCESS) return st;
  if ((st = check_sinks(sinks, qd.heads)) != OP_SUCCESS) return st;  // lse is authoritative (Decision 6)
  OP_CHECK(std::isfinite(softmax_scale), "softmax_scale must be finite, but got ", softmax_scale);

  auto ex = std::make_unique<FlashAttnGradExecutor>();
  int64_t B = 0;
  if ((st = build_sequences(lq, qd, kd, cu_seqlens_q, cu_seqlens_kv, seqused_q, seqused_kv, &ex->seq, &B)) != OP_SUCCESS)
    return st;
  const int64_t N1 = qd.heads;
  OP_CHECK(softmax_lse->dtype == OP_DT_FLOAT || (dt == OP_DT_DOUBLE && softmax_lse->dtype == OP_DT_DOUBLE),
           "softmax_lse must be float32, but got ", dtype_name(softmax_lse->dtype));
  if (lq == Layout::kTND) {
    OP_CHECK(softmax_lse->ndim == 2, "softmax_lse must be 2D (N, T) when layout is TND.");
    if ((st = check_shape(softmax_lse, "softmax_lse", {N1, qd.rows})) != OP_SUCCESS) return st;
  } else {
    if ((st = check_shape(softmax_lse, "softmax_lse", {B, N1, qd.rows})) != OP_SUCCESS) return st;
  }
  OP_CHECK(softmax_lse->data != nullptr, "softmax_lse data must not be a null pointer");

  FlashAttnBwdParams& p = ex->params;
  p.q = q->data;
  p.k = k->data;
  p.v = v->data;
  p.out = attn_out->data;
  p.dout = dout->data;
  p.dq = dq->data;
  p.dk = dk->data;
  p.dv = dv->data;
  p.dtype = dt;
  p.batch = B;
  p.heads_q = N1;
  p.heads_kv = kd.heads;
  p.group = N1 / kd.heads;
  p.head_dim = qd.dim;
  p.head_dim_v = vd.dim;
  p.max_seqlen_q = ex->seq.max_q;
  p.max_seqlen_kv = ex->seq.max_kv;
  // dq/dk/dv share the strides of q/k/v (all are contiguous in the same layout), dout those of
  // attn_out.
  const Dims dqd = dims_of(*dq, lq), dkd = dims_of(*dk, lq), dvd = dims_of(*dv, lq);
  OP_CHECK(od.batch_stride == dod.batch_stride && od.row_stride == dod.row_stride && od.head_stride == dod.head_stride,
           "dout and attn_out must have the same strides");
  OP_CHECK(dqd.batch_stride == qd.batch_stride && dqd.row_stride == qd.row_stride && dqd.head_stride == qd.head_stride &&
               dkd.batch_stride == kd.batch_stride && dkd.row_stride == kd.row_stride &&
               dkd.head_stride == kd.head_stride && dvd.batch_stride == vd.batch_stride &&
               dvd.row_stride == vd.row_stride && dvd.head_stride == vd.head_stride,
           "dq, dk, dv must have the strides of q, k, v");
  set_strides(qd, &p.q_batch_stride, &p.q_row_stride, &p.q_head_stride);
  set_strides(kd, &p.k_batch_stride, &p.k_row_stride, &p.k_head_stride);
  set_strides(vd, &p.v_batch_stride, &p.v_row_stride, &p.v_head_stride);
  set_strides(od, &p.o_batch_stride, &p.o_row_stride, &p.o_head_stride);
  set_strides(dqd, &p.dq_batch_stride, &p.dq_row_stride, &p.dq_head_stride);
  set_strides(dkd, &p.dk_batch_stride, &p.dk_row_stride, &p.dk_head_stride);
  set_strides(dvd, &p.dv_batch_stride, &p.dv_row_stride, &p.dv_head_stride);
  p.lse = softmax_lse->data;
  p.lse_dtype = softmax_lse->dtype;
  if (lq == Layout::kTND) {
    p.lse_batch_stride = 0;
    p.lse_head_stride = softmax_lse->strides[0];
    p.lse_row_stride = softmax_lse->strides[1];
  } else {
    p.lse_batch_stride = softmax_lse->strides[0];
    p.lse_head_stride = softmax_lse->strides[1];
    p.lse_row_stride = softmax_lse->strides[2];
  }
  p.q_start = ex->seq.q_start.data();
  p.kv_start = ex->seq.kv_start.data();
  p.seqlen_q = ex->seq.seqlen_q.data();
  p.seqlen_kv = ex->seq.seqlen_kv.data();
  p.rows_q = ex->seq.rows_q.data();
  p.rows_kv = ex->seq.rows_kv.data();
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
