// The hand-written half of the op_api layer: what every generated binding uses to talk to the
// kernel library (descriptors, status -> exception, argument conversion) and to render the
// registry's error messages exactly as the Python fakes do.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>
#include <c10/util/OptionalArrayRef.h>

#include "op_plugin/op_api.h"
#include "op_plugin/shape_expr.h"  // the registry's shape operations (s[i], s[a:b], s + t)

namespace op_plugin {

// ---- kernel API glue --------------------------------------------------------------------------

opDataType to_op_dtype(at::ScalarType t);
// A descriptor of `t`'s memory; the tensor must outlive every use of the descriptor.
opTensor to_op_tensor(const at::Tensor& t);

// An input the registry lists under `strided:` as its kernel reads it: the tensor itself when its
// last dimension is contiguous (the kernel takes the other strides), else a contiguous copy.
inline at::Tensor unit_last_stride(const at::Tensor& t) {
  return t.dim() == 0 || t.size(-1) <= 1 || t.stride(-1) == 1 ? t : t.contiguous();
}
// Throws a RuntimeError "<op>: <kernel message> (<status name>)" unless status is OP_SUCCESS.
void check_status(opStatus status, const char* op);

struct ExecutorDeleter {
  void operator()(opExecutor* e) const { opDestroyExecutor(e); }
};
using ExecutorPtr = std::unique_ptr<opExecutor, ExecutorDeleter>;

// Stage 2's workspace. One of up to kReusedWorkspaceBytes reuses a buffer kept per thread, grown
// to the largest request: a fresh allocation per call is mapped by malloc or torch's allocator and
// faulted in page by page. A few hundred KB of faults cost a decode-size Floyd backward several
// times its kernel time; the bf16 training step's 16 MB backward workspace (S=4096, GQA) took
// about 4,300 faults a call under THP_MEM_ALLOC_ENABLE, 4-5 ms of a 12 ms window backward; the
// Floyd backward's 213 MiB at B1 H4 N=M=K=256 D64 (float32 at every level, bf16 below avx512_amx)
// made its fwd+bwd 7-10% slower when allocated per call (docs/decisions.md, "Stage 2's
// workspace"). So each thread that calls ops keeps up to 256 MiB until release_workspace(). The
// buffer is on huge pages (madvise; THP's usual mode is "madvise"): on small ones Floyd's strided
// tile rows miss the TLB, which is why torch's huge-page allocation had measured faster for its
// workspace. Larger workspaces come from torch's allocator per call. A call finishes with its
// workspace before it returns and kernels call no op, so one buffer per thread is enough.
class Workspace {
 public:
  static constexpr uint64_t kReusedWorkspaceBytes = uint64_t{256} << 20;
  explicit Workspace(uint64_t bytes);
  void* data() const { return data_; }

 private:
  at::Tensor large_;  // set only above kReusedWorkspaceBytes
  void* data_ = nullptr;
};

// str / str? argument -> a NUL-terminated const char* (nullptr for None).
class OptionalString {
 public:
  explicit OptionalString(c10::string_view s) : value_(std::string(s)) {}
  explicit OptionalString(const std::optional<c10::string_view>& s) {
    if (s) value_ = std::string(*s);
  }
  const char* get() const { return value_ ? value_->c_str() : nullptr; }

 private:
  std::optional<std::string> value_;
};

// int[] / int[]? argument -> const opIntArray* (nullptr for None).
class OptionalIntArray {
 public:
  explicit OptionalIntArray(at::IntArrayRef a) : has_(true), array_{a.data(), static_cast<int64_t>(a.size())} {}
  explicit OptionalIntArray(at::OptionalIntArrayRef a) : has_(a.has_value()) {
    if (has_) array_ = {a->data(), static_cast<int64_t>(a->size())};
  }
  const opIntArray* get() const { return has_ ? &array_ : nullptr; }

