// swa_backward (npu_fusion_attention_grad of op-plugin 7.3.0, sparse_mode 0 / 4): stage 1
// (SwaBackwardGetWorkspaceSize) validates and maps the call onto the flash attention engine's
// backward params; stage 2 (SwaBackward) runs the engine (dq, dk, dv, and scale * dS into the
// workspace when pse is given), then reduces dpse to pse's broadcast shape and computes dsink,
// both in a fixed order (deterministic for any thread count).
#include "op_plugin/ops/swa_backward.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <memory>
#include <vector>

#include "kernels/flash_attention/swa_entry.h"

namespace op_plugin {
namespace flash {
namespace {

class SwaBackwardExecutor final : public opExecutor {
 public:
  const char* op_name() const override { return "swa_backward"; }
  uint64_t workspace_size() const override { return plan.workspace_bytes; }
  opStatus execute(void* workspace) override {
    kernels().backward(params, plan, workspace);
    if (params.want_dpse) reduce_dpse(workspace);
    if (params.sinks != nullptr) compute_dsink();
    return OP_SUCCESS;
  }

  // dpse[b', n', i', j] = sum over pse's broadcast dims (b, then n, then i ascending) of the
  // engine's scale * dS[b][n][i][j].
  void reduce_dpse(void* workspace) const {
    const bool f64 = plan.compute == Compute::kF64;
    const char* part = static_cast<const char*>(flash::align_workspace(workspace)) + plan.dpse_offset;
    auto at = [&](int64_t b, int64_t n, int64_t i, int64_t j) {
      const int64_t idx = ((b * params.heads_q + n) * plan.dpse_rows + i) * plan.dpse_cols + j;
      return f64 ? reinterpret_cast<const double*>(part)[idx] : static_cast<double>(reinterpret_cast<const float*>(part)[idx]);
    };
    const int64_t PB = dpse.shape[0], PN = dpse.shape[1], PI = dpse.shape[2], PJ = dpse.shape[3];
    const int64_t nb = PB == 1 ? params.batch : 1, nn = PN == 1 ? params.heads_q : 1, ni = PI == 1 ? plan.dpse_rows : 1;
    op_plugin::parallel_for(0, PB * PN * PI, 1, [&](int64_t r0, int64_t r1) {
      std::vector<double> row(static_cast<size_t>(PJ));
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t b0 = r / (PN * PI), n0 = (r / PI) % PN, i0 = r % PI;
        std::fill(row.begin(), row.end(), 0.0);
        for (int64_t b = 0; b < nb; ++b)
          for (int64_t n = 0; n < nn; ++n)
            for (int64_t i = 0; i < ni; ++i)
              for (int64_t j = 0; j < PJ; ++j) row[j] += at(PB == 1 ? b : b0, PN == 1 ? n : n0, PI == 1 ? i : i0, j);
        for (int64_t j = 0; j < PJ; ++j) swa::store_value(dpse.data, dpse.dtype, r * PJ + j, row[j]);
      }
    });
  }

  // dsink[n] = -sum_{b, i} p_sink * D_i, p_sink = exp(sink_n - lse_i), D_i = rowsum(dy * attention_in)
  // (Decision 6); empty rows (lse +inf) contribute nothing.
  void compute_dsink() const {
    const FlashAttnBwdParams& p = params;
    const int64_t Dv = p.head_dim_v;
    op_plugin::parallel_for(0, p.heads_q, 1, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) {
        double acc = 0.0;
        for (int64_t b = 0; b < p.batch; ++b)
          for (int64_t i = 0; i < p.seqlen_q[b]; ++i) {
            const int64_t li = b * p.lse_batch_stride + n * p.lse_head_stride + (p.q_start[b] + i) * p.lse_row_stride;
            const double mx = swa::load_value(p.lse, p.lse_dtype, li), sm = swa::load_value(p.softmax_sum, p.lse_dtype, li);
            if (!(mx > -FLT_MAX) || !(sm > 0.0) || !std::isfinite(sm)) continue;
            const int64_t o = b * p.o_batch_stride + (p.q_start[b] + i) * p.o_row_stride + n * p.o_head_stride;
            double d = 0.0;
            for (int64_t e = 0; e < Dv; ++e)
              d += swa::load_value(p.dout, p.dtype, o + e) * swa::load_value(p.out, p.dtype, o + e);
            acc += std::exp(static_cast<double>(p.sinks[n]) - mx) / sm * d;
          }
        swa::store_value(dsink.data, dsink.dtype, n * dsink.strides[0], -acc);
      }
    });
  }

  FlashAttnBwdParams params;
  Plan plan;
  swa::Geometry geo;
  std::vector<double> sink;
  PlanStorage storage;
  opTensor dpse{};
  opTensor dsink{};
};

}  // namespace
}  // namespace flash
}  // namespace op_plugin

using namespace op_plugin;
using namespace op_plugin::flash;

