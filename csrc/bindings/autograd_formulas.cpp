#include "bindings/autograd_formulas.h"

#include <vector>

#include <ATen/ops/exp.h>
#include <ATen/ops/zeros_like.h>

namespace op_plugin::formulas {

at::Tensor flash_attn_sinks_grad(const at::Tensor& grad_attn_out, const at::Tensor& attn_out,
                                 const at::Tensor& softmax_lse, const at::Tensor& sinks, c10::string_view layout_out) {
  if (!grad_attn_out.defined()) return at::zeros_like(sinks);
  at::Tensor row_dot = grad_attn_out.to(at::kDouble).mul(attn_out.to(at::kDouble)).sum(-1);  // D in layout_out
  at::Tensor sink_logit = sinks.to(at::kDouble);
  int64_t head_dim = 1;  // the N axis of the lse
  if (layout_out == "TND") {  // [T, N]; lse is [N, T]
    row_dot = row_dot.transpose(0, 1);
    sink_logit = sink_logit.unsqueeze(1);
    head_dim = 0;
  } else {
    if (layout_out == "BSND") row_dot = row_dot.transpose(1, 2);  // [B, S, N]; lse is [B, N, S]
    sink_logit = sink_logit.unsqueeze(0).unsqueeze(2);
  }
  const at::Tensor p_sink = at::exp(sink_logit.sub(softmax_lse.to(at::kDouble)));
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < p_sink.dim(); ++d)
    if (d != head_dim) dims.push_back(d);
  return p_sink.mul(row_dot).sum(dims).neg().to(sinks.scalar_type());
}

}  // namespace op_plugin::formulas
