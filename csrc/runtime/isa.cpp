#include "op_plugin/isa.h"

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace op_plugin {
namespace {

#if defined(__x86_64__) && defined(__GNUC__)
// AMX-BF16 and AMX-TILE in CPUID, tile state enabled by the OS in XCR0, and this process's
// permission to use it (Linux asks for it once per process: arch_prctl ARCH_REQ_XCOMP_PERM).
bool amx_usable() {
#if defined(OP_PLUGIN_AMX_EMULATE)
  return true;  // a test build: the tile instructions are kernels/common/amx_intrinsics.h's model
#endif
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool amx_bf16 = d & (1u << 22), amx_tile = d & (1u << 24);
  if (!amx_bf16 || !amx_tile) return false;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;  // OSXSAVE
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & (3u << 17)) != (3u << 17)) return false;  // XTILECFG and XTILEDATA
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}
#endif

Isa detect_cpu() {
#if defined(OP_PLUGIN_AVX512_EMULATE)
  return Isa::kAvx512Amx;  // a test build: AVX-512 from kernels/common/avx512_model.h, AMX modelled
#endif
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("fma");
  if (avx512 && __builtin_cpu_supports("avx512bf16")) return amx_usable() ? Isa::kAvx512Amx : Isa::kAvx512Bf16;
  if (avx512) return Isa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
#endif
  return Isa::kBaseline;
}

Isa cap_from_environment(Isa detected) {
  const char* requested = std::getenv("OP_PLUGIN_ISA");
  if (requested == nullptr || *requested == '\0') return detected;
  for (Isa level : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16, Isa::kAvx512Amx}) {
    if (std::strcmp(requested, isa_name(level)) == 0)
      return static_cast<int>(level) < static_cast<int>(detected) ? level : detected;
  }
  return detected;  // unknown names are ignored rather than fatal
}

}  // namespace

Isa active_isa() {
  static const Isa isa = cap_from_environment(detect_cpu());
  return isa;
}

bool bf16_dot_full_rate() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool full_rate = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    char vendor[13];
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
    vendor[12] = '\0';
    return std::strcmp(vendor, "AuthenticAMD") == 0;
  }();
  return full_rate && static_cast<int>(active_isa()) >= static_cast<int>(Isa::kAvx512Bf16);
#else
  return false;
#endif
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kBaseline: return "baseline";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx512Bf16: return "avx512_bf16";
    case Isa::kAvx512Amx: return "avx512_amx";
  }
  return "baseline";
}

}  // namespace op_plugin
