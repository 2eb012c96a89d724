// flash_attn_metadata: the device's core schedule. The CPU kernels need none, so the op returns
// the documented int32 zero tensor (SPEC §1.7); the binding has sized it from the registry rule.
#include "op_plugin/ops/flash_attn_metadata.h"

#include <cstring>
#include <memory>

namespace {

struct ZeroFillExecutor final : opExecutor {
  opTensor out{};
  const char* op_name() const override { return "flash_attn_metadata"; }
  uint64_t workspace_size() const override { return 0; }
  opStatus execute(void*) override {
    std::memset(out.data, 0, static_cast<size_t>(op_plugin::numel(out)) * op_plugin::dtype_size(out.dtype));
    return OP_SUCCESS;
  }
};

}  // namespace

opStatus FlashAttnMetadataGetWorkspaceSize(int64_t num_heads_q, int64_t num_heads_kv, int64_t head_dim,
                                           const opTensor* cu_seqlens_q, const opTensor* cu_seqlens_kv,
                                           const opTensor* seqused_q, const opTensor* seqused_kv,
                                           const int64_t* batch_size, const int64_t* max_seqlen_q,
                                           const int64_t* max_seqlen_kv, const int64_t* mask_mode,
                                           const int64_t* win_left, const int64_t* win_right, const char* layout_q,
                                           const char* layout_kv, const char* layout_out, bool is_grad_enabled,
                                           opTensor* metadata, uint64_t* workspace_size, opExecutor** executor) {
  OP_CHECK_NOT_NULL(workspace_size);
  OP_CHECK_NOT_NULL(executor);
  *workspace_size = 0;
  *executor = nullptr;
  OP_TRY(FlashAttnMetadataCheckArguments(num_heads_q, num_heads_kv, head_dim, cu_seqlens_q, cu_seqlens_kv, seqused_q,
                                         seqused_kv, batch_size, max_seqlen_q, max_seqlen_kv, mask_mode, win_left,
                                         win_right, layout_q, layout_kv, layout_out, is_grad_enabled, metadata));
  auto e = std::make_unique<ZeroFillExecutor>();
  e->out = *metadata;
  *executor = e.release();
  return OP_SUCCESS;
}

opStatus FlashAttnMetadata(void* workspace, uint64_t workspace_size, opExecutor* executor, opStream) {
  return op_plugin::run_executor(workspace, workspace_size, executor);
}
