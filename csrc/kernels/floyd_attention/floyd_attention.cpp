// Fused Floyd attention: the aclnn-style two-stage API. Stage 1 checks the arguments, freezes a
// plan (FwdPlan/BwdPlan) and sizes the per-thread workspace; stage 2 runs the plan through the
// ISA build chosen by op_plugin::active_isa() (float64 always runs the portable build).
#include <new>
#include <sstream>

#include "floyd_attention.h"
#include "op_plugin/op_api.h"
#include "op_plugin/ops/fused_floyd_attention.h"
#include "op_plugin/ops/fused_floyd_attention_grad.h"

namespace op_plugin {
namespace floyd {
namespace {

bool is_floating(opDataType t) {
  return t == OP_DT_FLOAT || t == OP_DT_FLOAT16 || t == OP_DT_BF16 || t == OP_DT_DOUBLE;
}

// Stats dtype for a given input dtype: float32, float64 for float64 inputs (SPEC Decision 2).
opDataType stats_dtype(opDataType t) { return t == OP_DT_DOUBLE ? OP_DT_DOUBLE : OP_DT_FLOAT; }

struct Dims { int64_t v[5]; };

void append_shape(std::ostringstream& os, const int64_t* s, int n) {
  os << '[';
  for (int i = 0; i < n; ++i) os << (i ? ", " : "") << s[i];
  os << ']';
}

// Checks rank 5, the exact shape (`letters` names the axes, `origin` says where they come from),
// the dtype and contiguity of one tensor.
opStatus check_tensor(const opTensor& t, const char* name, const Dims& want, const char* letters,
                      const char* origin, opDataType dtype, const char* dtype_rule) {
  if (t.ndim != 5) return fail(OP_ERR_PARAM_INVALID, name, " must be 5D ", letters, ", but got ", t.ndim, "D");
  for (int i = 0; i < 5; ++i)
    if (t.shape[i] != want.v[i]) {
      std::ostringstream os;
      os << name << " must have shape " << letters << " = ";
      append_shape(os, want.v, 5);
      os << " (" << origin << "), but got ";
      append_shape(os, t.shape, 5);
      return fail_message(OP_ERR_PARAM_INVALID, os.str().c_str());
    }
  if (t.dtype != dtype)
    return fail(OP_ERR_PARAM_INVALID, "dtype of ", name, " must be ", dtype_name(dtype), " (", dtype_rule,
                "), but got ", dtype_name(t.dtype));
  if (!is_contiguous(t)) return fail(OP_ERR_PARAM_INVALID, name, " must be contiguous");
  if (numel(t) > 0 && t.data == nullptr)
    return fail(OP_ERR_PARAM_NULLPTR, name, " has ", numel(t), " elements but a null data pointer");
  return OP_SUCCESS;
}

#define FLOYD_TRY(expr)                  \
  do {                                   \
    const opStatus floyd_status_ = (expr); \
    if (floyd_status_ != OP_SUCCESS) return floyd_status_; \
  } while (0)

// Sizes from query_ik [B,H,N,M,D] and key_ij [B,H,N,K,D]; validates both, the values and key_jk /
// value_jk [B,H,K,M,D], and the optional mask [B,1,N,1,K].
struct Sizes { int64_t B, H, N, M, K, D; };

opStatus check_inputs(const opTensor* q, const opTensor* k1, const opTensor* v1, const opTensor* k2,
                      const opTensor* v2, const opTensor* mask, Sizes* sz) {
  if (q->ndim != 5)
    return fail(OP_ERR_PARAM_INVALID, "query_ik must be 5D [B,H,N,M,D], but got ", q->ndim, "D");
  if (!is_floating(q->dtype))
    return fail(OP_ERR_PARAM_INVALID, "dtype of query_ik must be float16, bfloat16, float32 or float64, but got ",
                dtype_name(q->dtype));
  for (int i = 0; i < 5; ++i)
    if (q->shape[i] < 0) return fail(OP_ERR_PARAM_INVALID, "query_ik has a negative size at dim ", i);
  if (k1->ndim != 5)
    return fail(OP_ERR_PARAM_INVALID, "key_ij must be 5D [B,H,N,K,D], but got ", k1->ndim, "D");
  if (k1->shape[3] < 0) return fail(OP_ERR_PARAM_INVALID, "key_ij has a negative size at dim 3");
  const int64_t B = q->shape[0], H = q->shape[1], N = q->shape[2], M = q->shape[3], D = q->shape[4];
  const int64_t K = k1->shape[3];
  *sz = Sizes{B, H, N, M, K, D};
  const opDataType dt = q->dtype;
  const char* same = "the same as query_ik";
  FLOYD_TRY(check_tensor(*k1, "key_ij", Dims{{B, H, N, K, D}}, "[B,H,N,K,D]",
                         "B,H,N,D from query_ik, K = key_ij.size(3)", dt, same));
  FLOYD_TRY(check_tensor(*v1, "value_ij", Dims{{B, H, N, K, D}}, "[B,H,N,K,D]", "same shape as key_ij", dt, same));
  FLOYD_TRY(check_tensor(*k2, "key_jk", Dims{{B, H, K, M, D}}, "[B,H,K,M,D]",
                         "B,H,M,D from query_ik, K from key_ij", dt, same));
  FLOYD_TRY(check_tensor(*v2, "value_jk", Dims{{B, H, K, M, D}}, "[B,H,K,M,D]", "same shape as key_jk", dt, same));
  FLOYD_TRY(check_tensor(*q, "query_ik", Dims{{B, H, N, M, D}}, "[B,H,N,M,D]", "itself", dt, same));
  if (mask != nullptr) {
    const opDataType mt = mask->dtype == OP_DT_UINT8 ? OP_DT_UINT8 : OP_DT_BOOL;
    FLOYD_TRY(check_tensor(*mask, "atten_mask", Dims{{B, 1, N, 1, K}}, "[B,1,N,1,K]",
                           "B,N from query_ik, K from key_ij", mt, "bool or uint8"));
  }
  return OP_SUCCESS;
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
    FLOYD_TRY(check_threads(op_name(), plan_.threads));
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
    FLOYD_TRY(check_threads(op_name(), plan_.threads));
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
  OP_CHECK_NOT_NULL(query_ik);
  OP_CHECK_NOT_NULL(key_ij);
  OP_CHECK_NOT_NULL(value_ij);
  OP_CHECK_NOT_NULL(key_jk);
  OP_CHECK_NOT_NULL(value_jk);
  OP_CHECK_NOT_NULL(softmax_max);
  OP_CHECK_NOT_NULL(softmax_sum);
  OP_CHECK_NOT_NULL(attention_out);
  Sizes s{};
  FLOYD_TRY(check_inputs(query_ik, key_ij, value_ij, key_jk, value_jk, atten_mask, &s));
  const opDataType dt = query_ik->dtype, st = stats_dtype(dt);
  const char* stats_rule = dt == OP_DT_DOUBLE ? "float64 for float64 inputs" : "float32 statistics";
  FLOYD_TRY(check_tensor(*softmax_max, "softmax_max", Dims{{s.B, s.H, s.N, s.M, 8}}, "[B,H,N,M,8]",
                         "from query_ik", st, stats_rule));
  FLOYD_TRY(check_tensor(*softmax_sum, "softmax_sum", Dims{{s.B, s.H, s.N, s.M, 8}}, "[B,H,N,M,8]",
                         "from query_ik", st, stats_rule));
  FLOYD_TRY(check_tensor(*attention_out, "attention_out", Dims{{s.B, s.H, s.N, s.M, s.D}}, "[B,H,N,M,D]",
                         "same shape as query_ik", dt, "the same as query_ik"));
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
  OP_CHECK_NOT_NULL(grad_output);
  OP_CHECK_NOT_NULL(query_ik);
  OP_CHECK_NOT_NULL(key_ij);
  OP_CHECK_NOT_NULL(value_ij);
  OP_CHECK_NOT_NULL(key_jk);
  OP_CHECK_NOT_NULL(value_jk);
  OP_CHECK_NOT_NULL(attention_out);
  OP_CHECK_NOT_NULL(softmax_max);
  OP_CHECK_NOT_NULL(softmax_sum);
  OP_CHECK_NOT_NULL(dq);
  OP_CHECK_NOT_NULL(dk1);
  OP_CHECK_NOT_NULL(dv1);
  OP_CHECK_NOT_NULL(dk2);
  OP_CHECK_NOT_NULL(dv2);
  Sizes s{};
  FLOYD_TRY(check_inputs(query_ik, key_ij, value_ij, key_jk, value_jk, atten_mask, &s));
  const opDataType dt = query_ik->dtype, st = stats_dtype(dt);
  const char* same = "the same as query_ik";
  const char* stats_rule = dt == OP_DT_DOUBLE ? "float64 for float64 inputs" : "float32 statistics";
  const Dims qd{{s.B, s.H, s.N, s.M, s.D}}, k1d{{s.B, s.H, s.N, s.K, s.D}}, k2d{{s.B, s.H, s.K, s.M, s.D}};
  const Dims sd{{s.B, s.H, s.N, s.M, 8}};
  FLOYD_TRY(check_tensor(*grad_output, "grad_output", qd, "[B,H,N,M,D]", "same shape as query_ik", dt, same));
  FLOYD_TRY(check_tensor(*attention_out, "attention_out", qd, "[B,H,N,M,D]", "same shape as query_ik", dt, same));
  FLOYD_TRY(check_tensor(*softmax_max, "softmax_max", sd, "[B,H,N,M,8]", "from query_ik", st, stats_rule));
  FLOYD_TRY(check_tensor(*softmax_sum, "softmax_sum", sd, "[B,H,N,M,8]", "same shape as softmax_max", st, stats_rule));
  FLOYD_TRY(check_tensor(*dq, "dq", qd, "[B,H,N,M,D]", "same shape as query_ik", dt, same));
  FLOYD_TRY(check_tensor(*dk1, "dk1", k1d, "[B,H,N,K,D]", "same shape as key_ij", dt, same));
  FLOYD_TRY(check_tensor(*dv1, "dv1", k1d, "[B,H,N,K,D]", "same shape as value_ij", dt, same));
  FLOYD_TRY(check_tensor(*dk2, "dk2", k2d, "[B,H,K,M,D]", "same shape as key_jk", dt, same));
  FLOYD_TRY(check_tensor(*dv2, "dv2", k2d, "[B,H,K,M,D]", "same shape as value_jk", dt, same));
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
