// flash_attn_grad: stage 1 fills FlashAttnBwdParams and freezes the plan (the registry's checks
// ran before it); stage 2 runs the engine of the active ISA.
#include "op_plugin/ops/flash_attn_grad.h"

#include <cmath>

#include "kernels/flash_attention/flash_attention_entry.h"

namespace op_plugin {
namespace ops {

// On the generated stage functions (op_plugin/ops/flash_attn_grad_stages.inc).
struct FlashAttnGradKernel {
  struct Plan {
    flash::FlashAttnBwdParams params;
    flash::Plan plan;
    flash::Sequences seq;
    flash::PlanStorage storage;
  };

  static opStatus plan(FlashAttnGradArgs& a, Plan* ex, WorkspaceLayout* workspace) {
    using namespace flash;  // NOLINT
    // metadata: ignored on CPU (Decision 7). BNSD in with BSND out, as the forward allows, so
    // autograd can pair any forward call with its grad.
    Layout lq = Layout::kBSND, lo = Layout::kBSND;
    parse_layout(a.layout_q.c_str(), &lq);
    parse_layout(a.layout_out.c_str(), &lo);
    const opDataType dt = a.q.dtype;
    const Dims qd = dims_of(a.q, lq), kd = dims_of(a.k, lq), vd = dims_of(a.v, lq);
    const Dims od = dims_of(a.attn_out, lo);
    int64_t left, right;
    window_of(a.mask_mode, a.win_left, a.win_right, &left, &right);  // sinks: the lse is authoritative (Decision 6)

    int64_t B = 0;
    OP_TRY(build_sequences(lq, qd, kd, as_pointer(a.cu_seqlens_q), as_pointer(a.cu_seqlens_kv),
                           as_pointer(a.seqused_q), as_pointer(a.seqused_kv), &ex->seq, &B));

    FlashAttnBwdParams& p = ex->params;
    fill_operands(a.q, a.k, a.v, qd, kd, vd, B, ex->seq, &p);
    p.out = a.attn_out.data;
    p.dout = a.dout.data;
    p.dq = a.dq.data;
    p.dk = a.dk.data;
    p.dv = a.dv.data;
    // dq/dk/dv have the shapes of q/k/v and dout that of attn_out, all contiguous: the same strides
    // (but in size-1 dimensions, where no index reaches them).
    const Dims dqd = dims_of(a.dq, lq), dkd = dims_of(a.dk, lq), dvd = dims_of(a.dv, lq);
    set_strides(od, &p.o_batch_stride, &p.o_row_stride, &p.o_head_stride);
    set_strides(dqd, &p.dq_batch_stride, &p.dq_row_stride, &p.dq_head_stride);
    set_strides(dkd, &p.dk_batch_stride, &p.dk_row_stride, &p.dk_head_stride);
    set_strides(dvd, &p.dv_batch_stride, &p.dv_row_stride, &p.dv_head_stride);
    set_lse(a.softmax_lse, lq, &p);
    p.scale = a.softmax_scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(qd.dim)) : a.softmax_scale;
    p.win_left = left;
    p.win_right = right;
    p.align = MaskAlign::kBottomRight;

    const int64_t numel[5] = {op_plugin::numel(a.q), op_plugin::numel(a.k), op_plugin::numel(a.v),
                              op_plugin::numel(a.attn_out), op_plugin::numel(a.dout)};
    if (!plan_engine(dt, lq == Layout::kTND, qd.rows, kd.rows, p, true, numel, &ex->storage, &ex->plan))
      return fail(OP_ERR_TILING_ERROR, "flash_attn_grad: no valid plan for these sizes");
    workspace->reserve(ex->plan.workspace_bytes);
    return OP_SUCCESS;
  }

  template <class T>  // one entry for every dtype: the engine's kernel table dispatches on it
  static opStatus run(const FlashAttnGradArgs&, const Plan& ex, void* workspace) {
    flash::kernels().backward(ex.params, ex.plan, workspace);
    return OP_SUCCESS;
  }
};

}  // namespace ops
}  // namespace op_plugin

#include "op_plugin/ops/flash_attn_grad_stages.inc"
