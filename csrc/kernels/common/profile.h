// Where a kernel's time goes: cycle counters per phase (GEMM, softmax, packing, ...), compiled in
// only with -DOP_PLUGIN_PROFILE (benchmarks/kernels/profile_flash_attention.sh builds such a
// library); otherwise the macro is empty and costs nothing.
//
//   { OP_PROFILE_SCOPE(kSoftmax); ... }   // the enclosing block's cycles count as softmax
//
// The program linking such a library defines op_plugin_profile_add (summed over threads).
#pragma once
#include <cstdint>

namespace op_plugin {
namespace profile {
// kOverlap: tile GEMMs with vector work interleaved (the AMX forward's S = Q K^T with the softmax).
enum Phase : int { kPack = 0, kGemm = 1, kSoftmax = 2, kReduce = 3, kOther = 4, kOverlap = 5, kPhases = 6 };
}  // namespace profile
}  // namespace op_plugin

#if defined(OP_PLUGIN_PROFILE)
#include <x86intrin.h>
extern "C" void op_plugin_profile_add(int phase, uint64_t cycles);
namespace op_plugin {
namespace profile {
struct Scope {
  int phase;
  uint64_t t0;
  explicit Scope(int p) : phase(p), t0(__rdtsc()) {}
  ~Scope() { op_plugin_profile_add(phase, __rdtsc() - t0); }
};
}  // namespace profile
}  // namespace op_plugin
#define OP_PROFILE_SCOPE(phase) ::op_plugin::profile::Scope op_profile_scope_(::op_plugin::profile::phase)
#else
#define OP_PROFILE_SCOPE(phase) ((void)0)
#endif
