// Fused Floyd attention: the aclnn-style two-stage API. Stage 1 checks the arguments (the
// registry's rules: the generated <Kernel>CheckArguments), freezes a plan (FwdPlan/BwdPlan) and
// sizes the per-thread workspace; stage 2 runs the plan through the ISA build chosen by
// op_plugin::active_isa() (float64 always runs the portable build).
#include <new>

#include "floyd_attention.h"
#include "op_plugin/op_api.h"
#include "op_plugin/ops/fused_floyd_attention.h"
#include "op_plugin/ops/fused_floyd_attention_grad.h"

namespace op_plugin {
namespace floyd {
namespace {

// Sizes from query_ik [B,H,N,M,D] and key_ij [B,H,N,K,D], once CheckArguments accepted them.
struct Sizes { int64_t B, H, N, M, K, D; };

Sizes sizes_of(const opTensor& q, const opTensor& k1) {
  return Sizes{q.shape[0], q.shape[1], q.shape[2], q.shape[3], k1.shape[3], q.shape[4]};
}

// Reserves the shared region and one scratch slot per thread the backend may run.
uint64_t reserve_slots(uint64_t shared, uint64_t slot, int* threads) {
  *threads = max_threads() > 0 ? max_threads() : 1;
  WorkspaceLayout layout;
  if (shared > 0) layout.reserve(shared);
  for (int t = 0; t < *threads; ++t) layout.reserve(slot);
  return layout.size();
}

opStatus check_threads(const char* op, int planned) {
  if (max_threads() > planned)
    return fail(OP_ERR_RUNTIME_ERROR, op, ": the parallel backend now runs ", max_threads(),
                " threads but stage 1 sized the workspace for ", planned,
                "; call GetWorkspaceSize again after changing the backend");
  return OP_SUCCESS;
}

class FwdExecutor final : public opExecutor {
 public:
  FwdExecutor(const FwdPlan& plan, uint64_t bytes) : plan_(plan), bytes_(bytes) {}
  const char* op_name() const override { return "FusedFloydAttention"; }
  uint64_t workspace_size() const override { return bytes_; }
  opStatus execute(void* workspace) override {
    if (bytes_ == 0) return OP_SUCCESS;  // nothing to compute
    OP_TRY(check_threads(op_name(), plan_.threads));
    const Isa isa = active_isa();
    if (plan_.dtype == OP_DT_DOUBLE || isa == Isa::kBaseline) baseline::forward(plan_, workspace);
    else if (isa == Isa::kAvx2) avx2::forward(plan_, workspace);
    else avx512::forward(plan_, workspace);
    return OP_SUCCESS;
  }

 private:
  FwdPlan plan_;
  uint64_t bytes_;
};

class BwdExecutor final : public opExecutor {
 public:
  BwdExecutor(const BwdPlan& plan, uint64_t bytes) : plan_(plan), bytes_(bytes) {}
  const char* op_name() const override { return "FusedFloydAttentionGrad"; }
  uint64_t workspace_size() const override { return bytes_; }
  opStatus execute(void* workspace) override {
    if (bytes_ == 0) return OP_SUCCESS;
    OP_TRY(check_threads(op_name(), plan_.threads));
    const Isa isa = active_isa();
    if (plan_.dtype == OP_DT_DOUBLE || isa == Isa::kBaseline) baseline::backward(plan_, workspace);
    else if (isa == Isa::kAvx2) avx2::backward(plan_, workspace);
    else avx512::backward(plan_, workspace);
    return OP_SUCCESS;
  }

 private:
  BwdPlan plan_;
  uint64_t bytes_;
};

}  // namespace
}  // namespace floyd
}  // namespace op_plugin

using namespace op_plugin;         // NOLINT: stage functions are global C-style entry points
using namespace op_plugin::floyd;  // NOLINT

