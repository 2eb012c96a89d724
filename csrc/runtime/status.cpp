#include "op_plugin/status.h"

#include <string>

namespace {
thread_local std::string last_error;
}

const char* opGetLastErrorMessage() { return last_error.c_str(); }

namespace op_plugin {

opStatus fail_message(opStatus status, const char* message) {
  last_error = message;
  return status;
}

void clear_error() { last_error.clear(); }

const char* status_name(opStatus status) {
  switch (status) {
    case OP_SUCCESS: return "OP_SUCCESS";
    case OP_ERR_PARAM_NULLPTR: return "OP_ERR_PARAM_NULLPTR";
    case OP_ERR_PARAM_INVALID: return "OP_ERR_PARAM_INVALID";
    case OP_ERR_RUNTIME_ERROR: return "OP_ERR_RUNTIME_ERROR";
    case OP_ERR_TILING_ERROR: return "OP_ERR_TILING_ERROR";
  }
  return "OP_ERR_UNKNOWN";
}

}  // namespace op_plugin
