// Flash attention kernels, AVX-512 level (with and without AVX512_BF16 dot products, and with
// AMX-BF16 tiles for bf16 where the CPU has them).
#include "kernels/flash_attention/flash_attention_engine.h"

namespace op_plugin {
namespace flash {
namespace isa_avx512 {

namespace e = ::op_plugin::isa_avx512;
using OpsF64 = e::OpsGeneric<double, 64>;

static void forward(const FlashAttnFwdParams& p, const Plan& plan, void* ws) {
  e::fa::forward_entry<e::Ops512F, e::Ops512Bf16, OpsF64>(p, plan, ws);
}
static void backward(const FlashAttnBwdParams& p, const Plan& plan, void* ws) {
  e::fa::backward_entry<e::Ops512F, e::Ops512Bf16, OpsF64>(p, plan, ws);
}

const Kernels& kernels_table(bool bf16, bool amx) {
  static const Kernels with_amx{"avx512_amx", true, true, forward, backward};
  static const Kernels with_bf16{"avx512_bf16", true, false, forward, backward};
  static const Kernels without_bf16{"avx512", false, false, forward, backward};
  return amx ? with_amx : bf16 ? with_bf16 : without_bf16;
}

}  // namespace isa_avx512
}  // namespace flash
}  // namespace op_plugin
