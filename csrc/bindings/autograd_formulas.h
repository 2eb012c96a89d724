// Gradients the backward ops do not return, named by the registry's `autograd.grads`
// (`grads: {input: f(arg, grad(output), ...)}`), as PyTorch's derivatives.yaml formulas call
// helpers of FunctionsManual.cpp. Written with ATen ops, so autograd, fake tensors and
// torch.compile see ordinary ops. Tensor arguments are undefined for None.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

namespace op_plugin::formulas {

// dsinks[n] = -sum_{b,i} p_sink[b,n,i] * D[b,n,i] (SPEC Decision 6), where p_sink =
// exp(sinks[n] - lse[b,n,i]) is the sink's softmax weight (lse includes the sink) and
// D = rowsum(dout * out). Rows with nothing to attend to have lse = +inf, so p_sink = 0 there.
// Accumulated in float64, so the sum's order does not show in the float32 result.
at::Tensor flash_attn_sinks_grad(const at::Tensor& grad_attn_out, const at::Tensor& attn_out,
                                 const at::Tensor& softmax_lse, const at::Tensor& sinks, c10::string_view layout_out);

}  // namespace op_plugin::formulas
