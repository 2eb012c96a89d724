"""One small training-style call of every op family: forward and backward through autograd.

Each case returns every tensor the call produced (outputs and input gradients), so a test can
compare two runs bit for bit. Together the cases run every registered op (the backward ops
through autograd, flash_attn_metadata directly).
"""
from __future__ import annotations

from collections.abc import Callable

import torch

import op_plugin

TEMPLATE = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)


def _leaves(shapes: list[tuple[int, ...]], dtype: torch.dtype, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=torch.float64).to(dtype).requires_grad_(True) for s in shapes]


def _run(fn: Callable[..., torch.Tensor], leaves: list[torch.Tensor], seed: int) -> list[torch.Tensor]:
    out = fn(*leaves)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64).to(out.dtype)
    out.backward(grad)
    return [out.detach()] + [x.grad for x in leaves]


def block_attention_residuals(dtype: torch.dtype, seed: int = 0, T: int = 33, N: int = 5, H: int = 96):
    x = _leaves([(T, H), (T, N, H), (H,), (H,)], dtype, seed)
    return _run(op_plugin.block_attention_residuals, x, seed)


def fused_floyd_attention(dtype: torch.dtype, seed: int = 0, N: int = 16, D: int = 16):
    x = _leaves([(1, 2, N, N, D)] * 5, dtype, seed)
    mask = torch.zeros(1, 1, N, 1, N, dtype=torch.bool)
    mask[..., -3:] = True
    return _run(lambda *t: op_plugin.fused_floyd_attention(*t, atten_mask=mask, scale_value=0.25)[2], x, seed)


def flash_attn(dtype: torch.dtype, seed: int = 0, S: int = 70):
    x = _leaves([(1, S, 4, 32), (1, S + 30, 2, 32), (1, S + 30, 2, 32), (4,)], dtype, seed)
    return _run(lambda q, k, v, s: op_plugin.flash_attn(q, k, v, sinks=s, softmax_scale=0.2, mask_mode=3,
                                                         attn_mask=TEMPLATE)[0], x, seed)


def flash_attn_tnd(dtype: torch.dtype, seed: int = 0):
    cu = torch.tensor([0, 40, 40, 105], dtype=torch.int32)
    x = _leaves([(105, 4, 32), (105, 4, 32), (105, 4, 16)], dtype, seed)
    meta = op_plugin.flash_attn_metadata(4, 4, 32, cu_seqlens_q=cu, cu_seqlens_kv=cu)
    return [meta] + _run(lambda q, k, v: op_plugin.flash_attn(
        q, k, v, cu_seqlens_q=cu, cu_seqlens_kv=cu, metadata=meta, layout_q="TND", layout_kv="TND", layout_out="TND",
        mask_mode=4, attn_mask=TEMPLATE, win_left=9, win_right=2, softmax_scale=0.2)[0], x, seed)


def swa(dtype: torch.dtype, seed: int = 0, S: int = 97, keep_prob: float = 0.8):
    x = _leaves([(1, 4, S, 32), (1, 2, S, 32), (1, 2, S, 32), (1, 4, 1, S), (4,)], dtype, seed)
    torch.manual_seed(seed)  # the dropout seed and offset come from torch's generator
    return _run(lambda q, k, v, p, s: op_plugin.swa_forward(q, k, v, 4, "BNSD", pse=p, sink=s, atten_mask=TEMPLATE,
                                                           scale=0.2, keep_prob=keep_prob, pre_tockens=20,
                                                           next_tockens=0, sparse_mode=4)[0], x, seed)


CASES: dict[str, Callable[..., list[torch.Tensor]]] = {
    "block_attention_residuals": block_attention_residuals,
    "fused_floyd_attention": fused_floyd_attention,
    "flash_attn": flash_attn,
    "flash_attn_tnd": flash_attn_tnd,
    "swa": swa,
}
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
