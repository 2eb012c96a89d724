#include "op_plugin/executor.h"

#include <memory>

void opDestroyExecutor(opExecutor* executor) { delete executor; }

namespace op_plugin {

opStatus run_executor(void* workspace, uint64_t workspace_size, opExecutor* executor) {
  if (executor == nullptr) return fail(OP_ERR_PARAM_NULLPTR, "executor must not be a null pointer");
  std::unique_ptr<opExecutor> owned(executor);  // single use: destroyed whatever happens
  const uint64_t needed = owned->workspace_size();
  if (workspace_size < needed)
    return fail(OP_ERR_RUNTIME_ERROR, owned->op_name(), ": workspace of ", workspace_size,
                " bytes is smaller than the ", needed, " bytes stage 1 asked for");
  if (needed > 0 && workspace == nullptr)
    return fail(OP_ERR_PARAM_NULLPTR, owned->op_name(), ": workspace must not be a null pointer");
  clear_error();
  return owned->execute(workspace);
}

}  // namespace op_plugin
