// Flash attention kernels, portable level (GCC vector extensions; bf16 / fp16 computed in float).
#include "kernels/flash_attention/flash_attention_engine.h"

namespace op_plugin {
namespace flash {
namespace isa_base {

namespace e = ::op_plugin::isa_base;
using OpsF32 = e::OpsGeneric<float, 16>;
using OpsF64 = e::OpsGeneric<double, 16>;

static void forward(const FlashAttnFwdParams& p, const Plan& plan, void* ws) {
  e::fa::forward_entry<OpsF32, OpsF32, OpsF64>(p, plan, ws);
}
static void backward(const FlashAttnBwdParams& p, const Plan& plan, void* ws) {
  e::fa::backward_entry<OpsF32, OpsF32, OpsF64>(p, plan, ws);
}

const Kernels& kernels_table() {
  static const Kernels table{"baseline", false, false, forward, backward};
  return table;
}

}  // namespace isa_base
}  // namespace flash
}  // namespace op_plugin
