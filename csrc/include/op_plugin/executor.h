// The executor: the frozen plan that stage 1 (<Op>GetWorkspaceSize) hands to stage 2 (<Op>).
#pragma once
#include <cstdint>

#include "op_plugin/status.h"
#include "op_plugin/tensor.h"

// Single use: stage 2 runs it and destroys it, successful or not. A caller that never
// reaches stage 2 releases it with opDestroyExecutor.
struct opExecutor {
  virtual ~opExecutor() = default;
  virtual const char* op_name() const = 0;
  virtual uint64_t workspace_size() const = 0;
  // Computes into the tensors captured by stage 1. Never allocates.
  virtual opStatus execute(void* workspace) = 0;
};

extern "C" void opDestroyExecutor(opExecutor* executor);

namespace op_plugin {

// Stage 2 of every op: check the workspace, run, destroy the executor.
opStatus run_executor(void* workspace, uint64_t workspace_size, opExecutor* executor);

}  // namespace op_plugin
