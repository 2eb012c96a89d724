// The plan heuristic and the stage-1 input checks shared by the forward and the backward.
#include "bar_plan.h"

#include <sstream>
#include <string>

namespace op_plugin {
namespace bar {

Plan make_plan(const Shape& shape, uint64_t output_bytes, Isa isa) {
  Plan plan;
  plan.isa = isa;
  plan.stream_stores = output_bytes >= kStreamingStoreMinBytes;
  if (shape.T <= 0) return plan;  // rows_per_chunk = 1, num_chunks = 0
  const int64_t row_elements = (shape.N + 1) * (shape.H > 0 ? shape.H : 1);
  const int64_t by_count = (shape.T + kMaxChunks - 1) / kMaxChunks;
  const int64_t by_size = (kMinChunkElements + row_elements - 1) / row_elements;
  plan.rows_per_chunk = by_count > by_size ? by_count : by_size;
  if (plan.rows_per_chunk > shape.T) plan.rows_per_chunk = shape.T;
  plan.num_chunks = (shape.T + plan.rows_per_chunk - 1) / plan.rows_per_chunk;
  return plan;
}

namespace {

std::string shape_text(const opTensor& t) {
  std::ostringstream s;
  s << "[";
  for (int d = 0; d < t.ndim; ++d) s << (d ? ", " : "") << t.shape[d];
  s << "]";
  return s.str();
}

}  // namespace

opStatus check_tensor(const char* op, const char* name, const opTensor* t, opDataType dtype,
                      const int64_t* dims, int ndim, const char* dims_text) {
  if (t == nullptr) return fail(OP_ERR_PARAM_NULLPTR, op, ": ", name, " must not be a null pointer");
  if (t->dtype != dtype)
    return fail(OP_ERR_PARAM_INVALID, op, ": ", name, " must have dtype ", dtype_name(dtype),
                ", but got ", dtype_name(t->dtype));
  bool same = t->ndim == ndim;
  for (int d = 0; same && d < ndim; ++d) same = t->shape[d] == dims[d];
  if (!same) {
    std::ostringstream want;
    want << "[";
    for (int d = 0; d < ndim; ++d) want << (d ? ", " : "") << dims[d];
    want << "]";
    if (t->ndim < 0 || t->ndim > OP_MAX_DIMS)
      return fail(OP_ERR_PARAM_INVALID, op, ": ", name, " must have shape ", dims_text, " = ",
                  want.str(), ", but has ndim ", t->ndim);
    return fail(OP_ERR_PARAM_INVALID, op, ": ", name, " must have shape ", dims_text, " = ",
                want.str(), ", but got ", shape_text(*t));
  }
  if (!is_contiguous(*t))
    return fail(OP_ERR_PARAM_INVALID, op, ": ", name, " must be contiguous");
  if (t->data == nullptr && numel(*t) > 0)
    return fail(OP_ERR_PARAM_NULLPTR, op, ": ", name, "->data must not be a null pointer");
  return OP_SUCCESS;
}

opStatus check_inputs(const char* op, const opTensor* partial_block, const opTensor* block_res,
                      const opTensor* proj_weight, const opTensor* norm_weight, Shape* shape) {
  if (partial_block == nullptr)
    return fail(OP_ERR_PARAM_NULLPTR, op, ": partial_block must not be a null pointer");
  if (block_res == nullptr)
    return fail(OP_ERR_PARAM_NULLPTR, op, ": block_res must not be a null pointer");
  if (proj_weight == nullptr)
    return fail(OP_ERR_PARAM_NULLPTR, op, ": proj_weight must not be a null pointer");
  if (norm_weight == nullptr)
    return fail(OP_ERR_PARAM_NULLPTR, op, ": norm_weight must not be a null pointer");

  const opDataType dtype = partial_block->dtype;
  if (dtype != OP_DT_FLOAT16 && dtype != OP_DT_BF16 && dtype != OP_DT_FLOAT && dtype != OP_DT_DOUBLE)
    return fail(OP_ERR_PARAM_INVALID, op,
                ": partial_block must have dtype float16, bfloat16, float32 or float64, but got ",
                dtype_name(dtype));
  if (partial_block->ndim != 2)
    return fail(OP_ERR_PARAM_INVALID, op, ": partial_block must be 2D [T, H], but got ",
                partial_block->ndim, "D");
  if (block_res->ndim != 3)
    return fail(OP_ERR_PARAM_INVALID, op, ": block_res must be 3D [T, N, H], but got ",
                block_res->ndim, "D");
  Shape s;
  s.T = partial_block->shape[0];
  s.H = partial_block->shape[1];
  s.N = block_res->shape[1];
  if (s.T < 0 || s.H < 0 || s.N < 0)
    return fail(OP_ERR_PARAM_INVALID, op, ": sizes must be non-negative, but got T=", s.T,
                ", N=", s.N, ", H=", s.H);

  const int64_t partial_dims[2] = {s.T, s.H};
  opStatus status =
      check_tensor(op, "partial_block", partial_block, dtype, partial_dims, 2, "[T, H]");
  if (status != OP_SUCCESS) return status;
  const int64_t res_dims[3] = {s.T, s.N, s.H};
  status = check_tensor(op, "block_res", block_res, dtype, res_dims, 3, "[T, N, H]");
  if (status != OP_SUCCESS) return status;
  const int64_t h_dims[2] = {1, s.H};
  if (proj_weight->ndim == 2)
    status = check_tensor(op, "proj_weight", proj_weight, dtype, h_dims, 2, "[1, H]");
  else
    status = check_tensor(op, "proj_weight", proj_weight, dtype, h_dims + 1, 1, "[H] (or [1, H])");
  if (status != OP_SUCCESS) return status;
  status = check_tensor(op, "norm_weight", norm_weight, dtype, h_dims + 1, 1, "[H]");
  if (status != OP_SUCCESS) return status;
  *shape = s;
  return OP_SUCCESS;
}

}  // namespace bar
}  // namespace op_plugin
