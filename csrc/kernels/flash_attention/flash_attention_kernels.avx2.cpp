// Flash attention kernels, AVX2 + FMA level (bf16 / fp16 inputs computed in float).
#include "kernels/flash_attention/flash_attention_engine.h"

namespace op_plugin {
namespace flash {
namespace isa_avx2 {

namespace e = ::op_plugin::isa_avx2;
using OpsF64 = e::OpsGeneric<double, 32>;

static void forward(const FlashAttnFwdParams& p, const Plan& plan, void* ws) {
  e::fa::forward_entry<e::OpsAvx2F, e::OpsAvx2F, OpsF64>(p, plan, ws);
}
static void backward(const FlashAttnBwdParams& p, const Plan& plan, void* ws) {
  e::fa::backward_entry<e::OpsAvx2F, e::OpsAvx2F, OpsF64>(p, plan, ws);
}

const Kernels& kernels_table() {
  static const Kernels table{"avx2", false, false, forward, backward};
  return table;
}

}  // namespace isa_avx2
}  // namespace flash
}  // namespace op_plugin
