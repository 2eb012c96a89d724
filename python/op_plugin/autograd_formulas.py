"""Gradients the backward ops do not return, named by the registry's ``autograd.grads``.

The registry's ``grads: {input: f(arg, grad(output), ...)}`` calls ``f`` from this module, as
PyTorch's derivatives.yaml formulas call helpers in FunctionsManual.cpp. Each function is the
formula of a SPEC decision, written in plain torch so autograd, fake tensors and torch.compile see
ordinary ops.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor


def flash_attn_sinks_grad(grad_attn_out: Optional[Tensor], attn_out: Tensor, softmax_lse: Tensor,
                          sinks: Tensor, layout_out: str) -> Tensor:
    """dsinks[n] = -sum_{b,i} p_sink[b,n,i] * D[b,n,i] (SPEC Decision 6).

    p_sink = exp(sinks[n] - lse[b,n,i]) is the sink's softmax weight (lse includes the sink) and
    D = rowsum(dout * out). Rows with nothing to attend to have lse = +inf, so p_sink = 0 there.
    Accumulated in float64, so the sum's order does not show in the float32 result.
    """
    if grad_attn_out is None:
        return torch.zeros_like(sinks)
    row_dot = (grad_attn_out.double() * attn_out.double()).sum(-1)  # D in layout_out, without Dv
    if layout_out == "TND":                      # [T, N]; lse is [N, T]
        row_dot, sink_logit = row_dot.transpose(0, 1), sinks.double()[:, None]
    elif layout_out == "BSND":                   # [B, S, N]; lse is [B, N, S]
        row_dot, sink_logit = row_dot.transpose(1, 2), sinks.double()[None, :, None]
    else:                                        # BNSD: [B, N, S]
        sink_logit = sinks.double()[None, :, None]
    p_sink = torch.exp(sink_logit - softmax_lse.double())
    dims = [d for d in range(p_sink.dim()) if d != (0 if layout_out == "TND" else 1)]
    return (-(p_sink * row_dot).sum(dims)).to(sinks.dtype)
