// Stands in for nlohmann/json, which torch's ATen/functorch/Interpreter.h includes but torch's
// wheel does not ship. Interpreter.h uses it only to (de)serialise the functorch layers: templates
// that are never instantiated here, and Interpreter::serialize / deserialize, inline members that
// must parse but that op_plugin never calls (so no code is emitted for them). Only
// csrc/bindings/vmap_glue.cpp includes functorch's headers; ci/other_torch.sh builds it against
// other torch releases.
#pragma once
#include <string>

namespace nlohmann {
struct json {
  json() = default;
  template <typename T>
  explicit json(const T&) {}
  std::string dump() const;
  static json parse(const std::string&);
  template <typename T>
  T get() const;
};
}  // namespace nlohmann
