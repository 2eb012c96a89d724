// The entry of a kernel test built with the AVX-512 flags (test_*.avx512.cpp).
//
// main and the test's test_can_run() ask the CPU first and are compiled without AVX-512: under
// ASan a function with stack locals clears their shadow with zmm stores in its prologue, so a main
// built with AVX-512 dies with SIGILL on a CPU without it before its own check runs. The checks
// live in run_checks(), never inlined into main.
#pragma once
#include <cstdio>

// Whether this CPU (and level) can run the test; `why` is printed when it cannot.
__attribute__((target("no-avx512f"))) static bool test_can_run(const char** why);
static int run_checks() __attribute__((noinline));

__attribute__((target("no-avx512f"))) int main() {
  const char* why = "";
  if (!test_can_run(&why)) {
    std::printf("%s: 0 passed, 0 failed\n", why);
    return 0;
  }
  return run_checks();
}