opStatus SwaBackwardGetWorkspaceSize(const opTensor* query, const opTensor* key, const opTensor* value,
                                     const opTensor* dy, int64_t head_num, const char* input_layout, const opTensor* pse,
                                     const opTensor* padding_mask, const opTensor* atten_mask,
                                     const opTensor* softmax_max, const opTensor* softmax_sum,
                                     const opTensor* softmax_in, const opTensor* attention_in, double scale_value,
                                     double keep_prob, int64_t pre_tockens, int64_t next_tockens,
                                     int64_t inner_precise, int64_t seed, int64_t offset, int64_t numels,
                                     const opIntArray* prefix, const opIntArray* actual_seq_qlen,
                                     const opIntArray* actual_seq_kvlen, int64_t sparse_mode, bool gen_mask_parallel,
                                     bool sync, const char* softmax_layout, const opTensor* sink, opTensor* dq,
                                     opTensor* dk, opTensor* dv, opTensor* dpse, opTensor* dsink,
                                     uint64_t* workspace_size, opExecutor** executor) {
  // softmax_in is unused (SPEC §2.1); inner_precise, gen_mask_parallel, sync are device hints;
  // prefix belongs to sparse modes 5/6; numels is implied by the shapes (checked below).
  (void)softmax_in;
  (void)inner_precise;
  (void)prefix;
  (void)gen_mask_parallel;
  (void)sync;
  OP_CHECK_NOT_NULL(workspace_size);
  OP_CHECK_NOT_NULL(executor);
  *executor = nullptr;
  *workspace_size = 0;
  OP_TRY(SwaBackwardCheckArguments(query, key, value, dy, head_num, input_layout, pse, padding_mask, atten_mask,
                                   softmax_max, softmax_sum, softmax_in, attention_in, scale_value, keep_prob,
                                   pre_tockens, next_tockens, inner_precise, seed, offset, numels, prefix,
                                   actual_seq_qlen, actual_seq_kvlen, sparse_mode, gen_mask_parallel, sync,
                                   softmax_layout, sink, dq, dk, dv, dpse, dsink));

  auto ex = std::make_unique<SwaBackwardExecutor>();
  swa::Geometry& g = ex->geo;
  swa::MaskPlan mask;
  OP_TRY(swa::make_call(query, key, value, head_num, input_layout, pse, atten_mask, pre_tockens, next_tockens,
                        actual_seq_qlen, actual_seq_kvlen, sparse_mode, &g, &mask));
  // The dropout mask is regenerated from the forward's element count (which TND's sequence
  // contents give, so only here can it be checked).
  OP_CHECK(keep_prob == 1.0 || numels == g.numels, "numels (", numels, ") must be the forward's element count ",
           g.numels, " when keep_prob < 1");

  if (sink != nullptr) sinks_to_doubles(sink, &ex->sink);
  FlashAttnBwdParams& p = ex->params;
  swa::fill_params(g, mask, query, key, value, pse, &ex->sink, scale_value, keep_prob, static_cast<uint64_t>(seed),
                   static_cast<uint64_t>(offset), softmax_max, softmax_sum, &p);
  // dy, attention_in, dq, dk, dv are contiguous in the layout of their inputs: same strides.
  p.out = attention_in->data;
  p.dout = dy->data;
  set_strides(swa::swa_dims(*attention_in, g.layout, g.heads, g.dim_v), &p.o_batch_stride, &p.o_row_stride,
              &p.o_head_stride);
  p.dq = dq->data;
  p.dk = dk->data;
  p.dv = dv->data;
  set_strides(swa::swa_dims(*dq, g.layout, g.heads, g.dim), &p.dq_batch_stride, &p.dq_row_stride, &p.dq_head_stride);
  set_strides(swa::swa_dims(*dk, g.layout, g.heads_kv, g.dim), &p.dk_batch_stride, &p.dk_row_stride, &p.dk_head_stride);
  set_strides(swa::swa_dims(*dv, g.layout, g.heads_kv, g.dim_v), &p.dv_batch_stride, &p.dv_row_stride,
              &p.dv_head_stride);
  p.want_dpse = pse != nullptr;
  ex->dpse = *dpse;
  ex->dsink = *dsink;

  const int64_t numel[5] = {op_plugin::numel(*query), op_plugin::numel(*key), op_plugin::numel(*value),
                            op_plugin::numel(*attention_in), op_plugin::numel(*dy)};
  if (!swa::make_swa_plan(g, p, true, numel, &ex->storage, &ex->plan))
    return fail(OP_ERR_TILING_ERROR, "swa_backward: no valid plan for these sizes");
  *workspace_size = ex->plan.workspace_bytes;
  *executor = ex.release();
  return OP_SUCCESS;
}

opStatus SwaBackward(void* workspace, uint64_t workspace_size, opExecutor* executor, opStream stream) {
  (void)stream;
  return op_plugin::run_executor(workspace, workspace_size, executor);
}
