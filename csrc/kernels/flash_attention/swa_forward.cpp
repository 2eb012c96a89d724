// swa_forward (npu_fusion_attention of op-plugin 7.3.0, sparse_mode 0 / 4): stage 1 maps the call
// onto the flash attention engine's params (the registry's checks ran before it); stage 2 runs
// the engine's forward, which writes attention_out and the softmax_max / softmax_sum statistics.
#include "op_plugin/ops/swa_forward.h"

#include <vector>

#include "kernels/flash_attention/swa_entry.h"

namespace op_plugin {
namespace ops {

// On the generated stage functions (op_plugin/ops/swa_forward_stages.inc: the registry's checks,
// descriptor capture, the executor, the int outputs).
struct SwaForwardKernel {
  struct Plan {
    flash::FlashAttnFwdParams params;
    flash::Plan plan;
    flash::swa::Geometry geo;
    std::vector<double> sink;
    flash::PlanStorage storage;
  };

  // inner_precise, gen_mask_parallel, sync: device scheduling hints; prefix: sparse modes 5/6 only.
  static opStatus plan(SwaForwardArgs& a, Plan* ex, WorkspaceLayout* workspace) {
    using namespace flash;  // NOLINT
    swa::Geometry& g = ex->geo;
    swa::MaskPlan mask;
    opIntArray qlen, kvlen;
    OP_TRY(swa::make_call(&a.query, &a.key, &a.value, a.head_num, a.input_layout.c_str(), as_pointer(a.pse),
                          as_pointer(a.atten_mask), a.pre_tockens, a.next_tockens, as_pointer(a.actual_seq_qlen, &qlen),
                          as_pointer(a.actual_seq_kvlen, &kvlen), a.sparse_mode, &g, &mask));

    if (a.sink.has_value()) sinks_to_doubles(&*a.sink, &ex->sink);
    FlashAttnFwdParams& p = ex->params;
    swa::fill_params(g, mask, &a.query, &a.key, &a.value, as_pointer(a.pse), &ex->sink, a.scale, a.keep_prob,
                     a.rng_seed, a.rng_offset, &a.softmax_max, &a.softmax_sum, &p);
    p.out = a.attention_out.data;
    set_strides(swa::swa_dims(a.attention_out, g.layout, g.heads, g.dim_v), &p.o_batch_stride, &p.o_row_stride,
                &p.o_head_stride);

    const int64_t numel[5] = {op_plugin::numel(a.query), op_plugin::numel(a.key), op_plugin::numel(a.value), 0, 0};
    if (!swa::make_swa_plan(g, p, false, numel, &ex->storage, &ex->plan))
      return fail(OP_ERR_TILING_ERROR, "swa_forward: no valid plan for these sizes");
    // The generator's draw is the caller's: returned as given (0, 0 without dropout).
    a.seed = static_cast<int64_t>(a.keep_prob < 1.0 ? a.rng_seed : 0);
    a.offset = static_cast<int64_t>(a.keep_prob < 1.0 ? a.rng_offset : 0);
    a.numels = g.numels;
    workspace->reserve(ex->plan.workspace_bytes);
    return OP_SUCCESS;
  }

  template <class T>  // one entry for every dtype: the engine's kernel table dispatches on it
  static opStatus run(const SwaForwardArgs&, const Plan& ex, void* workspace) {
    flash::kernels().forward(ex.params, ex.plan, workspace);
    return OP_SUCCESS;
  }
};

}  // namespace ops
}  // namespace op_plugin

#include "op_plugin/ops/swa_forward_stages.inc"
