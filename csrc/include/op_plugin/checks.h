// What the generated <Kernel>CheckArguments (build/generated/kernels/<op>_checks.cpp) evaluates the
// registry's rules with: the expression language of codegen/expr.py over the kernel API's
// descriptors and values, and the message formatting the binding and the Python fake share
// (values printed as Python prints them), so all three raise the same text. Torch-free.
#pragma once
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "op_plugin/shape_expr.h"
#include "op_plugin/status.h"
#include "op_plugin/tensor.h"

namespace op_plugin::check {

// A rule that cannot be evaluated (a dimension out of range, an unguarded None): raised inside
// CheckArguments and returned as OP_ERR_PARAM_INVALID with its text, as torch raises in eager mode.
struct ArgumentError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ---- values -------------------------------------------------------------------------------------

// An optional argument's value; a rule reading a None argument lacks its `is not None` guard.
template <class T>
T* value_of(T* v, const char* name) {
  if (v == nullptr)
    throw ArgumentError(std::string("op_plugin registry rule reads optional argument '") + name +
                        "' without an 'is not None' guard, and it is None");
  return v;
}
inline std::string_view text(const char* s) { return s == nullptr ? std::string_view() : std::string_view(s); }
inline std::string_view text(const std::string& s) { return s; }

// ---- tensors (the methods of the expression language) -----------------------------------------

inline int64_t dim(const opTensor* t) { return t->ndim; }
int64_t size(const opTensor* t, int64_t d);  // negative d counts from the end, as torch
inline int64_t numel(const opTensor* t) { return op_plugin::numel(*t); }
inline std::vector<int64_t> shape(const opTensor* t) { return std::vector<int64_t>(t->shape, t->shape + t->ndim); }
inline opDataType stats_dtype(opDataType d) { return d == OP_DT_DOUBLE ? OP_DT_DOUBLE : OP_DT_FLOAT; }
inline opDataType stats_dtype(const opTensor* t) { return stats_dtype(t->dtype); }

// ---- functions --------------------------------------------------------------------------------

// The registry's `v in (a, b, ...)`: v evaluated once, compared with each alternative in order.
template <class X, class... Alts>
bool one_of(const X& v, const Alts&... alts) {
  return ((v == alts) || ...);
}

inline int64_t len(const opIntArray* a) { return a->size; }
inline int64_t len(const std::vector<int64_t>& shape) { return static_cast<int64_t>(shape.size()); }
// An int[] argument as a shape, for the shape operations (op_plugin/shape_expr.h) and comparisons.
inline std::vector<int64_t> ints(const opIntArray* a) { return std::vector<int64_t>(a->data, a->data + a->size); }
std::string upper(std::string_view s);
// Sequences of cumulative lengths without a leading 0: a trailing run of zeros drops batches.
int64_t varlen_batches(const opIntArray* cumulative);
// Sum over sequences of Sq*Skv, for cumulative lengths without a leading 0.
int64_t varlen_numels(const opIntArray* q_cumulative, const opIntArray* kv_cumulative);

// ---- descriptors: what only the kernel API has to check ------------------------------------------

// ndim within [0, OP_MAX_DIMS] and sizes >= 0: what the rules may read (run before them).
opStatus check_rank(const opTensor* t, const char* name);
// A known dtype, contiguous, data present unless empty: what the kernel reads (run after the rules,
// so a call the registry refuses gets the registry's text, as from the binding).
// kContiguous: row-major without gaps; kStrided (the registry's strided: inputs): any strides >= 0
// with a contiguous last dimension.
enum class Layout { kContiguous, kStrided };
opStatus check_memory(const opTensor* t, const char* name, Layout layout = Layout::kContiguous);
// An output has the shape and dtype its registry rule gives.
opStatus check_output(const opTensor* t, const char* name, const std::vector<int64_t>& shape, opDataType dtype);

// ---- messages ---------------------------------------------------------------------------------

inline int64_t fmt(int64_t v) { return v; }
inline int fmt(int v) { return v; }
std::string fmt(double v);  // Python's repr: the shortest round-trip text, "1.0" for integral values
inline const char* fmt(bool v) { return v ? "True" : "False"; }
inline std::string_view fmt(std::string_view v) { return v; }
inline const std::string& fmt(const std::string& v) { return v; }
inline const char* fmt(opDataType d) { return dtype_name(d); }
std::string fmt(const std::vector<int64_t>& shape);  // "[2, 3]"

template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream s;
  (s << ... << parts);
  return s.str();
}

// Warnings of `warn: true` rules go to the handler opSetWarningHandler installed (by default,
// standard error); `op` names the registry op.
void warn(const char* op, const std::string& message);

}  // namespace op_plugin::check