opStatus FusedFloydAttentionGetWorkspaceSize(const opTensor* query_ik, const opTensor* key_ij,
                                             const opTensor* value_ij, const opTensor* key_jk,
                                             const opTensor* value_jk, const opTensor* atten_mask,
                                             double scale_value, opTensor* softmax_max,
                                             opTensor* softmax_sum, opTensor* attention_out,
                                             uint64_t* workspace_size, opExecutor** executor) {
  OP_CHECK_NOT_NULL(workspace_size);
  OP_CHECK_NOT_NULL(executor);
  *executor = nullptr;
  *workspace_size = 0;
  OP_TRY(FusedFloydAttentionCheckArguments(query_ik, key_ij, value_ij, key_jk, value_jk, atten_mask, scale_value,
                                           softmax_max, softmax_sum, attention_out));
  const Sizes s = sizes_of(*query_ik, *key_ij);
  const opDataType dt = query_ik->dtype;
  FwdPlan plan{};
  plan.dtype = dt;
  plan.B = s.B; plan.H = s.H; plan.N = s.N; plan.M = s.M; plan.K = s.K; plan.D = s.D;
  plan.scale = scale_value;
  plan.q = query_ik->data; plan.k1 = key_ij->data; plan.v1 = value_ij->data;
  plan.k2 = key_jk->data; plan.v2 = value_jk->data;
  plan.mask = atten_mask != nullptr ? static_cast<const uint8_t*>(atten_mask->data) : nullptr;
  plan.softmax_max = softmax_max->data; plan.softmax_sum = softmax_sum->data; plan.out = attention_out->data;
  uint64_t bytes = 0;
  if (s.B * s.H * s.N * s.M > 0) {
    const WorkspaceSizes ws = fwd_workspace(dt, s.N, s.M, s.K, s.D);
    plan.scratch_bytes = ws.slot;
    plan.shared_bytes = ws.shared;
    bytes = reserve_slots(ws.shared, ws.slot, &plan.threads);
  }
  *executor = new (std::nothrow) FwdExecutor(plan, bytes);
  if (*executor == nullptr) return fail(OP_ERR_RUNTIME_ERROR, "FusedFloydAttention: out of memory for the executor");
  *workspace_size = bytes;
  clear_error();
  return OP_SUCCESS;
}

opStatus FusedFloydAttention(void* workspace, uint64_t workspace_size, opExecutor* executor, opStream) {
  return op_plugin::run_executor(workspace, workspace_size, executor);
}

opStatus FusedFloydAttentionGradGetWorkspaceSize(
    const opTensor* grad_output, const opTensor* query_ik, const opTensor* key_ij, const opTensor* value_ij,
    const opTensor* key_jk, const opTensor* value_jk, const opTensor* attention_out,
    const opTensor* softmax_max, const opTensor* softmax_sum, const opTensor* atten_mask, double scale_value,
    opTensor* dq, opTensor* dk1, opTensor* dv1, opTensor* dk2, opTensor* dv2, uint64_t* workspace_size,
    opExecutor** executor) {
  OP_CHECK_NOT_NULL(workspace_size);
  OP_CHECK_NOT_NULL(executor);
  *executor = nullptr;
  *workspace_size = 0;
  OP_TRY(FusedFloydAttentionGradCheckArguments(grad_output, query_ik, key_ij, value_ij, key_jk, value_jk,
                                               attention_out, softmax_max, softmax_sum, atten_mask, scale_value, dq,
                                               dk1, dv1, dk2, dv2));
  const Sizes s = sizes_of(*query_ik, *key_ij);
  const opDataType dt = query_ik->dtype;
  BwdPlan plan{};
  plan.dtype = dt;
  plan.B = s.B; plan.H = s.H; plan.N = s.N; plan.M = s.M; plan.K = s.K; plan.D = s.D;
  plan.scale = scale_value;
  plan.dy = grad_output->data; plan.q = query_ik->data; plan.k1 = key_ij->data; plan.v1 = value_ij->data;
  plan.k2 = key_jk->data; plan.v2 = value_jk->data; plan.o = attention_out->data;
  plan.softmax_max = softmax_max->data; plan.softmax_sum = softmax_sum->data;
  plan.mask = atten_mask != nullptr ? static_cast<const uint8_t*>(atten_mask->data) : nullptr;
  plan.dq = dq->data; plan.dk1 = dk1->data; plan.dv1 = dv1->data; plan.dk2 = dk2->data; plan.dv2 = dv2->data;
  uint64_t bytes = 0;
  // Work exists when any output is non-empty: dQ (N, M), dK1/dV1 (N, K), dK2/dV2 (K, M).
  if (s.B * s.H * s.D > 0 && (s.N * s.M > 0 || s.N * s.K > 0 || s.K * s.M > 0)) {
    const WorkspaceSizes ws = bwd_workspace(dt, s.N, s.M, s.K, s.D);
    plan.scratch_bytes = ws.slot;
    plan.shared_bytes = ws.shared;
    bytes = reserve_slots(ws.shared, ws.slot, &plan.threads);
  }
  *executor = new (std::nothrow) BwdExecutor(plan, bytes);
  if (*executor == nullptr) return fail(OP_ERR_RUNTIME_ERROR, "FusedFloydAttentionGrad: out of memory for the executor");
  *workspace_size = bytes;
  clear_error();
  return OP_SUCCESS;
}

opStatus FusedFloydAttentionGrad(void* workspace, uint64_t workspace_size, opExecutor* executor, opStream) {
  return op_plugin::run_executor(workspace, workspace_size, executor);
}
