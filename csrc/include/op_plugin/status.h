// Status codes and error messages of the op_plugin kernel library (torch-free).
// The codes follow aclnn's numbering so a CANN user recognises them.
#pragma once
#include <cstdint>
#include <sstream>
#include <string>

typedef int32_t opStatus;

enum : opStatus {
  OP_SUCCESS = 0,
  OP_ERR_PARAM_NULLPTR = 161001,   // a required pointer argument is null
  OP_ERR_PARAM_INVALID = 161002,   // dtype, shape, attribute or tensor contents break a rule
  OP_ERR_RUNTIME_ERROR = 361001,   // the executor or workspace handed to stage 2 is unusable
  OP_ERR_TILING_ERROR = 561002,    // no valid plan for these shapes
};

extern "C" {

// The message of the last failed call on this thread ("" after a success).
const char* opGetLastErrorMessage();

// Strict device-compat mode (SPEC Decision 3): stage 1 enforces the device's limits too (the
// registry's `strict: true` rules). Process-wide; starts from the environment variable
// OP_PLUGIN_STRICT=1.
void opSetStrictMode(bool enabled);
bool opGetStrictMode();

// Warnings of stage 1 (the registry's `warn: true` rules): `op` is the op's registry name. The
// default handler prints "op_plugin warning: <op>: <message>" to standard error; nullptr restores it.
typedef void (*opWarningHandler)(const char* op, const char* message);
void opSetWarningHandler(opWarningHandler handler);

}  // extern "C"

namespace op_plugin {

// Records `message` as this thread's last error and returns `status`, so kernels write
//   return fail(OP_ERR_PARAM_INVALID, "block_res must be 3D, but got ", nd, "D");
opStatus fail_message(opStatus status, const char* message);
void clear_error();

const char* status_name(opStatus status);

template <class... Parts>
opStatus fail(opStatus status, const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  return fail_message(status, message.str().c_str());
}

}  // namespace op_plugin

// Early-return helpers for stage 1. The message names the argument and the rule.
#define OP_CHECK_NOT_NULL(ptr)                                                              \
  do {                                                                                     \
    if ((ptr) == nullptr)                                                                   \
      return ::op_plugin::fail(OP_ERR_PARAM_NULLPTR, #ptr " must not be a null pointer");   \
  } while (0)
#define OP_CHECK(cond, ...)                                                                 \
  do {                                                                                     \
    if (!(cond)) return ::op_plugin::fail(OP_ERR_PARAM_INVALID, __VA_ARGS__);               \
  } while (0)
// Returns the status of `expr` unless it is OP_SUCCESS: the one way stage-1 helpers propagate errors.
#define OP_TRY(expr)                                          \
  do {                                                        \
    const opStatus op_try_status_ = (expr);                   \
    if (op_try_status_ != OP_SUCCESS) return op_try_status_;  \
  } while (0)
