"""torch.vmap over the ops: the folded call against per-sample calls and against PyTorch under vmap.

Each op's batching rule (bindings/<op>_vmap.cpp) folds the vmapped dim into the op's batch where
its registry rule allows. Rows, each as the median of alternating runs:
- per-sample gradients (vmap of grad) of flash_attn against the same with SDPA, whose aten
  batching rule also folds;
- vmap of the fused Floyd forward against vmap of the composite einsum reference;
- decode-size flash_attn calls under vmap (no grad) against SDPA under vmap: many tiny calls,
  where one folded call saves every other call's fixed cost;
- the same calls made per sample in a Python loop (roughly what torch's BatchedFallback did before
  op_plugin had rules; its loop is C++, so a little cheaper per call): the "fold vs loop" figure.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F

import op_plugin  # noqa: F401
from op_plugin import reference
from op_plugin.timing import interleaved_medians

OPS = torch.ops.op_plugin
# torch's own warning for the baseline: SDPA's CPU backward has no batching rule (BatchedFallback).
warnings.filterwarnings("ignore", message="There is a performance drop")


def _row(workload: str, fns: list[Callable[[], object]], repeat: int, calls: int = 1) -> dict:
    """fns: the folded vmap, PyTorch under vmap, the per-sample loop; each runs `calls` calls."""
    folded, torch_vmap, per_sample = (t / calls for t in interleaved_medians(fns, [repeat] * 3))
    return {"workload": workload, "dtype": "float32", "op_plugin_s": folded, "pytorch_s": torch_vmap,
            "speedup": torch_vmap / folded, "throughput": f"fold vs per-sample loop {per_sample / folded:.2f}x",
            "peak_extra_mb": "-"}


def _flash_rows(quick: bool) -> list[dict]:
    V, S, N, D = (4, 64, 4, 32) if quick else (16, 256, 8, 64)
    g = torch.Generator().manual_seed(0)
    q, k, v, ct = (torch.randn(V, 1, S, N, D, generator=g) for _ in range(4))
    template = torch.zeros(2048, 2048, dtype=torch.int8)

    def ours(q1, k1, v1, c1):
        f = (lambda a, b, c_: OPS.flash_attn(a, b, c_, softmax_scale=D ** -0.5, mask_mode=3, attn_mask=template)[0])
        return torch.func.vjp(f, q1, k1, v1)[1](c1)

    def sdpa(q1, k1, v1, c1):
        f = (lambda a, b, c_: F.scaled_dot_product_attention(a.transpose(1, 2), b.transpose(1, 2), c_.transpose(1, 2),
                                                             is_causal=True).transpose(1, 2))
        return torch.func.vjp(f, q1, k1, v1)[1](c1)

    return [_row(f"vmap(vjp) flash_attn causal V{V} B1 S{S} N{N} D{D}", [
        lambda: torch.vmap(ours)(q, k, v, ct),
        lambda: torch.vmap(sdpa)(q, k, v, ct),
        lambda: [ours(q[i], k[i], v[i], ct[i]) for i in range(V)]], repeat=15)]


def _decode_rows(quick: bool) -> list[dict]:
    """Many tiny calls: the per-call cost a fold saves (one call for every sample)."""
    V, SKV, N, D = (16, 16, 8, 64) if quick else (64, 16, 8, 64)
    g = torch.Generator().manual_seed(2)
    q = torch.randn(V, 1, 1, N, D, generator=g)
    k, v = (torch.randn(V, 1, SKV, N, D, generator=g) for _ in range(2))

    def ours(q1, k1, v1):
        return OPS.flash_attn(q1, k1, v1, softmax_scale=D ** -0.5)[0]

    def sdpa(q1, k1, v1):
        return F.scaled_dot_product_attention(q1.transpose(1, 2), k1.transpose(1, 2), v1.transpose(1, 2)).transpose(1, 2)

    def times(fn: Callable[[], object], calls: int = 20) -> Callable[[], None]:
        def run() -> None:
            for _ in range(calls):
                fn()
        return run

    with torch.no_grad():
        return [_row(f"vmap flash_attn decode V{V} B1 Sq1 Skv{SKV} N{N} D{D}", [
            times(lambda: torch.vmap(ours)(q, k, v)),
            times(lambda: torch.vmap(sdpa)(q, k, v)),
            times(lambda: [ours(q[i], k[i], v[i]) for i in range(V)])], repeat=15, calls=20)]


def _floyd_rows(quick: bool) -> list[dict]:
    V, H, S, D = (4, 1, 16, 16) if quick else (8, 2, 64, 32)
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(V, 1, H, S, S, D, generator=g) for _ in range(5)]

    def ours(*a):
        return OPS.fused_floyd_attention(*a, scale_value=D ** -0.5)[2]

    def composite(q, k1, v1, k2, v2):
        return reference.floyd_reference(q, k1, v1, k2, v2, None, D ** -0.5)

    return [_row(f"vmap fused_floyd_attention V{V} B1 H{H} N=M=K={S} D{D}", [
        lambda: torch.vmap(ours)(*xs),
        lambda: torch.vmap(composite)(*xs),
        lambda: [ours(*[x[i] for x in xs]) for i in range(V)]], repeat=15)]


def run(quick: bool = False) -> list[dict]:
    return _flash_rows(quick) + _decode_rows(quick) + _floyd_rows(quick)
