"""The same transformer in plain PyTorch: the reference for op_plugin.models' model.

Attention: torch SDPA on the BNSD transpose, ``is_causal=True`` for causal layers and an
explicit boolean band mask for window layers, ``enable_gqa=True`` for the shared key/value
heads. Block AttnRes: the composite written from SPEC §4,

    v = [block_0, ..., block_{N-1}, partial]          (N + 1 values per token)
    inv = 1 / sqrt(mean_h v^2 + eps);  s = sum_h v * inv * norm_weight * proj_weight
    hidden = sum_i softmax_i(s) * v_i

with autograd doing the backward.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor

from op_plugin.models.block_attnres_transformer import BlockAttnResTransformer, BlockResidual


@functools.lru_cache(maxsize=8)  # built once per shape, as a real model would keep it
def band_mask(S: int, window: int) -> Tensor:
    """SDPA keep-mask [S, S]: query i sees keys i - window + 1 .. i."""
    i = torch.arange(S).view(-1, 1)
    j = torch.arange(S).view(1, -1)
    return (j <= i) & (j > i - window)


def block_attention_residuals(blocks: Tensor, partial: Tensor, proj_weight: Tensor, norm_weight: Tensor,
                              eps: float) -> Tensor:
    """blocks [..., N, H], partial [..., H] -> hidden [..., H]."""
    v = torch.cat([blocks, partial.unsqueeze(-2)], dim=-2)  # [..., N+1, H], partial last
    inv = torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)
    logits = (v * inv * norm_weight) @ proj_weight  # [..., N+1]
    probs = logits.softmax(-1)
    return (probs.unsqueeze(-1) * v).sum(-2)


class ReferenceBlockAttnResTransformer(BlockAttnResTransformer):
    """op_plugin.models.BlockAttnResTransformer with SDPA and the composite Block AttnRes."""

    def attend(self, q: Tensor, k: Tensor, v: Tensor, kind: str) -> Tensor:
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # BSND -> BNSD, SDPA's layout
        if kind == "causal":
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            mask = band_mask(q.shape[2], self.cfg.window)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        return out.transpose(1, 2)

    def block_residual(self, blocks: Tensor, partial: Tensor, res: BlockResidual) -> Tensor:
        return block_attention_residuals(blocks, partial, res.proj_weight, res.norm_weight, self.cfg.norm_eps)
