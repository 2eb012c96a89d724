// flash_attn_metadata: the device's core schedule. The CPU kernels need none, so the op returns
// the documented int32 zero tensor (SPEC §1.7), sized by the registry's output rule. The stage
// functions are the generated ones (op_plugin/ops/flash_attn_metadata_stages.inc).
#include <cstring>

#include "op_plugin/ops/flash_attn_metadata.h"

namespace op_plugin::ops {

struct FlashAttnMetadataKernel {
  struct Plan {};  // nothing to plan, no workspace
  static opStatus plan(FlashAttnMetadataArgs&, Plan*, WorkspaceLayout*) { return OP_SUCCESS; }
  static opStatus run(const FlashAttnMetadataArgs& args, const Plan&, void*) {
    std::memset(args.metadata.data, 0, static_cast<size_t>(numel(args.metadata)) * dtype_size(args.metadata.dtype));
    return OP_SUCCESS;
  }
};

}  // namespace op_plugin::ops

#include "op_plugin/ops/flash_attn_metadata_stages.inc"
