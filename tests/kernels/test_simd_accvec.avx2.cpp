// AccVec of kernels/common/simd.h at AVX2 (built with the library's AVX2 flags: build_and_run.sh
// gives *.avx2.cpp tests the ISA flags of their name). The checks: accvec_checks.inc.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "kernels/common/gemm_ukernel.h"
#include "kernels/common/simd.h"

static int g_pass = 0, g_fail = 0;
#include "accvec_checks.inc"

int main() {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !__builtin_cpu_supports("f16c")) {
    std::printf("this CPU has no AVX2 + FMA + F16C: 0 passed, 0 failed\n");
    return 0;
  }
  accvec_test::run_all(false);
  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