 private:
  bool has_;
  opIntArray array_{nullptr, 0};
};

// ---- functions of the registry's expression language (codegen/expr.py) ------------------------

// An optional argument's value in a rule; a rule reading a None argument is a registry bug
// (a missing `when: x is not None`), reported as such instead of reading an empty optional.
template <class T>
const T& value_of(const std::optional<T>& v, const char* name) {
  TORCH_CHECK(v.has_value(), "op_plugin registry rule reads optional argument '", name,
              "' without an 'is not None' guard, and it is None");
  return *v;
}
inline at::IntArrayRef value_of(const at::OptionalIntArrayRef& v, const char* name) {
  TORCH_CHECK(v.has_value(), "op_plugin registry rule reads optional argument '", name,
              "' without an 'is not None' guard, and it is None");
  return *v;
}

// The registry's `v in (a, b, ...)`: v evaluated once, compared with each alternative in order.
template <class X, class... Alts>
bool one_of(const X& v, const Alts&... alts) {
  return ((v == alts) || ...);
}

// Statistics (lse, max/sum, inv_norm, probs) are float32, float64 for float64 inputs.
inline at::ScalarType stats_dtype(const at::Tensor& t) {
  return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}
std::string upper(c10::string_view s);
// The registry's varlen_batches(q): the sequences of cumulative lengths without a leading 0, a
// trailing run of zeros dropping batches ([2, 5, 9, 0, 0] is 3), as the kernel reads them; and
// varlen_numels(q, kv): the sum over those sequences of Sq*Skv (op_plugin/_runtime.py).
int64_t varlen_batches(at::IntArrayRef cumulative);
int64_t varlen_numels(at::IntArrayRef q_cumulative, at::IntArrayRef kv_cumulative);
// The (seed, offset) of an op with 'random:', from torch's default CPU generator (so
// torch.manual_seed reproduces the call); both non-negative as Python ints.
void draw_seed_and_offset(uint64_t* seed, uint64_t* offset);

// Values in messages, printed as Python prints them (op_plugin/_runtime.py::_fmt).
inline int64_t fmt(int64_t v) { return v; }
inline int fmt(int v) { return v; }
std::string fmt(double v);
inline const char* fmt(bool v) { return v ? "True" : "False"; }
inline std::string fmt(c10::string_view v) { return std::string(v); }
inline const std::string& fmt(const std::string& v) { return v; }
const char* fmt(at::ScalarType t);
std::string fmt(at::IntArrayRef shape);
template <class T>
std::string fmt(const std::optional<T>& v) {
  if (!v) return "None";
  std::ostringstream s;
  s << fmt(*v);
  return s.str();
}

// ---- the generated Autograd kernels (bindings/<op>_autograd.cpp) --------------------------------

// An optional tensor as saved for backward (undefined for None), and back.
inline at::Tensor as_tensor(const std::optional<at::Tensor>& t) { return t.has_value() ? *t : at::Tensor(); }
inline std::optional<at::Tensor> as_optional(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}
inline bool is_defined(const std::optional<at::Tensor>& t) { return t.has_value() && t->defined(); }

// Whether a tensor carries a forward-mode tangent (torch.func.jvp, torch.autograd.forward_ad), read
// as torchgen's isFwGradDefined reads it (level 0: forward AD has one level at a time).
inline bool has_forward_grad(const at::Tensor& t) { return t.defined() && t._fw_grad(/*level=*/0).defined(); }
inline bool has_forward_grad(const std::optional<at::Tensor>& t) { return t.has_value() && has_forward_grad(*t); }

// saved_value: a dispatcher argument as the saved struct keeps it (owning); as_argument: back.
inline int64_t saved_value(int64_t v) { return v; }
inline c10::SymInt saved_value(const c10::SymInt& v) { return v; }  // an int output of the forward
inline double saved_value(double v) { return v; }
inline bool saved_value(bool v) { return v; }
inline std::string saved_value(c10::string_view v) { return std::string(v); }
inline std::optional<std::string> saved_value(const std::optional<c10::string_view>& v) {
  return v ? std::optional<std::string>(std::string(*v)) : std::nullopt;
}
inline std::optional<int64_t> saved_value(std::optional<int64_t> v) { return v; }
inline std::optional<double> saved_value(std::optional<double> v) { return v; }
inline std::vector<int64_t> saved_value(at::IntArrayRef v) { return v.vec(); }
inline std::optional<std::vector<int64_t>> saved_value(at::OptionalIntArrayRef v) {
  return v ? std::optional<std::vector<int64_t>>(v->vec()) : std::nullopt;
}

inline int64_t as_argument(int64_t v) { return v; }
inline const c10::SymInt& as_argument(const c10::SymInt& v) { return v; }
inline double as_argument(double v) { return v; }
inline bool as_argument(bool v) { return v; }
inline c10::string_view as_argument(const std::string& v) { return v; }
inline std::optional<c10::string_view> as_argument(const std::optional<std::string>& v) {
  return v ? std::optional<c10::string_view>(*v) : std::nullopt;
}
inline std::optional<int64_t> as_argument(const std::optional<int64_t>& v) { return v; }
inline std::optional<double> as_argument(const std::optional<double>& v) { return v; }
inline at::IntArrayRef as_argument(const std::vector<int64_t>& v) { return v; }
inline at::OptionalIntArrayRef as_argument(const std::optional<std::vector<int64_t>>& v) {
  return v ? at::OptionalIntArrayRef(*v) : at::OptionalIntArrayRef();
}

// ---- process-wide state -----------------------------------------------------------------------

// Strict device-compat mode (SPEC Decision 3): the kernel library's flag (opGetStrictMode), so the
// binding, the fake and stage 1 enforce the same limits; starts from OP_PLUGIN_STRICT=1.
bool strict_mode();
void set_strict_mode(bool enabled);

// Lets the kernels run on torch's intra-op pool, so torch.set_num_threads is obeyed.
void install_torch_parallel_backend();
// Stage 1's warnings (the registry's `warn: true` rules) become torch warnings, "<op>: <message>".
void install_torch_warning_handler();

// Frees the calling thread's reused workspace buffer; returns its bytes (0 if it had none).
uint64_t release_workspace();

std::string kernel_library_version();
std::string isa_level();
std::string build_flags();

}  // namespace op_plugin
