// BlockAttentionResidualsGrad, SPEC section 4 (uses the saved probs and inv_norm, no recompute):
//   sw[h] = norm_weight[h] * proj_weight[h]
//   g[t,i] = sum_h gH[t,h] v[t,i,h] ;  gs[t,i] = probs[t,i] (g[t,i] - sum_j probs[t,j] g[t,j])
//   ginv[t,i] = gs[t,i] * sum_h sw[h] v[t,i,h]
//   gv[t,i,h] = gH[t,h] probs[t,i] + gs[t,i] inv[t,i] sw[h] - ginv[t,i] inv[t,i]^3 / H * v[t,i,h]
//   gsw[h] = sum_{t,i} gs[t,i] inv[t,i] v[t,i,h]
//   grad_norm_weight = gsw * proj_weight ;  grad_proj_weight = gsw * norm_weight
//
// Per token t: gH[t] is converted to acc_t once (to_acc); pass 1 (grad_dots) streams the N + 1
// rows of v from memory once and computes both dots g and sum_h sw v; the O(N) coefficients
// follow; pass 2 (grad_rows, in groups of rows) re-reads the rows from L2, writes gv once and adds
// b[i] v[i, h] to the chunk's gsw partial, while prefetching the next token's rows so memory
// stays busy during the compute-heavier second pass.
//
// Determinism: the plan splits T into fixed chunks (make_plan, independent of the thread count).
// A chunk is run by one thread, in token order, into its own gsw partial in the workspace; the
// partials are then summed in chunk order. So the result is bitwise the same for any thread count.
//
// Workspace: sw[H] ; gsw partials [num_chunks][padded H] ; per-chunk scratch
// [num_chunks][padded H + padded 2 (N + 1)] for gH[t] in acc_t and g/d, then the coefficients
// b/c. All in acc_t.
#include "bar_driver.h"
#include "bar_plan.h"
#include "bar_rows.h"
#include "op_plugin/ops/block_attention_residuals_grad.h"

namespace op_plugin {
namespace bar {
namespace {

struct BwdLayout {
  uint64_t sw = 0;             // acc_t[H]
  uint64_t gsw_parts = 0;      // acc_t[num_chunks][gsw_stride]
  int64_t gsw_stride = 0;      // H rounded up to a cache line
  uint64_t scratch = 0;        // acc_t[num_chunks][scratch_stride]
  int64_t scratch_stride = 0;  // H and 2 (N + 1), each rounded up to a cache line
  uint64_t bytes = 0;
};

template <class A>
BwdLayout make_layout(const Shape& s, const Plan& plan, WorkspaceLayout& ws) {
  BwdLayout layout;
  const uint64_t chunks = static_cast<uint64_t>(plan.num_chunks);
  layout.gsw_stride = padded_row<A>(s.H);
  layout.scratch_stride = padded_row<A>(s.H) + padded_row<A>(2 * (s.N + 1));
  layout.sw = ws.reserve(static_cast<uint64_t>(s.H) * sizeof(A));
  layout.gsw_parts = ws.reserve(chunks * static_cast<uint64_t>(layout.gsw_stride) * sizeof(A));
  layout.scratch = ws.reserve(chunks * static_cast<uint64_t>(layout.scratch_stride) * sizeof(A));
  layout.bytes = ws.size();
  return layout;
}

// One chunk of tokens [t_begin, t_end): gv for every token, and the chunk's gsw partial.
template <class T>
void grad_chunk(const BwdParams& p, const RowKernels<T>& kernels,
                const acc_t<T>* sw, acc_t<T>* gsw, acc_t<T>* scratch, int64_t t_begin,
                int64_t t_end) {
  using A = acc_t<T>;
  const int64_t N = p.shape.N, H = p.shape.H, R = N + 1;
  const T* partial_block = static_cast<const T*>(p.partial_block);
  const T* block_res = static_cast<const T*>(p.block_res);
  const T* grad_hidden = static_cast<const T*>(p.grad_hidden_states);
  const A* inv_norm = static_cast<const A*>(p.inv_norm);
  const A* probs = static_cast<const A*>(p.probs);
  T* grad_partial = static_cast<T*>(p.grad_partial_block);
  T* grad_blocks = static_cast<T*>(p.grad_block_res);

  for (int64_t h = 0; h < H; ++h) gsw[h] = A(0);
  A* gh = scratch;                     // gH[t] in acc_t
  A* g = scratch + padded_row<A>(H);   // g[i], then b[i] = gs[i] * inv[i]
  A* d = g + R;                        // sum_h sw v[i], then c[i] = -gs[i] d[i] inv[i]^3 / H
  const A h_count = static_cast<A>(H);
  for (int64_t t = t_begin; t < t_end; ++t) {
    const RowSet<T> rows = token_rows(block_res, partial_block, t, N, H);
    kernels.to_acc(grad_hidden + t * H, H, gh);
    for (int64_t i = 0; i < R; ++i) kernels.grad_dots(rows.row(i), gh, sw, H, &g[i], &d[i]);

    const A* pr = probs + t * R;
    const A* inv = inv_norm + t * R;
    A pg = 0;
    for (int64_t j = 0; j < R; ++j) pg += pr[j] * g[j];
    for (int64_t i = 0; i < R; ++i) {
      const A gs = pr[i] * (g[i] - pg);
      const A ginv = gs * d[i];
      g[i] = gs * inv[i];
      d[i] = -ginv * (inv[i] * inv[i] * inv[i]) / h_count;
    }
    // Rows in groups of kGradRowGroup; prefetch the next token of this chunk (the next chunk
    // may belong to another thread).
    const bool has_next = t + 1 < t_end;
    const RowSet<T> next = token_rows(block_res, partial_block, t + (has_next ? 1 : 0), N, H);
    for (int64_t i0 = 0; i0 < R; i0 += kGradRowGroup) {
      GradRowsArgs<T> args{};
      args.rows = static_cast<int>(R - i0 < kGradRowGroup ? R - i0 : kGradRowGroup);
      for (int k = 0; k < args.rows; ++k) {
        const int64_t i = i0 + k;
        args.v[k] = rows.row(i);
        args.out[k] = i < N ? grad_blocks + (t * N + i) * H : grad_partial + t * H;
        args.next[k] = has_next ? next.row(i) : nullptr;
        args.a[k] = pr[i];
        args.b[k] = g[i];
        args.c[k] = d[i];
      }
      args.gh = gh;
      args.sw = sw;
      args.gsw = gsw;
      args.H = H;
      kernels.grad_rows(args);
    }
  }
}

template <class T>
void backward(const BwdParams& p, const Plan& plan, const BwdLayout& layout, void* workspace) {
  using A = acc_t<T>;
  const int64_t T_count = p.shape.T, H = p.shape.H;
  if (H == 0) return;  // every output is empty
  const T* proj_weight = static_cast<const T*>(p.proj_weight);
  const T* norm_weight = static_cast<const T*>(p.norm_weight);
  A* sw = workspace_at<A>(workspace, layout.sw);
  A* gsw_parts = workspace_at<A>(workspace, layout.gsw_parts);
  A* scratch = workspace_at<A>(workspace, layout.scratch);
  fill_sw(norm_weight, proj_weight, H, sw);

  const RowKernels<T>& kernels = row_kernels<T>(plan.isa);
  parallel_for_dynamic(0, plan.num_chunks, 1, [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; ++c) {
      const int64_t t_begin = c * plan.rows_per_chunk;
      const int64_t t_end = t_begin + plan.rows_per_chunk < T_count
                                ? t_begin + plan.rows_per_chunk
                                : T_count;
      grad_chunk<T>(p, kernels, sw, gsw_parts + c * layout.gsw_stride,
                    scratch + c * layout.scratch_stride, t_begin, t_end);
    }
  });

