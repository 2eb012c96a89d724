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

opStatus FlashAttnMetadataGetWorkspaceSize(int64_t, int64_t, int64_t, const opTensor*, const opTensor*,
                                           const opTensor*, const opTensor*, const int64_t*, const int64_t*,
                                           const int64_t*, const int64_t*, const int64_t*, const int64_t*,
                                           const char*, const char*, const char*, bool, opTensor* metadata,
                                           uint64_t* workspace_size, opExecutor** executor) {
  OP_CHECK_NOT_NULL(metadata);
  OP_CHECK_NOT_NULL(workspace_size);
  OP_CHECK_NOT_NULL(executor);
  OP_CHECK(metadata->dtype == OP_DT_INT32 && metadata->ndim == 1, "metadata must be a 1D int32 tensor");
  OP_CHECK(op_plugin::is_contiguous(*metadata), "metadata must be contiguous");
  auto e = std::make_unique<ZeroFillExecutor>();
  e->out = *metadata;
  *workspace_size = 0;
  *executor = e.release();
  return OP_SUCCESS;
}

opStatus FlashAttnMetadata(void* workspace, uint64_t workspace_size, opExecutor* executor, opStream) {
  return op_plugin::run_executor(workspace, workspace_size, executor);
}
