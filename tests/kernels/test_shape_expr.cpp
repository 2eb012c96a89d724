// op_plugin/shape_expr.h: the registry's shape operations mean what Python's do (the fakes evaluate
// them in Python, the bindings and CheckArguments in C++). The slice vectors are Python's own
// results (s[b:e] for each case, computed by CPython when this file was written).
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <vector>

#include "op_plugin/shape_expr.h"

namespace se = op_plugin::shape_expr;

static int failures = 0;
#define EXPECT(cond)                                                   \
  do {                                                                 \
    if (!(cond)) {                                                     \
      std::fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                      \
    }                                                                  \
  } while (0)

struct SliceCase {
  std::vector<int64_t> s;
  std::optional<int64_t> begin, end;
  std::vector<int64_t> expected;
};

int main() {
  const std::vector<SliceCase> slices = {
    {{}, std::nullopt, std::nullopt, {}},
    {{}, std::nullopt, -5, {}},
    {{}, std::nullopt, -1, {}},
    {{}, std::nullopt, 0, {}},
    {{}, std::nullopt, 2, {}},
    {{}, std::nullopt, 4, {}},
    {{}, -4, std::nullopt, {}},
    {{}, -4, -5, {}},
    {{}, -4, -1, {}},
    {{}, -4, 0, {}},
    {{}, -4, 2, {}},
    {{}, -4, 4, {}},
    {{}, -1, std::nullopt, {}},
    {{}, -1, -5, {}},
    {{}, -1, -1, {}},
    {{}, -1, 0, {}},
    {{}, -1, 2, {}},
    {{}, -1, 4, {}},
    {{}, 0, std::nullopt, {}},
    {{}, 0, -5, {}},
    {{}, 0, -1, {}},
    {{}, 0, 0, {}},
    {{}, 0, 2, {}},
    {{}, 0, 4, {}},
    {{}, 1, std::nullopt, {}},
    {{}, 1, -5, {}},
    {{}, 1, -1, {}},
    {{}, 1, 0, {}},
    {{}, 1, 2, {}},
    {{}, 1, 4, {}},
    {{}, 2, std::nullopt, {}},
    {{}, 2, -5, {}},
    {{}, 2, -1, {}},
    {{}, 2, 0, {}},
    {{}, 2, 2, {}},
    {{}, 2, 4, {}},
    {{}, 5, std::nullopt, {}},
    {{}, 5, -5, {}},
    {{}, 5, -1, {}},
    {{}, 5, 0, {}},
    {{}, 5, 2, {}},
    {{}, 5, 4, {}},
    {{10}, std::nullopt, std::nullopt, {10}},
    {{10}, std::nullopt, -5, {}},
    {{10}, std::nullopt, -1, {}},
    {{10}, std::nullopt, 0, {}},
    {{10}, std::nullopt, 2, {10}},
    {{10}, std::nullopt, 4, {10}},
    {{10}, -4, std::nullopt, {10}},
    {{10}, -4, -5, {}},
    {{10}, -4, -1, {}},
    {{10}, -4, 0, {}},
    {{10}, -4, 2, {10}},
    {{10}, -4, 4, {10}},
    {{10}, -1, std::nullopt, {10}},
    {{10}, -1, -5, {}},
    {{10}, -1, -1, {}},
    {{10}, -1, 0, {}},
    {{10}, -1, 2, {10}},
    {{10}, -1, 4, {10}},
    {{10}, 0, std::nullopt, {10}},
    {{10}, 0, -5, {}},
    {{10}, 0, -1, {}},
    {{10}, 0, 0, {}},
    {{10}, 0, 2, {10}},
    {{10}, 0, 4, {10}},
    {{10}, 1, std::nullopt, {}},
    {{10}, 1, -5, {}},
    {{10}, 1, -1, {}},
    {{10}, 1, 0, {}},
    {{10}, 1, 2, {}},
    {{10}, 1, 4, {}},
    {{10}, 2, std::nullopt, {}},
    {{10}, 2, -5, {}},
    {{10}, 2, -1, {}},
    {{10}, 2, 0, {}},
    {{10}, 2, 2, {}},
    {{10}, 2, 4, {}},
    {{10}, 5, std::nullopt, {}},
    {{10}, 5, -5, {}},
    {{10}, 5, -1, {}},
    {{10}, 5, 0, {}},
    {{10}, 5, 2, {}},
    {{10}, 5, 4, {}},
    {{10, 11, 12}, std::nullopt, std::nullopt, {10, 11, 12}},
    {{10, 11, 12}, std::nullopt, -5, {}},
    {{10, 11, 12}, std::nullopt, -1, {10, 11}},
    {{10, 11, 12}, std::nullopt, 0, {}},
    {{10, 11, 12}, std::nullopt, 2, {10, 11}},
    {{10, 11, 12}, std::nullopt, 4, {10, 11, 12}},
    {{10, 11, 12}, -4, std::nullopt, {10, 11, 12}},
    {{10, 11, 12}, -4, -5, {}},
    {{10, 11, 12}, -4, -1, {10, 11}},
    {{10, 11, 12}, -4, 0, {}},
    {{10, 11, 12}, -4, 2, {10, 11}},
    {{10, 11, 12}, -4, 4, {10, 11, 12}},
    {{10, 11, 12}, -1, std::nullopt, {12}},
    {{10, 11, 12}, -1, -5, {}},
    {{10, 11, 12}, -1, -1, {}},
    {{10, 11, 12}, -1, 0, {}},
    {{10, 11, 12}, -1, 2, {}},
    {{10, 11, 12}, -1, 4, {12}},
    {{10, 11, 12}, 0, std::nullopt, {10, 11, 12}},
    {{10, 11, 12}, 0, -5, {}},
    {{10, 11, 12}, 0, -1, {10, 11}},
    {{10, 11, 12}, 0, 0, {}},
    {{10, 11, 12}, 0, 2, {10, 11}},
    {{10, 11, 12}, 0, 4, {10, 11, 12}},
    {{10, 11, 12}, 1, std::nullopt, {11, 12}},
    {{10, 11, 12}, 1, -5, {}},
    {{10, 11, 12}, 1, -1, {11}},
    {{10, 11, 12}, 1, 0, {}},
    {{10, 11, 12}, 1, 2, {11}},
    {{10, 11, 12}, 1, 4, {11, 12}},
    {{10, 11, 12}, 2, std::nullopt, {12}},
    {{10, 11, 12}, 2, -5, {}},
    {{10, 11, 12}, 2, -1, {}},
    {{10, 11, 12}, 2, 0, {}},
    {{10, 11, 12}, 2, 2, {}},
    {{10, 11, 12}, 2, 4, {12}},
    {{10, 11, 12}, 5, std::nullopt, {}},
    {{10, 11, 12}, 5, -5, {}},
    {{10, 11, 12}, 5, -1, {}},
    {{10, 11, 12}, 5, 0, {}},
    {{10, 11, 12}, 5, 2, {}},
    {{10, 11, 12}, 5, 4, {}}};
  for (const auto& c : slices) EXPECT(se::slice(c.s, c.begin, c.end) == c.expected);

  const std::vector<int64_t> s = {2, 3, 5};
  EXPECT(se::at(s, 0) == 2 && se::at(s, 2) == 5 && se::at(s, -1) == 5 && se::at(s, -3) == 2);
  for (int64_t i : {3, -4, 100}) {
    bool raised = false;
    try {
      se::at(s, i);
    } catch (const std::out_of_range&) {
      raised = true;
    }
    EXPECT(raised);
  }
  EXPECT((se::concat(se::slice(s, std::nullopt, -1), std::vector<int64_t>{1}) == std::vector<int64_t>{2, 3, 1}));
  EXPECT((se::concat(std::vector<int64_t>{}, s) == s));
  EXPECT((se::concat(s, std::vector<int>{7}) == std::vector<int64_t>{2, 3, 5, 7}));  // element types mix
  EXPECT(se::vec(s) == s && se::length(s) == 3);
  if (failures == 0) std::printf("test_shape_expr: %zu slices and the index/concat cases agree with Python\n", slices.size());
  return failures == 0 ? 0 : 1;
}