  // gsw = sum of the partials in chunk order (accumulated into partial 0), then the weight grads.
  T* grad_norm = static_cast<T*>(p.grad_norm_weight);
  T* grad_proj = static_cast<T*>(p.grad_proj_weight);
  parallel_for(0, H, kReduceGrain, [&](int64_t h_begin, int64_t h_end) {
    A* total = gsw_parts;
    for (int64_t c = 1; c < plan.num_chunks; ++c) {
      const A* part = gsw_parts + c * layout.gsw_stride;
      for (int64_t h = h_begin; h < h_end; ++h) total[h] += part[h];
    }
    for (int64_t h = h_begin; h < h_end; ++h) {
      const A gsw = plan.num_chunks > 0 ? total[h] : A(0);  // T = 0: zero grads
      grad_norm[h] = from_double<T>(gsw * static_cast<A>(to_float(proj_weight[h])));
      grad_proj[h] = from_double<T>(gsw * static_cast<A>(to_float(norm_weight[h])));
    }
  });
}

}  // namespace
}  // namespace bar

namespace ops {

// The kernel on the generated stage functions (op_plugin/ops/block_attention_residuals_grad_stages.inc:
// the registry's checks, descriptor capture, dtype dispatch). valid_block_num is accepted (the
// registry checks it) and ignored (SPEC Decision 9).
struct BlockAttentionResidualsGradKernel {
  struct Plan {
    bar::BwdParams params;
    bar::Plan plan;
    bar::BwdLayout layout;
  };

  static opStatus plan(BlockAttentionResidualsGradArgs& a, Plan* p, WorkspaceLayout* workspace) {
    const bar::Shape s = bar::shape_of(a.partial_block, a.block_res);
    const opDataType dtype = a.partial_block.dtype;
    bar::BwdParams& params = p->params;
    params.shape = s;
    params.dtype = dtype;
    params.partial_block = a.partial_block.data;
    params.block_res = a.block_res.data;
    params.proj_weight = a.proj_weight.data;
    params.norm_weight = a.norm_weight.data;
    params.grad_hidden_states = a.grad_hidden_states.data;
    params.inv_norm = a.inv_norm.data;
    params.probs = a.probs.data;
    params.grad_partial_block = a.grad_partial_block.data;
    params.grad_block_res = a.grad_block_res.data;
    params.grad_proj_weight = a.grad_proj_weight.data;
    params.grad_norm_weight = a.grad_norm_weight.data;
    p->plan = bar::make_plan(s, /*output_bytes=*/0, active_isa());  // no streamed output
    p->layout = dtype == OP_DT_DOUBLE ? bar::make_layout<double>(s, p->plan, *workspace)
                                      : bar::make_layout<float>(s, p->plan, *workspace);
    return OP_SUCCESS;
  }

  template <class T>
  static opStatus run(const BlockAttentionResidualsGradArgs&, const Plan& p, void* workspace) {
    bar::backward<T>(p.params, p.plan, p.layout, workspace);
    return OP_SUCCESS;
  }
};

}  // namespace ops
}  // namespace op_plugin

#include "op_plugin/ops/block_attention_residuals_grad_stages.inc"
