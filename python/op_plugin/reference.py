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


def fused_floyd_attention(query_ik: Tensor, key_ij: Tensor, value_ij: Tensor, key_jk: Tensor, value_jk: Tensor,
                          atten_mask: Tensor | None = None, scale_value: float = 1.0) -> Tensor:
    """SPEC §3 forward with the [B,H,N,M,K] score tensor materialised, as the golden writes it;
    a masked logit gets -FLT_MAX added (a fully masked row: uniform weights). Returns attention_out."""
    scores = scale_value * (torch.einsum("bhnmd,bhnkd->bhnmk", query_ik, key_ij) +
                            torch.einsum("bhnmd,bhkmd->bhnmk", query_ik, key_jk))
    if atten_mask is not None:
        b, _, n, _, k = atten_mask.shape
        scores = scores + atten_mask.view(b, 1, n, 1, k).to(scores.dtype) * torch.finfo(torch.float32).min
    probs = scores.softmax(-1)
    return torch.einsum("bhnmk,bhnkd->bhnmd", probs, value_ij) + torch.einsum("bhnmk,bhkmd->bhnmd", probs, value_jk)
