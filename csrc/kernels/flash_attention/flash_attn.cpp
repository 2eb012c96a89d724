// flash_attn: stage 1 fills FlashAttnFwdParams and freezes the plan (the registry's checks ran
// before it); stage 2 runs the engine of the active ISA (after gathering a paged KV cache the
// plan does not read in place).
#include "op_plugin/ops/flash_attn.h"

#include <cstring>
#include <vector>

#include "kernels/flash_attention/flash_attention_entry.h"
#include "kernels/flash_attention/flash_attention_paged.h"

namespace op_plugin {
namespace ops {

// On the generated stage functions (op_plugin/ops/flash_attn_stages.inc: the registry's checks,
// descriptor capture, the executor): the plan holds what the engine reads.
struct FlashAttnKernel {
  struct Plan {
    flash::FlashAttnFwdParams params;
    flash::Plan plan;
    flash::Sequences seq;
    std::vector<double> sinks;
    flash::PlanStorage storage;
    opTensor lse_placeholder{};  // set when return_softmax_lse is false
    bool gather = false;         // a paged cache the engine reads from a packed copy
    flash::PagedKv paged_kv;
    uint64_t gather_offset = 0;  // of the packed copies (after the engine's workspace)
  };

  static opStatus plan(FlashAttnArgs& a, Plan* ex, WorkspaceLayout* workspace) {
    using namespace flash;  // NOLINT
    // metadata: a device schedule, length-checked by the registry, ignored on CPU (Decision 7)
    Layout lq = Layout::kBSND, lo = Layout::kBSND;
    parse_layout(a.layout_q.c_str(), &lq);
    parse_layout(a.layout_out.c_str(), &lo);
    const opDataType dt = a.q.dtype;
    const bool paged = is_paged_layout(a.layout_kv.c_str());
    const bool bbnd = a.layout_kv == "PA_BBND";
    const Dims qd = dims_of(a.q, lq);
    Dims kd = paged ? paged_kv_dims(a.k, bbnd, *a.block_table, lq == Layout::kTND ? 0 : qd.batch) : dims_of(a.k, lq);
    Dims vd = paged ? kd : dims_of(a.v, lq);
    int64_t left, right;
    window_of(a.mask_mode, a.win_left, a.win_right, &left, &right);

    int64_t B = 0;
    OP_TRY(build_sequences(lq, qd, kd, as_pointer(a.cu_seqlens_q), as_pointer(a.cu_seqlens_kv),
                           as_pointer(a.seqused_q), as_pointer(a.seqused_kv), &ex->seq, &B));
    if (paged) {  // planned as the packed copy; read_paged_in_place below if the plan allows
      OP_TRY(plan_paged(a.k, a.v, bbnd, *a.block_table, dt, &ex->seq, &ex->paged_kv));
      kd = packed_kv_dims(ex->paged_kv, ex->paged_kv.k);
      vd = packed_kv_dims(ex->paged_kv, ex->paged_kv.v);
    }
    const Dims od = dims_of(a.attn_out, lo);
    if (!a.return_softmax_lse) ex->lse_placeholder = a.softmax_lse;

    FlashAttnFwdParams& p = ex->params;
    fill_operands(a.q, a.k, a.v, qd, kd, vd, B, ex->seq, &p);
    p.out = a.attn_out.data;
    set_strides(od, &p.o_batch_stride, &p.o_row_stride, &p.o_head_stride);
    if (a.return_softmax_lse) set_lse(a.softmax_lse, lq, &p);
    p.scale = a.softmax_scale;  // forward: used as given (default 1.0)
    p.win_left = left;
    p.win_right = right;
    p.align = MaskAlign::kBottomRight;
    if (a.sinks.has_value()) {
      sinks_to_doubles(&*a.sinks, &ex->sinks);
      p.sinks = ex->sinks.data();
    }

    const int64_t kv_numel[2] = {kd.heads * kd.rows * kd.dim, vd.heads * vd.rows * vd.dim};
    const int64_t numel[5] = {op_plugin::numel(a.q), paged ? kv_numel[0] : op_plugin::numel(a.k),
                              paged ? kv_numel[1] : op_plugin::numel(a.v), 0, 0};
    // a packed paged copy is addressed as TND is (no kv rows per batch)
    const int64_t kv_batch_rows = paged ? 0 : kd.rows;
    if (!plan_engine(dt, lq == Layout::kTND, qd.rows, kv_batch_rows, p, false, numel, &ex->storage, &ex->plan))
      return fail(OP_ERR_TILING_ERROR, "flash_attn: no valid plan for these sizes");
    workspace->reserve(ex->plan.workspace_bytes);  // the engine's, at the base
    if (paged && ex->plan.small) {
      read_paged_in_place(ex->paged_kv, &ex->seq, &p);
    } else if (paged) {
      ex->gather = true;
      ex->gather_offset =
          workspace->reserve(ex->paged_kv.k_bytes + ex->paged_kv.v_bytes + 2 * WorkspaceLayout::kAlignment);
    }
    return OP_SUCCESS;
  }

  template <class T>  // one entry for every dtype: the engine's kernel table dispatches on it
  static opStatus run(const FlashAttnArgs&, const Plan& ex, void* workspace) {
    if (ex.gather) {
      char* copies = static_cast<char*>(align_workspace(static_cast<char*>(workspace) + ex.gather_offset));
      char* v_copy = copies + (ex.paged_kv.k_bytes + WorkspaceLayout::kAlignment - 1) / WorkspaceLayout::kAlignment *
                                  WorkspaceLayout::kAlignment;
      flash::gather_paged(ex.paged_kv, ex.seq, copies, v_copy);
      flash::FlashAttnFwdParams p = ex.params;
      p.k = copies;
      p.v = v_copy;
      flash::kernels().forward(p, ex.plan, workspace);
    } else {
      flash::kernels().forward(ex.params, ex.plan, workspace);
    }
    // return_softmax_lse=False: the lse output is a 1-element zero tensor (SPEC §1.2).
    const opTensor& lse = ex.lse_placeholder;
    if (lse.data != nullptr) std::memset(lse.data, 0, static_cast<size_t>(numel(lse)) * dtype_size(lse.dtype));
    return OP_SUCCESS;
  }
};

}  // namespace ops
}  // namespace op_plugin

#include "op_plugin/ops/flash_attn_stages.inc"
