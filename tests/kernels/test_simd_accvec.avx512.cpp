// AccVec of kernels/common/simd.h at AVX-512 (built with the library's AVX-512 flags, which
// include AVX512_BF16: the native bf16 store is checked where the CPU has it). The checks:
// accvec_checks.inc.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "avx512_test_main.h"
#include "kernels/common/simd.h"

static int g_pass = 0, g_fail = 0;
#include "accvec_checks.inc"

static bool test_can_run(const char** why) {
  *why = "this CPU has no AVX-512 F/BW/DQ/VL";
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

static int run_checks() {
  const bool native_bf16 = __builtin_cpu_supports("avx512bf16");
  std::printf("native bf16 store %s\n", native_bf16 ? "checked" : "not checked (no AVX512_BF16)");
  accvec_test::run_all(native_bf16);
  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
