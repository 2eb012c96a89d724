"""Composite PyTorch implementations of the ops: the baselines of tests, demo and benchmarks."""
from __future__ import annotations

import torch
from torch import Tensor


def block_attention_residuals(partial_block: Tensor, block_res: Tensor, proj_weight: Tensor, norm_weight: Tensor,
                              norm_eps: float = 1e-6) -> tuple[Tensor, Tensor, Tensor]:
    """SPEC §4 forward, as the Attention Residuals README writes it; returns (hidden, inv_norm, probs).

    Computed in the inputs' dtype (the "same-dtype plain PyTorch computation").
    """
    v = torch.cat([block_res, partial_block.unsqueeze(1)], dim=1)  # [T, N+1, H], partial last
    inv = torch.rsqrt(v.pow(2).mean(-1) + norm_eps)  # [T, N+1]
    k = v * inv.unsqueeze(-1) * norm_weight
    logits = k @ proj_weight.reshape(-1)
    probs = logits.softmax(-1)
    hidden = (probs.unsqueeze(-1) * v).sum(1)
    return hidden, inv, probs
