// AccVec of kernels/common/simd.h at AVX-512 (built with the library's AVX-512 flags, which
// include AVX512_BF16: the native bf16 store is checked where the CPU has it). The checks:
// accvec_checks.inc.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "avx512_test_main.h"
#include "kernels/common/gemm_ukernel.h"
#include "kernels/common/simd.h"
#include "op_plugin/isa.h"

static int g_pass = 0, g_fail = 0;
#include "accvec_checks.inc"

static bool test_can_run(const char** why) {
  // active_isa(): the CPU's level (or the AVX-512 model's), capped by OP_PLUGIN_ISA.
  *why = "no AVX-512 F/BW/DQ/VL at this level";
  return static_cast<int>(op_plugin::active_isa()) >= static_cast<int>(op_plugin::Isa::kAvx512);
}

static int run_checks() {
  const bool native_bf16 = static_cast<int>(op_plugin::active_isa()) >= static_cast<int>(op_plugin::Isa::kAvx512Bf16);
  std::printf("native bf16 store %s\n", native_bf16 ? "checked" : "not checked (no AVX512_BF16)");
  accvec_test::run_all(native_bf16);
  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
