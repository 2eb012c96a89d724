// CPU feature detection and the ISA level the kernels dispatch on.
#pragma once

namespace op_plugin {

enum class Isa : int {
  kBaseline = 0,    // x86-64 SSE2 (or any other architecture)
  kAvx2 = 1,        // AVX2 + FMA + F16C
  kAvx512 = 2,      // AVX-512 F/BW/VL/DQ + FMA + F16C
  kAvx512Bf16 = 3,  // AVX-512 as above + AVX512_BF16 dot products
  kAvx512Amx = 4,   // AVX512_BF16 as above + AMX-BF16 tiles for the bf16 GEMMs (the OS granted them)
};

// The best level this CPU supports, capped by the environment variable OP_PLUGIN_ISA
// (baseline, avx2, avx512, avx512_bf16, avx512_amx) so tests can force a lower level. Read once.
Isa active_isa();
const char* isa_name(Isa isa);

// Whether vdpbf16ps (16 bf16 pair products a lane, 32 multiply-adds) issues as fast as a float32
// FMA (16), so that bf16 GEMMs on it run at twice the float32 rate. Measured: AMD Zen 5 (EPYC,
// family 26) yes, 1.6-2x faster flash attention than converting to float32; Intel Xeon 5th gen
// no, vdpbf16ps issues at half the FMA rate there (docs/decisions.md). Decided by the CPU vendor
// rather than timed at load, so every process on a machine takes the same path and gets the same bits.
bool bf16_dot_full_rate();

}  // namespace op_plugin

// Version of the kernel library, reported by the helper module.
#define OP_PLUGIN_KERNELS_VERSION "0.1.0"
