// The shape operations of the registry's expression language (codegen/expr.py, docs/registry.md):
// s[i], s[a:b] and s + t over shapes and int lists, with Python's meaning. Header-only and
// torch-free: the generated bindings use them over at::IntArrayRef (c10::SymIntArrayRef in the
// Autograd kernels' shape rules), the generated CheckArguments over std::vector<int64_t>.
#pragma once
#include <cstdint>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace op_plugin::shape_expr {

template <class Seq>
using element_t = std::decay_t<decltype(*std::begin(std::declval<const Seq&>()))>;

template <class Seq>
int64_t length(const Seq& s) {
  return static_cast<int64_t>(std::end(s) - std::begin(s));
}

// s as a vector (the two branches of a conditional over shapes meet as one type).
template <class Seq>
std::vector<element_t<Seq>> vec(const Seq& s) {
  return std::vector<element_t<Seq>>(std::begin(s), std::end(s));
}

// s[i]; a negative i counts from the end. Out of range raises std::out_of_range (Python's IndexError).
template <class Seq>
element_t<Seq> at(const Seq& s, int64_t i) {
  const int64_t n = length(s);
  if (i < -n || i >= n)
    throw std::out_of_range("shape index " + std::to_string(i) + " is out of range for a shape of " +
                            std::to_string(n) + " dims");
  return *(std::begin(s) + (i < 0 ? i + n : i));
}

// s[begin:end]: a missing bound is the start (end); negative bounds count from the end; bounds
// past either end are clamped, as Python slices are.
template <class Seq>
std::vector<element_t<Seq>> slice(const Seq& s, std::optional<int64_t> begin, std::optional<int64_t> end) {
  const int64_t n = length(s);
  auto clamp = [n](int64_t i) { return i < 0 ? (i + n < 0 ? 0 : i + n) : (i > n ? n : i); };
  const int64_t b = begin ? clamp(*begin) : 0;
  const int64_t e = end ? clamp(*end) : n;
  if (b >= e) return {};
  return std::vector<element_t<Seq>>(std::begin(s) + b, std::begin(s) + e);
}

// s + t: the dims of s, then those of t (int64_t and c10::SymInt mix to c10::SymInt).
template <class A, class B>
auto concat(const A& a, const B& b) {
  using T = std::common_type_t<element_t<A>, element_t<B>>;
  std::vector<T> out(std::begin(a), std::end(a));
  for (const auto& v : b) out.push_back(T(v));
  return out;
}

}  // namespace op_plugin::shape_expr
