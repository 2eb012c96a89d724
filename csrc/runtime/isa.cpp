#include "op_plugin/isa.h"

#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace op_plugin {
namespace {

Isa detect_cpu() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("fma");
  if (avx512) return __builtin_cpu_supports("avx512bf16") ? Isa::kAvx512Bf16 : Isa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
#endif
  return Isa::kBaseline;
}

Isa cap_from_environment(Isa detected) {
  const char* requested = std::getenv("OP_PLUGIN_ISA");
  if (requested == nullptr || *requested == '\0') return detected;
  for (Isa level : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
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

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kBaseline: return "baseline";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx512Bf16: return "avx512_bf16";
  }
  return "baseline";
}

}  // namespace op_plugin
