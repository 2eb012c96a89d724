"""Throughput against sequence length for the attention ops (op-plugin bench --plot FILE.png).

For each S: useful GFLOP/s (allowed (query, key) pairs only, 4*D flops each, forward) of
flash_attn causal and swa_forward with a band of 512 (capped at S), against torch SDPA on the same
work (is_causal / an explicit band mask), B=1 N=8 D=64 float32, medians measured in one run.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

import op_plugin
from op_plugin.timing import median_seconds

TEMPLATE = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)


def _pairs(S: int, W: int | None) -> int:
    return sum(min(i + 1, W) if W else i + 1 for i in range(S))


def sweep(seq_lens: list[int], band: int = 512, D: int = 64) -> dict[str, list[float]]:
    """GFLOP/s per S of: flash_attn causal, SDPA causal, swa band, SDPA band."""
    series: dict[str, list[float]] = {"flash_attn causal": [], "SDPA causal": [], f"swa_forward band {band}": [],
                                      f"SDPA band {band}": []}
    for S in seq_lens:
        q, k, v = (torch.randn(1, 8, S, D, generator=torch.Generator().manual_seed(i)) for i in range(3))
        W = min(band, S)
        i, j = torch.arange(S).view(-1, 1), torch.arange(S).view(1, -1)
        keep = (j <= i) & (j > i - W)
        runs = {
            "flash_attn causal": (lambda: op_plugin.flash_attn(q, k, v, mask_mode=3, attn_mask=TEMPLATE, layout_q="BNSD",
                                                               layout_kv="BNSD", layout_out="BNSD"), None),
            "SDPA causal": (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), None),
            f"swa_forward band {band}": (lambda: op_plugin.swa_forward(q, k, v, 8, "BNSD", atten_mask=TEMPLATE,
                                                                      pre_tockens=W - 1, next_tockens=0, sparse_mode=4),
                                         W),
            f"SDPA band {band}": (lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=keep), W),
        }
        for name, (fn, window) in runs.items():
            series[name].append(4.0 * 8 * _pairs(S, window) * D / median_seconds(fn, repeat=3) / 1e9)
    return series


def plot(path: str, seq_lens: list[int]) -> dict[str, list[float]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = sweep(seq_lens)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, values in series.items():
        ax.plot(seq_lens, values, marker="o", linestyle="--" if name.startswith("SDPA") else "-", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length S (B=1, N=8, D=64, float32, forward)")
    ax.set_ylabel("useful GFLOP/s")
    ax.set_title(f"op_plugin attention vs torch SDPA, {torch.get_num_threads()} threads")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return series
