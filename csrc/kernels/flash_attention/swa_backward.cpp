// swa_backward (npu_fusion_attention_grad of op-plugin 7.3.0, sparse_mode 0 / 4): stage 1 maps the
// call onto the flash attention engine's backward params (the registry's checks ran before it);
// stage 2 runs the engine (dq, dk, dv, and scale * dS into the workspace when pse is given), then
// reduces dpse to pse's broadcast shape and computes dsink, both in a fixed order (deterministic
// for any thread count).
#include "op_plugin/ops/swa_backward.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

#include "kernels/flash_attention/swa_entry.h"

namespace op_plugin {
namespace ops {

// On the generated stage functions (op_plugin/ops/swa_backward_stages.inc).
struct SwaBackwardKernel {
  struct Plan {
    flash::FlashAttnBwdParams params;
    flash::Plan plan;
    flash::swa::Geometry geo;
    std::vector<double> sink;
    flash::PlanStorage storage;
    opTensor dpse{};
    opTensor dsink{};
  };

  // softmax_in is unused (SPEC §2.1); inner_precise, gen_mask_parallel, sync are device hints;
  // prefix belongs to sparse modes 5/6; numels is implied by the shapes (checked below).
  static opStatus plan(SwaBackwardArgs& a, Plan* ex, WorkspaceLayout* workspace) {
    using namespace flash;  // NOLINT
    // The registry requires these three (the forward's outputs).
    const opTensor &softmax_max = *a.softmax_max, &softmax_sum = *a.softmax_sum, &attention_in = *a.attention_in;
    swa::Geometry& g = ex->geo;
    swa::MaskPlan mask;
    opIntArray qlen, kvlen;
    OP_TRY(swa::make_call(&a.query, &a.key, &a.value, a.head_num, a.input_layout.c_str(), as_pointer(a.pse),
                          as_pointer(a.atten_mask), a.pre_tockens, a.next_tockens, as_pointer(a.actual_seq_qlen, &qlen),
                          as_pointer(a.actual_seq_kvlen, &kvlen), a.sparse_mode, &g, &mask));
    // The dropout mask is regenerated from the forward's element count (which TND's sequence
    // contents give, so only here can it be checked).
    OP_CHECK(a.keep_prob == 1.0 || a.numels == g.numels, "numels (", a.numels, ") must be the forward's element count ",
             g.numels, " when keep_prob < 1");

    if (a.sink.has_value()) sinks_to_doubles(&*a.sink, &ex->sink);
    FlashAttnBwdParams& p = ex->params;
    swa::fill_params(g, mask, &a.query, &a.key, &a.value, as_pointer(a.pse), &ex->sink, a.scale_value, a.keep_prob,
                     static_cast<uint64_t>(a.seed), static_cast<uint64_t>(a.offset), &softmax_max, &softmax_sum, &p);
    // dy, attention_in, dq, dk, dv are contiguous in the layout of their inputs: same strides.
    p.out = attention_in.data;
    p.dout = a.dy.data;
    set_strides(swa::swa_dims(attention_in, g.layout, g.heads, g.dim_v), &p.o_batch_stride, &p.o_row_stride,
                &p.o_head_stride);
    p.dq = a.dq.data;
    p.dk = a.dk.data;
    p.dv = a.dv.data;
    set_strides(swa::swa_dims(a.dq, g.layout, g.heads, g.dim), &p.dq_batch_stride, &p.dq_row_stride, &p.dq_head_stride);
    set_strides(swa::swa_dims(a.dk, g.layout, g.heads_kv, g.dim), &p.dk_batch_stride, &p.dk_row_stride,
                &p.dk_head_stride);
    set_strides(swa::swa_dims(a.dv, g.layout, g.heads_kv, g.dim_v), &p.dv_batch_stride, &p.dv_row_stride,
                &p.dv_head_stride);
    p.want_dpse = a.pse.has_value();
    ex->dpse = a.dpse;
    ex->dsink = a.dsink;

    const int64_t numel[5] = {op_plugin::numel(a.query), op_plugin::numel(a.key), op_plugin::numel(a.value),
                              op_plugin::numel(attention_in), op_plugin::numel(a.dy)};
    if (!swa::make_swa_plan(g, p, true, numel, &ex->storage, &ex->plan))
      return fail(OP_ERR_TILING_ERROR, "swa_backward: no valid plan for these sizes");
    workspace->reserve(ex->plan.workspace_bytes);
    return OP_SUCCESS;
  }

  template <class T>  // one entry for every dtype: the engine's kernel table dispatches on it
  static opStatus run(const SwaBackwardArgs&, const Plan& ex, void* workspace) {
    flash::kernels().backward(ex.params, ex.plan, workspace);
    if (ex.params.want_dpse) reduce_dpse(ex, workspace);
    if (ex.params.sinks != nullptr) compute_dsink(ex);
    return OP_SUCCESS;
  }

  // dpse[b', n', i', j] = sum over pse's broadcast dims (b, then n, then i ascending) of the
  // engine's scale * dS[b][n][i][j].
  static void reduce_dpse(const Plan& ex, void* workspace) {
    const flash::FlashAttnBwdParams& params = ex.params;
    const flash::Plan& plan = ex.plan;
    const opTensor& dpse = ex.dpse;
    const bool f64 = plan.compute == flash::Compute::kF64;
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
        for (int64_t j = 0; j < PJ; ++j) flash::swa::store_value(dpse.data, dpse.dtype, r * PJ + j, row[j]);
      }
    });
  }

  // dsink[n] = -sum_{b, i} p_sink * D_i, p_sink = exp(sink_n - lse_i), D_i = rowsum(dy * attention_in)
  // (Decision 6); empty rows (lse +inf) contribute nothing.
  static void compute_dsink(const Plan& ex) {
    const flash::FlashAttnBwdParams& p = ex.params;
    const opTensor& dsink = ex.dsink;
    const int64_t Dv = p.head_dim_v;
    op_plugin::parallel_for(0, p.heads_q, 1, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) {
        double acc = 0.0;
        for (int64_t b = 0; b < p.batch; ++b)
          for (int64_t i = 0; i < p.seqlen_q[b]; ++i) {
            const int64_t li = b * p.lse_batch_stride + n * p.lse_head_stride + (p.q_start[b] + i) * p.lse_row_stride;
            const double mx = flash::swa::load_value(p.lse, p.lse_dtype, li);
            const double sm = flash::swa::load_value(p.softmax_sum, p.lse_dtype, li);
            if (!(mx > -FLT_MAX) || !(sm > 0.0) || !std::isfinite(sm)) continue;
            const int64_t o = b * p.o_batch_stride + (p.q_start[b] + i) * p.o_row_stride + n * p.o_head_stride;
            double d = 0.0;
            for (int64_t e = 0; e < Dv; ++e)
              d += flash::swa::load_value(p.dout, p.dtype, o + e) * flash::swa::load_value(p.out, p.dtype, o + e);
            acc += std::exp(static_cast<double>(p.sinks[n]) - mx) / sm * d;
          }
        flash::swa::store_value(dsink.data, dsink.dtype, n * dsink.strides[0], -acc);
      }
    });
  }
};

}  // namespace ops
}  // namespace op_plugin

#include "op_plugin/ops/swa_backward_stages.inc"
