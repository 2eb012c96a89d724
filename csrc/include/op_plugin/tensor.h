// Tensor descriptor and small value types of the kernel API (torch-free).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

// Values follow aclDataType so descriptors read the same as on the device.
enum opDataType : int32_t {
  OP_DT_FLOAT = 0,
  OP_DT_FLOAT16 = 1,
  OP_DT_INT8 = 2,
  OP_DT_INT32 = 3,
  OP_DT_UINT8 = 4,
  OP_DT_INT64 = 9,
  OP_DT_DOUBLE = 11,
  OP_DT_BOOL = 12,
  OP_DT_BF16 = 27,
  OP_DT_UNDEFINED = -1,
};

constexpr int OP_MAX_DIMS = 8;

// A view of memory owned by the caller. Strides are in elements, not bytes.
struct opTensor {
  void* data;
  opDataType dtype;
  int32_t ndim;
  int64_t shape[OP_MAX_DIMS];
  int64_t strides[OP_MAX_DIMS];
};

// An int[] argument; a null opIntArray* means None.
struct opIntArray {
  const int64_t* data;
  int64_t size;
};

// Reserved for a device queue; the CPU kernels run on the caller's thread pool (see parallel.h).
typedef void* opStream;

namespace op_plugin {

const char* dtype_name(opDataType dtype);
size_t dtype_size(opDataType dtype);
int64_t numel(const opTensor& t);
// Dense row-major (C-contiguous); size-1 dimensions may have any stride, empty tensors any.
bool is_contiguous(const opTensor& t);

// An optional argument of the generated <Op>Args as the C API passes it: nullptr when absent.
inline const opTensor* as_pointer(const std::optional<opTensor>& t) { return t.has_value() ? &*t : nullptr; }
// An optional int[] argument of <Op>Args as the C API passes it, viewed through *view.
inline const opIntArray* as_pointer(const std::optional<std::vector<int64_t>>& a, opIntArray* view) {
  if (!a.has_value()) return nullptr;
  *view = opIntArray{a->data(), static_cast<int64_t>(a->size())};
  return view;
}

}  // namespace op_plugin
