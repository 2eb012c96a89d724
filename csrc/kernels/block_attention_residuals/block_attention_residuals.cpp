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

#include "bar_driver.h"
#include "bar_plan.h"
#include "bar_rows.h"
#include "op_plugin/ops/block_attention_residuals.h"

namespace op_plugin {
namespace bar {
namespace {

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
  parallel_for_dynamic(0, p.shape.T, plan.rows_per_chunk, [&](int64_t t_begin, int64_t t_end) {
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

}  // namespace
}  // namespace bar

namespace ops {

// The kernel on the generated stage functions (op_plugin/ops/block_attention_residuals_stages.inc:
// the registry's checks, descriptor capture, dtype dispatch). valid_block_num is accepted (the
// registry checks it) and ignored (SPEC Decision 9).
struct BlockAttentionResidualsKernel {
  struct Plan {
    bar::FwdParams params;
    bar::Plan plan;
    bar::FwdLayout layout;
  };

  static opStatus plan(BlockAttentionResidualsArgs& a, Plan* p, WorkspaceLayout* workspace) {
    const bar::Shape shape = bar::shape_of(a.partial_block, a.block_res);
    const opDataType dtype = a.partial_block.dtype;
    bar::FwdParams& params = p->params;
    params.shape = shape;
    params.dtype = dtype;
    params.partial_block = a.partial_block.data;
    params.block_res = a.block_res.data;
    params.proj_weight = a.proj_weight.data;
    params.norm_weight = a.norm_weight.data;
    params.hidden_states = a.hidden_states.data;
    params.inv_norm = a.inv_norm.data;
    params.probs = a.probs.data;
    params.norm_eps = a.norm_eps;
    p->plan = bar::make_plan(shape, static_cast<uint64_t>(shape.T * shape.H) * dtype_size(dtype), active_isa());
    p->layout.sw = workspace->reserve(static_cast<uint64_t>(shape.H) * dtype_size(bar::stats_dtype(dtype)));
    p->layout.bytes = workspace->size();
    return OP_SUCCESS;
  }

  template <class T>
  static opStatus run(const BlockAttentionResidualsArgs&, const Plan& p, void* workspace) {
    bar::forward<T>(p.params, p.plan, p.layout, workspace);
    return OP_SUCCESS;
  }
};

}  // namespace ops
}  // namespace op_plugin

#include "op_plugin/ops/block_attention_residuals_stages.inc"
