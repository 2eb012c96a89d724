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
  (void)metadata;  // a device schedule: length-checked by the binding, ignored on CPU (Decision 7)
  OP_CHECK_NOT_NULL(q);
  OP_CHECK_NOT_NULL(k);
  OP_CHECK_NOT_NULL(v);
  OP_CHECK_NOT_NULL(attn_out);
  OP_CHECK_NOT_NULL(softmax_lse);
  OP_CHECK_NOT_NULL(workspace_size);
  OP_CHECK_NOT_NULL(executor);
  *executor = nullptr;
  *workspace_size = 0;

  Layout lq, lkv, lo;
  OP_CHECK(parse_layout(layout_q, &lq), "layout_q only supports BSND, TND, BNSD, but got ", layout_q ? layout_q : "(null)", ".");
  OP_CHECK(parse_layout(layout_kv, &lkv) && lkv == lq, "layout_q(", layout_q, "), layout_kv(", layout_kv ? layout_kv : "(null)",
           ") must be the same.");
  OP_CHECK(parse_layout(layout_out, &lo) && (lo == lq || (lq == Layout::kBNSD && lo == Layout::kBSND)),
           "layout_out must equal layout_q (or be BSND when layout_q is BNSD), but got layout_q(", layout_q,
           "), layout_out(", layout_out ? layout_out : "(null)", ").");
  OP_CHECK(block_table == nullptr, "block_table (paged KV cache) is not supported by the CPU flash_attn");
  OP_CHECK(is_float_dtype(q->dtype), "q must be float16, bfloat16, float32 or float64, but got ", dtype_name(q->dtype));
  const opDataType dt = q->dtype;
  const int rank = layout_rank(lq);
  opStatus st;
  if ((st = check_tensor(q, "q", dt, rank)) != OP_SUCCESS) return st;
  if ((st = check_tensor(k, "k", dt, rank)) != OP_SUCCESS) return st;
  if ((st = check_tensor(v, "v", dt, rank)) != OP_SUCCESS) return st;
  if ((st = check_tensor(attn_out, "attn_out", dt, layout_rank(lo))) != OP_SUCCESS) return st;
  const Dims qd = dims_of(*q, lq), kd = dims_of(*k, lq), vd = dims_of(*v, lq);
  OP_CHECK(qd.dim == kd.dim, "D dim of k (", kd.dim, ") must equal D dim of q (", qd.dim, ").");
  OP_CHECK(kd.batch == qd.batch, "batch of k (", kd.batch, ") must equal batch of q (", qd.batch, ").");
  OP_CHECK(vd.batch == kd.batch && vd.rows == kd.rows && vd.heads == kd.heads,
           "v must match k in batch, sequence and head dims.");
  OP_CHECK(qd.heads % kd.heads == 0, "N dim of q must be divisible by N dim of k.");
  if ((st = check_max_seqlen(max_seqlen_q, "max_seqlen_q")) != OP_SUCCESS) return st;
  if ((st = check_max_seqlen(max_seqlen_kv, "max_seqlen_kv")) != OP_SUCCESS) return st;
  int64_t left, right;
  if ((st = resolve_mask(mask_mode, win_left, win_right, attn_mask, &left, &right)) != OP_SUCCESS) return st;
  if ((st = check_sinks(sinks, qd.heads)) != OP_SUCCESS) return st;
  OP_CHECK(std::isfinite(softmax_scale), "softmax_scale must be finite, but got ", softmax_scale);

  auto ex = std::make_unique<FlashAttnExecutor>();
  int64_t B = 0;
  if ((st = build_sequences(lq, qd, kd, cu_seqlens_q, cu_seqlens_kv, seqused_q, seqused_kv, &ex->seq, &B)) != OP_SUCCESS)
    return st;
  const int64_t N1 = qd.heads, Dv = vd.dim;
  const Dims od = dims_of(*attn_out, lo);
  if (lq == Layout::kTND) {
    if ((st = check_shape(attn_out, "attn_out", {qd.rows, N1, Dv})) != OP_SUCCESS) return st;
  } else if (lo == Layout::kBSND) {
    if ((st = check_shape(attn_out, "attn_out", {B, qd.rows, N1, Dv})) != OP_SUCCESS) return st;
  } else {
    if ((st = check_shape(attn_out, "attn_out", {B, N1, qd.rows, Dv})) != OP_SUCCESS) return st;
  }
  const opDataType lse_dt = dt == OP_DT_DOUBLE ? OP_DT_DOUBLE : OP_DT_FLOAT;
  if (return_softmax_lse) {
    OP_CHECK(softmax_lse->dtype == OP_DT_FLOAT || softmax_lse->dtype == lse_dt,
             "softmax_lse must be float32, but got ", dtype_name(softmax_lse->dtype));
    if (lq == Layout::kTND) {
      if ((st = check_shape(softmax_lse, "softmax_lse", {N1, qd.rows})) != OP_SUCCESS) return st;
    } else {
      if ((st = check_shape(softmax_lse, "softmax_lse", {B, N1, qd.rows})) != OP_SUCCESS) return st;
    }
    OP_CHECK(softmax_lse->data != nullptr, "softmax_lse data must not be a null pointer");
  } else {
    ex->lse_placeholder = *softmax_lse;
  }

  FlashAttnFwdParams& p = ex->params;
  p.q = q->data;
  p.k = k->data;
  p.v = v->data;
  p.out = attn_out->data;
  p.dtype = dt;
  p.batch = B;
  p.heads_q = N1;
  p.heads_kv = kd.heads;
  p.group = N1 / kd.heads;
  p.head_dim = qd.dim;
  p.head_dim_v = Dv;
  p.max_seqlen_q = ex->seq.max_q;
  p.max_seqlen_kv = ex->seq.max_kv;
  set_strides(qd, &p.q_batch_stride, &p.q_row_stride, &p.q_head_stride);
  set_strides(kd, &p.k_batch_stride, &p.k_row_stride, &p.k_head_stride);
  set_strides(vd, &p.v_batch_stride, &p.v_row_stride, &p.v_head_stride);
  set_strides(od, &p.o_batch_stride, &p.o_row_stride, &p.o_head_stride);
  if (return_softmax_lse) {
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
  }
  p.q_start = ex->seq.q_start.data();
  p.kv_start = ex->seq.kv_start.data();
  p.seqlen_q = ex->seq.seqlen_q.data();
  p.seqlen_kv = ex->seq.seqlen_kv.data();
  p.rows_q = ex->seq.rows_q.data();
  p.rows_kv = ex->seq.rows_kv.data();
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
