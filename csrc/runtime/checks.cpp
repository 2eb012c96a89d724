#include "op_plugin/checks.h"

#include <atomic>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>

namespace {

std::atomic<bool>& strict_flag() {
  static std::atomic<bool> flag{[] {
    const char* env = std::getenv("OP_PLUGIN_STRICT");
    return env != nullptr && std::string(env) == "1";
  }()};
  return flag;
}

void print_warning(const char* op, const char* message) { std::fprintf(stderr, "op_plugin warning: %s: %s\n", op, message); }

std::atomic<opWarningHandler> warning_handler{print_warning};

}  // namespace

void opSetStrictMode(bool enabled) { strict_flag().store(enabled); }
bool opGetStrictMode() { return strict_flag().load(); }
void opSetWarningHandler(opWarningHandler handler) { warning_handler.store(handler != nullptr ? handler : print_warning); }

namespace op_plugin::check {

int64_t size(const opTensor* t, int64_t d) {
  const int64_t n = t->ndim;
  if (d < -n || d >= n || n == 0)
    throw ArgumentError(concat("Dimension out of range (expected to be in range of [", -n, ", ", n - 1, "], but got ",
                               d, ")"));
  return t->shape[d < 0 ? d + n : d];
}

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

int64_t varlen_batches(const opIntArray* cumulative) {
  int64_t n = cumulative->size;
  while (n > 0 && cumulative->data[n - 1] == 0) --n;
  return n;
}

int64_t varlen_numels(const opIntArray* q_cumulative, const opIntArray* kv_cumulative) {
  int64_t total = 0, q_prev = 0, kv_prev = 0;
  const int64_t nq = varlen_batches(q_cumulative), nkv = varlen_batches(kv_cumulative);
  const int64_t n = nq < nkv ? nq : nkv;
  for (int64_t b = 0; b < n; ++b) {
    total += (q_cumulative->data[b] - q_prev) * (kv_cumulative->data[b] - kv_prev);
    q_prev = q_cumulative->data[b];
    kv_prev = kv_cumulative->data[b];
  }
  return total;
}

opStatus check_rank(const opTensor* t, const char* name) {
  if (t->ndim < 0 || t->ndim > OP_MAX_DIMS)
    return fail(OP_ERR_PARAM_INVALID, name, " must have 0 to ", OP_MAX_DIMS, " dimensions, but has ndim ", t->ndim);
  for (int d = 0; d < t->ndim; ++d)
    if (t->shape[d] < 0) return fail(OP_ERR_PARAM_INVALID, name, " has a negative size ", t->shape[d], " at dim ", d);
  return OP_SUCCESS;
}

opStatus check_memory(const opTensor* t, const char* name, Layout layout) {
  if (dtype_size(t->dtype) == 0)
    return fail(OP_ERR_PARAM_INVALID, name, " has an unknown dtype (", static_cast<int>(t->dtype), ")");
  if (layout == Layout::kContiguous && !is_contiguous(*t)) return fail(OP_ERR_PARAM_INVALID, name, " must be contiguous");
  if (layout == Layout::kStrided) {
    for (int d = 0; d < t->ndim; ++d)
      if (t->strides[d] < 0)
        return fail(OP_ERR_PARAM_INVALID, name, " must have strides >= 0, but has stride ", t->strides[d], " at dim ", d);
    if (t->ndim > 0 && t->shape[t->ndim - 1] > 1 && t->strides[t->ndim - 1] != 1)
      return fail(OP_ERR_PARAM_INVALID, name, " must have a contiguous last dimension, but has stride ",
                  t->strides[t->ndim - 1]);
  }
  if (t->data == nullptr && op_plugin::numel(*t) > 0)
    return fail(OP_ERR_PARAM_NULLPTR, name, "->data must not be a null pointer");
  return OP_SUCCESS;
}

opStatus check_output(const opTensor* t, const char* name, const std::vector<int64_t>& want, opDataType dtype) {
  if (shape(t) != want || t->dtype != dtype)
    return fail(OP_ERR_PARAM_INVALID, name, " must be a ", dtype_name(dtype), " tensor of shape ", fmt(want),
                ", but got ", dtype_name(t->dtype), " ", fmt(shape(t)));
  return OP_SUCCESS;
}

std::string fmt(double v) {
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, result.ptr);
  if (s.find_first_of(".eni") == std::string::npos) s += ".0";
  return s;
}

std::string fmt(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

void warn(const char* op, const std::string& message) { warning_handler.load()(op, message.c_str()); }

}  // namespace op_plugin::check
