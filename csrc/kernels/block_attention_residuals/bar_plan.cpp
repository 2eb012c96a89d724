// The plan heuristic shared by the forward and the backward.
#include "bar_plan.h"

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

}  // namespace bar
}  // namespace op_plugin
