// swa_forward (npu_fusion_attention of op-plugin 7.3.0, sparse_mode 0 / 4): stage 1
// (SwaForwardGetWorkspaceSize) validates and maps the call onto the flash attention engine's
// params; stage 2 (SwaForward) runs the engine's forward, which writes attention_out and the
// softmax_max / softmax_sum statistics.
#include "op_plugin/ops/swa_forward.h"

#include <memory>
#include <vector>

#include "kernels/flash_attention/swa_entry.h"

namespace op_plugin {
namespace flash {
namespace {

class SwaForwardExecutor final : public opExecutor {
 public:
  const char* op_name() const override { return "swa_forward"; }
  uint64_t workspace_size() const override { return plan.workspace_bytes; }
  opStatus execute(void* workspace) override {
    kernels().forward(params, plan, workspace);
    return OP_SUCCESS;
  }

  FlashAttnFwdParams params;
  Plan plan;
  swa::Geometry geo;
  std::vector<double> sink;
  PlanStorage storage;
};

}  // namespace
}  // namespace flash
}  // namespace op_plugin

using namespace op_plugin;
using namespace op_plugin::flash;

opStatus SwaForwardGetWorkspaceSize(const opTensor* query, const opTensor* key, const opTensor* value, int64_t head_num,
                                    const char* input_layout, const opTensor* pse, const opTensor* padding_mask,
                                    const opTensor* atten_mask, double scale, double keep_prob, int64_t pre_tockens,
                                    int64_t next_tockens, int64_t inner_precise, const opIntArray* prefix,
                                    const opIntArray* actual_seq_qlen, const opIntArray* actual_seq_kvlen,
                                    int64_t sparse_mode, bool gen_mask_parallel, bool sync, const char* softmax_layout,
                                    const opTensor* sink, uint64_t rng_seed, uint64_t rng_offset,
                                    opTensor* attention_out, opTensor* softmax_max, opTensor* softmax_sum,
                                    opTensor* softmax_out, int64_t* seed, int64_t* offset, int64_t* numels,
                                    uint64_t* workspace_size, opExecutor** executor) {
  // inner_precise, gen_mask_parallel, sync: device scheduling hints; prefix: sparse modes 5/6 only.
  (void)inner_precise;
  (void)prefix;
  (void)gen_mask_parallel;
  (void)sync;
  OP_CHECK_NOT_NULL(workspace_size);
  OP_CHECK_NOT_NULL(executor);
  *executor = nullptr;
  *workspace_size = 0;
  OP_TRY(SwaForwardCheckArguments(query, key, value, head_num, input_layout, pse, padding_mask, atten_mask, scale,
                                  keep_prob, pre_tockens, next_tockens, inner_precise, prefix, actual_seq_qlen,
                                  actual_seq_kvlen, sparse_mode, gen_mask_parallel, sync, softmax_layout, sink,
                                  rng_seed, rng_offset, attention_out, softmax_max, softmax_sum, softmax_out, seed,
                                  offset, numels));

  auto ex = std::make_unique<SwaForwardExecutor>();
  swa::Geometry& g = ex->geo;
  swa::MaskPlan mask;
  OP_TRY(swa::make_call(query, key, value, head_num, input_layout, pse, atten_mask, pre_tockens, next_tockens,
                        actual_seq_qlen, actual_seq_kvlen, sparse_mode, &g, &mask));

  if (sink != nullptr) sinks_to_doubles(sink, &ex->sink);
  FlashAttnFwdParams& p = ex->params;
  swa::fill_params(g, mask, query, key, value, pse, &ex->sink, scale, keep_prob, rng_seed, rng_offset, softmax_max,
                   softmax_sum, &p);
  p.out = attention_out->data;
  set_strides(swa::swa_dims(*attention_out, g.layout, g.heads, g.dim_v), &p.o_batch_stride, &p.o_row_stride,
              &p.o_head_stride);

  const int64_t numel[5] = {op_plugin::numel(*query), op_plugin::numel(*key), op_plugin::numel(*value), 0, 0};
  if (!swa::make_swa_plan(g, p, false, numel, &ex->storage, &ex->plan))
    return fail(OP_ERR_TILING_ERROR, "swa_forward: no valid plan for these sizes");
  // The generator's draw is the caller's: returned as given (0, 0 without dropout).
  *seed = static_cast<int64_t>(keep_prob < 1.0 ? rng_seed : 0);
  *offset = static_cast<int64_t>(keep_prob < 1.0 ? rng_offset : 0);
  *numels = g.numels;
  *workspace_size = ex->plan.workspace_bytes;
  *executor = ex.release();
  return OP_SUCCESS;
}

opStatus SwaForward(void* workspace, uint64_t workspace_size, opExecutor* executor, opStream stream) {
  (void)stream;
  return op_plugin::run_executor(workspace, workspace_size, executor);
}
