#include "bindings/torch_glue.h"

#include "op_plugin/checks.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <sys/mman.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/core/Generator.h>
#include <c10/util/Exception.h>

#ifndef OP_PLUGIN_BUILD_FLAGS
#define OP_PLUGIN_BUILD_FLAGS "unknown"
#endif

namespace op_plugin {

opDataType to_op_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return OP_DT_FLOAT;
    case at::kHalf: return OP_DT_FLOAT16;
    case at::kBFloat16: return OP_DT_BF16;
    case at::kDouble: return OP_DT_DOUBLE;
    case at::kChar: return OP_DT_INT8;
    case at::kByte: return OP_DT_UINT8;
    case at::kInt: return OP_DT_INT32;
    case at::kLong: return OP_DT_INT64;
    case at::kBool: return OP_DT_BOOL;
    default: return OP_DT_UNDEFINED;
  }
}

opTensor to_op_tensor(const at::Tensor& t) {
  TORCH_CHECK(t.dim() <= OP_MAX_DIMS, "op_plugin kernels take at most ", OP_MAX_DIMS, " dimensions, got ", t.dim());
  opTensor d{};
  d.data = t.data_ptr();
  d.dtype = to_op_dtype(t.scalar_type());
  d.ndim = static_cast<int32_t>(t.dim());
  // torch calls a tensor contiguous whatever the stride of a size-1 dimension (a [1, 5, ...] slice
  // of a [1, 9, ...] tensor keeps stride 9*...); give such a dimension its contiguous stride, so
  // kernels comparing strides (an output with its input) see one layout.
  int64_t contiguous_stride = 1;
  for (int64_t i = t.dim() - 1; i >= 0; --i) {
    d.shape[i] = t.size(i);
    d.strides[i] = t.size(i) == 1 ? contiguous_stride : t.stride(i);
    contiguous_stride = d.strides[i] * t.size(i);
  }
  return d;
}

void check_status(opStatus status, const char* op) {
  if (status == OP_SUCCESS) return;
  TORCH_CHECK(false, op, ": ", opGetLastErrorMessage(), " (", status_name(status), ")");
}

namespace {
// The reused workspace of the calling thread: 64-byte aligned (as torch's allocator aligns), grown
// to the largest request up to Workspace::kReusedWorkspaceBytes; from 2 MiB on, 2 MiB aligned and
// advised as huge pages (malloc's small pages cost TLB misses; torch does the same for its large
// blocks under THP_MEM_ALLOC_ENABLE).
struct ThreadWorkspace {
  void* data = nullptr;
  uint64_t bytes = 0;
  ~ThreadWorkspace() { release(); }
  uint64_t release() {
    const uint64_t freed = bytes;
    std::free(data);
    data = nullptr;
    bytes = 0;
    return freed;
  }
  void* reserve(uint64_t want) {
    if (want > bytes) {
      constexpr uint64_t kHuge = uint64_t{2} << 20;
      const uint64_t align = want >= kHuge ? kHuge : 4096;
      const uint64_t rounded = (want + align - 1) / align * align;
      void* grown = std::aligned_alloc(align, rounded);
      TORCH_CHECK(grown != nullptr, "op_plugin: out of memory for a workspace of ", want, " bytes");
#ifdef MADV_HUGEPAGE  // Linux's transparent huge pages; elsewhere the buffer keeps the system's pages
      if (align == kHuge) madvise(grown, rounded, MADV_HUGEPAGE);
#endif
      std::free(data);
      data = grown;
      bytes = rounded;
    }
    return data;
  }
};
thread_local ThreadWorkspace t_workspace;
}  // namespace

uint64_t release_workspace() { return t_workspace.release(); }

Workspace::Workspace(uint64_t bytes) {
  if (bytes == 0) return;
  if (bytes <= kReusedWorkspaceBytes) {
    data_ = t_workspace.reserve(bytes);
  } else {
    large_ = at::empty({static_cast<int64_t>(bytes)}, at::TensorOptions().dtype(at::kByte));
    data_ = large_.data_ptr();
  }
}

std::string upper(c10::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

int64_t varlen_batches(at::IntArrayRef cumulative) {
  int64_t n = static_cast<int64_t>(cumulative.size());
  while (n > 0 && cumulative[n - 1] == 0) --n;  // a trailing run of zeros drops batches
  return n;
}

int64_t varlen_numels(at::IntArrayRef q_cumulative, at::IntArrayRef kv_cumulative) {
  const int64_t batches = std::min(varlen_batches(q_cumulative), varlen_batches(kv_cumulative));
  int64_t total = 0, q_prev = 0, kv_prev = 0;
  for (int64_t b = 0; b < batches; ++b) {
    total += (q_cumulative[b] - q_prev) * (kv_cumulative[b] - kv_prev);
    q_prev = q_cumulative[b];
    kv_prev = kv_cumulative[b];
  }
  return total;
}

void draw_seed_and_offset(uint64_t* seed, uint64_t* offset) {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  auto* cpu = at::check_generator<at::CPUGeneratorImpl>(gen);
  *seed = cpu->random64() >> 1;
  *offset = cpu->random64() >> 1;
}

std::string fmt(double v) { return check::fmt(v); }  // Python's repr, as the kernel API's messages

const char* fmt(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kBool: return "bool";
    default: return c10::toString(t);
  }
}

std::string fmt(at::IntArrayRef shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

namespace {

int torch_max_threads() { return at::get_num_threads(); }
int torch_thread_num() { return at::get_thread_num(); }
void torch_parallel_for(int64_t begin, int64_t end, int64_t grain,
                        void (*body)(void*, int64_t, int64_t), void* ctx) {
  at::parallel_for(begin, end, grain, [&](int64_t b, int64_t e) { body(ctx, b, e); });
}

const opParallelBackend torch_backend{torch_max_threads, torch_thread_num, torch_parallel_for};

}  // namespace

bool strict_mode() { return opGetStrictMode(); }
void set_strict_mode(bool enabled) { opSetStrictMode(enabled); }

void install_torch_parallel_backend() { opSetParallelBackend(&torch_backend); }

void install_torch_warning_handler() {
  // TORCH_WARN from inside stage 1: c10 sends it to the calling thread's handler (Python warnings).
  opSetWarningHandler([](const char* op, const char* message) { TORCH_WARN(op, ": ", message); });
}

std::string kernel_library_version() { return OP_PLUGIN_KERNELS_VERSION; }
std::string isa_level() { return isa_name(active_isa()); }
std::string build_flags() { return OP_PLUGIN_BUILD_FLAGS; }

}  // namespace op_plugin
