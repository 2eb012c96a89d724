#include "op_plugin/tensor.h"

namespace op_plugin {

const char* dtype_name(opDataType dtype) {
  switch (dtype) {
    case OP_DT_FLOAT: return "float32";
    case OP_DT_FLOAT16: return "float16";
    case OP_DT_BF16: return "bfloat16";
    case OP_DT_DOUBLE: return "float64";
    case OP_DT_INT8: return "int8";
    case OP_DT_UINT8: return "uint8";
    case OP_DT_INT32: return "int32";
    case OP_DT_INT64: return "int64";
    case OP_DT_BOOL: return "bool";
    case OP_DT_UNDEFINED: break;
  }
  return "undefined";
}

size_t dtype_size(opDataType dtype) {
  switch (dtype) {
    case OP_DT_INT8: case OP_DT_UINT8: case OP_DT_BOOL: return 1;
    case OP_DT_FLOAT16: case OP_DT_BF16: return 2;
    case OP_DT_FLOAT: case OP_DT_INT32: return 4;
    case OP_DT_DOUBLE: case OP_DT_INT64: return 8;
    case OP_DT_UNDEFINED: break;
  }
  return 0;
}

int64_t numel(const opTensor& t) {
  int64_t n = 1;
  for (int d = 0; d < t.ndim; ++d) n *= t.shape[d];
  return n;
}

bool is_contiguous(const opTensor& t) {
  if (numel(t) == 0) return true;  // no element to address: any strides will do
  int64_t expected = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.shape[d];
  }
  return true;
}

}  // namespace op_plugin
