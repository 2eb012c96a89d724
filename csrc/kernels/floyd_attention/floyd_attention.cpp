// Fused Floyd attention on the generated stage functions (op_plugin/ops/<op>_stages.inc: the
// registry's checks, descriptor capture, the executor and dtype dispatch). Stage 1 freezes a
// plan (FwdPlan / BwdPlan) and reserves the shared region, one scratch slot per thread and a
// cache line to align the caller's base (every region is 64-byte aligned in stage 2); stage 2
// runs the plan through the ISA build chosen by op_plugin::active_isa() (float64 always runs
// the portable build).
#include "floyd_attention.h"
#include "op_plugin/op_api.h"
#include "op_plugin/ops/fused_floyd_attention.h"
#include "op_plugin/ops/fused_floyd_attention_grad.h"

namespace op_plugin {
namespace floyd {
namespace {

// The shared region and one scratch slot per thread the backend may run.
void reserve_slots(const WorkspaceSizes& ws, WorkspaceLayout* layout, int* threads, uint64_t* slot,
                   uint64_t* shared) {
  *threads = max_threads() > 0 ? max_threads() : 1;
  *slot = ws.slot;
  *shared = ws.shared;
  if (ws.shared > 0) layout->reserve(ws.shared);
  for (int t = 0; t < *threads; ++t) layout->reserve(ws.slot);
  layout->reserve(WorkspaceLayout::kAlignment);  // stage 2 aligns the caller's base (align_workspace)
}

opStatus check_threads(const char* op, int planned) {
  if (max_threads() > planned)
    return fail(OP_ERR_RUNTIME_ERROR, op, ": the parallel backend now runs ", max_threads(),
                " threads but stage 1 sized the workspace for ", planned,
                "; call GetWorkspaceSize again after changing the backend");
  return OP_SUCCESS;
}

template <class Plan>
void bind_sizes(const opTensor& q, const opTensor& k1, double scale, Plan* p) {
  p->dtype = q.dtype;
  p->B = q.shape[0]; p->H = q.shape[1]; p->N = q.shape[2]; p->M = q.shape[3]; p->K = k1.shape[3]; p->D = q.shape[4];
  p->scale = scale;
}

const uint8_t* mask_of(const std::optional<opTensor>& mask) {
  return mask.has_value() ? static_cast<const uint8_t*>(mask->data) : nullptr;
}

}  // namespace
}  // namespace floyd

namespace ops {

struct FusedFloydAttentionKernel {
  using Plan = floyd::FwdPlan;  // threads == 0: nothing to compute

  static opStatus plan(FusedFloydAttentionArgs& a, Plan* p, WorkspaceLayout* workspace) {
    floyd::bind_sizes(a.query_ik, a.key_ij, a.scale_value, p);
    p->q = a.query_ik.data; p->k1 = a.key_ij.data; p->v1 = a.value_ij.data;
    p->k2 = a.key_jk.data; p->v2 = a.value_jk.data; p->mask = floyd::mask_of(a.atten_mask);
    p->softmax_max = a.softmax_max.data; p->softmax_sum = a.softmax_sum.data; p->out = a.attention_out.data;
    if (p->B * p->H * p->N * p->M > 0)
      floyd::reserve_slots(floyd::fwd_workspace(p->dtype, p->N, p->M, p->K, p->D), workspace, &p->threads,
                           &p->scratch_bytes, &p->shared_bytes);
    return OP_SUCCESS;
  }

  template <class T>  // one entry for every dtype: the ISA builds dispatch on plan.dtype
  static opStatus run(const FusedFloydAttentionArgs&, const Plan& p, void* workspace) {
    if (p.threads == 0) return OP_SUCCESS;
    OP_TRY(floyd::check_threads("FusedFloydAttention", p.threads));
    const Isa isa = active_isa();
    workspace = align_workspace(workspace);
    if (p.dtype == OP_DT_DOUBLE || isa == Isa::kBaseline) floyd::baseline::forward(p, workspace);
    else if (isa == Isa::kAvx2) floyd::avx2::forward(p, workspace);
    else floyd::avx512::forward(p, workspace);
    return OP_SUCCESS;
  }
};

struct FusedFloydAttentionGradKernel {
  using Plan = floyd::BwdPlan;

  static opStatus plan(FusedFloydAttentionGradArgs& a, Plan* p, WorkspaceLayout* workspace) {
    floyd::bind_sizes(a.query_ik, a.key_ij, a.scale_value, p);
    p->dy = a.grad_output.data; p->q = a.query_ik.data; p->k1 = a.key_ij.data; p->v1 = a.value_ij.data;
    p->k2 = a.key_jk.data; p->v2 = a.value_jk.data; p->o = a.attention_out.data;
    p->softmax_max = a.softmax_max.data; p->softmax_sum = a.softmax_sum.data; p->mask = floyd::mask_of(a.atten_mask);
    p->dq = a.dq.data; p->dk1 = a.dk1.data; p->dv1 = a.dv1.data; p->dk2 = a.dk2.data; p->dv2 = a.dv2.data;
    // Work exists when any output is non-empty: dQ (N, M), dK1/dV1 (N, K), dK2/dV2 (K, M).
    p->chunk_blocks = floyd::fast::bwd_chunk_blocks(p->N, p->M, p->K, floyd::fast::operand_bytes(p->dtype));
    if (p->B * p->H * p->D > 0 && (p->N * p->M > 0 || p->N * p->K > 0 || p->K * p->M > 0))
      floyd::reserve_slots(floyd::bwd_workspace(p->dtype, p->N, p->M, p->K, p->D, p->chunk_blocks), workspace,
                           &p->threads, &p->scratch_bytes, &p->shared_bytes);
    return OP_SUCCESS;
  }

  template <class T>
  static opStatus run(const FusedFloydAttentionGradArgs&, const Plan& p, void* workspace) {
    if (p.threads == 0) return OP_SUCCESS;
    OP_TRY(floyd::check_threads("FusedFloydAttentionGrad", p.threads));
    const Isa isa = active_isa();
    workspace = align_workspace(workspace);
    if (p.dtype == OP_DT_DOUBLE || isa == Isa::kBaseline) floyd::baseline::backward(p, workspace);
    else if (isa == Isa::kAvx2) floyd::avx2::backward(p, workspace);
    else floyd::avx512::backward(p, workspace);
    return OP_SUCCESS;
  }
};

}  // namespace ops
}  // namespace op_plugin

#include "op_plugin/ops/fused_floyd_attention_grad_stages.inc"
#include "op_plugin/ops/fused_floyd_attention_stages.inc"
