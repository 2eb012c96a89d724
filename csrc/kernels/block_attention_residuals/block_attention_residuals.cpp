// BlockAttentionResiduals (forward), SPEC section 4:
//   v[t, i] = block_res[t, i] (i < N), partial_block[t] (i = N)
//   inv[t, i] = 1 / sqrt(mean_h v^2 + eps) ;  s[t, i] = inv * sum_h v * norm_weight * proj_weight
//   probs[t] = softmax(s[t]) ;  hidden[t, h] = sum_i probs[t, i] * v[t, i, h]
//
// Per token t, pass 1 streams the N + 1 rows of v from memory once (norm_dot: sum of squares and
// the dot with sw = norm_weight * proj_weight, together); pass 2 (mix) re-reads them from L2
// ((N + 1) * H * 4 bytes = 147 KiB at N = 8, H = 4096 fp32, L2 = 1 MiB) and writes hidden once.
// Tokens are independent: parallel over T, no reduction, any split gives the same bits.
//
// Workspace: sw[H] in acc_t.
#include <cmath>
#include <new>

#include "bar_driver.h"
#include "bar_plan.h"
#include "bar_rows.h"
#include "op_plugin/ops/block_attention_residuals.h"

namespace op_plugin {
namespace bar {
namespace {

constexpr const char* kOp = "BlockAttentionResiduals";

struct FwdLayout {
  uint64_t sw = 0;     // acc_t[H]
  uint64_t bytes = 0;  // total
};

template <class T>
void forward(const FwdParams& p, const Plan& plan, const FwdLayout& layout, void* workspace) {
  using A = acc_t<T>;
  const int64_t N = p.shape.N, H = p.shape.H, R = N + 1;
  const T* partial_block = static_cast<const T*>(p.partial_block);
  const T* block_res = static_cast<const T*>(p.block_res);
  T* hidden = static_cast<T*>(p.hidden_states);
  A* inv_norm = static_cast<A*>(p.inv_norm);
  A* probs = static_cast<A*>(p.probs);

  A* sw = workspace_at<A>(workspace, layout.sw);
  fill_sw(static_cast<const T*>(p.norm_weight), static_cast<const T*>(p.proj_weight), H, sw);

  const RowKernels<T>& kernels = row_kernels<T>(plan.isa);
  const A eps = static_cast<A>(p.norm_eps);
  const A h_count = static_cast<A>(H);  // H = 0: mean = 0/0 = NaN, as torch's mean of nothing
  parallel_for(0, p.shape.T, plan.rows_per_chunk, [&](int64_t t_begin, int64_t t_end) {
    for (int64_t t = t_begin; t < t_end; ++t) {
      const RowSet<T> rows = token_rows(block_res, partial_block, t, N, H);
      A* inv = inv_norm + t * R;
      A* pr = probs + t * R;  // holds the logits s until the softmax
      for (int64_t i = 0; i < R; ++i) {
        A sumsq, dot;
        kernels.norm_dot(rows.row(i), sw, H, &sumsq, &dot);
        inv[i] = A(1) / std::sqrt(sumsq / h_count + eps);
        pr[i] = H > 0 ? dot * inv[i] : A(0);  // an empty sum is 0, whatever inv is
      }
      softmax_inplace(pr, R);
      kernels.mix(MixArgs<T>{rows, pr, hidden + t * H, plan.stream_stores});
    }
  });
}

class FwdExecutor final : public opExecutor {
 public:
  FwdExecutor(const opTensor* const (&tensors)[7], const FwdParams& params, const Plan& plan,
              const FwdLayout& layout)
      : params_(params), plan_(plan), layout_(layout) {
    for (int k = 0; k < 7; ++k) tensors_[k] = *tensors[k];
  }
  const char* op_name() const override { return kOp; }
  uint64_t workspace_size() const override { return layout_.bytes; }
  opStatus execute(void* workspace) override {
    dispatch_floating(params_.dtype, [&](auto tag) {
      forward<decltype(tag)>(params_, plan_, layout_, workspace);
    });
    return OP_SUCCESS;
  }

 private:
  // partial_block, block_res, proj_weight, norm_weight, hidden_states, inv_norm, probs, as given
  // to stage 1 (params_ points into their memory).
  opTensor tensors_[7];
  FwdParams params_;
  Plan plan_;
  FwdLayout layout_;
};

}  // namespace
}  // namespace bar
}  // namespace op_plugin

opStatus BlockAttentionResidualsGetWorkspaceSize(const opTensor* partial_block,
                                                 const opTensor* block_res,
                                                 const opTensor* proj_weight,
                                                 const opTensor* norm_weight,
                                                 int64_t valid_block_num, double norm_eps,
                                                 opTensor* hidden_states, opTensor* inv_norm,
                                                 opTensor* probs, uint64_t* workspace_size,
                                                 opExecutor** executor) {
  using namespace op_plugin;
  using namespace op_plugin::bar;
  OP_CHECK_NOT_NULL(workspace_size);
  OP_CHECK_NOT_NULL(executor);
  *workspace_size = 0;
  *executor = nullptr;
  // valid_block_num is accepted (the registry checks it) and ignored (SPEC Decision 9).
  OP_TRY(BlockAttentionResidualsCheckArguments(partial_block, block_res, proj_weight, norm_weight, valid_block_num,
                                               norm_eps, hidden_states, inv_norm, probs));
  const Shape shape = shape_of(*partial_block, *block_res);
  const opDataType dtype = partial_block->dtype;

  FwdParams params;
  params.shape = shape;
  params.dtype = dtype;
  params.partial_block = partial_block->data;
  params.block_res = block_res->data;
  params.proj_weight = proj_weight->data;
  params.norm_weight = norm_weight->data;
  params.hidden_states = hidden_states->data;
  params.inv_norm = inv_norm->data;
  params.probs = probs->data;
  params.norm_eps = norm_eps;

  const uint64_t elem = dtype_size(dtype);
  const Plan plan = make_plan(shape, static_cast<uint64_t>(shape.T * shape.H) * elem, active_isa());
  WorkspaceLayout ws;
  FwdLayout layout;
  layout.sw = ws.reserve(static_cast<uint64_t>(shape.H) * dtype_size(stats_dtype(dtype)));
  layout.bytes = ws.size();

  const opTensor* const tensors[7] = {partial_block, block_res, proj_weight, norm_weight,
                                      hidden_states, inv_norm, probs};
  FwdExecutor* created = new (std::nothrow) FwdExecutor(tensors, params, plan, layout);
  if (created == nullptr)
    return fail(OP_ERR_RUNTIME_ERROR, kOp, ": cannot allocate the executor");
  *workspace_size = layout.bytes;
  *executor = created;
  return OP_SUCCESS;
}

opStatus BlockAttentionResiduals(void* workspace, uint64_t workspace_size, opExecutor* executor,
                                 opStream stream) {
  (void)stream;  // CPU: runs on the caller's parallel backend
  return op_plugin::run_executor(workspace, workspace_size, executor);
}
