"""swa_forward / swa_backward (issue 4): sparse_mode 4, S=8192, band 512 (pre_tockens=511,
next_tockens=0), BNSD, B=1, N=8, D=64, forward and forward+backward.

Rows: against SDPA with the explicit band mask; against flash_attn mask_mode 4 on the same work
(the same engine behind another front door: the ratio shows the front door's overhead); and
dropout keep_prob=0.9 against keep_prob=1 (the "PyTorch" column is swa without dropout).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

import op_plugin

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
TEMPLATE_BOOL = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)
TEMPLATE_INT8 = TEMPLATE_BOOL.to(torch.int8)


def inputs(S: int, D: int, dtype: torch.dtype) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(1, 8, S, D, generator=g).to(dtype) for _ in range(4)]  # q, k, v, dy


def swa(xs, W: int, backward: bool, keep_prob: float = 1.0) -> None:
    q, k, v, dy = xs
    scale = q.shape[-1] ** -0.5
    kw = dict(atten_mask=TEMPLATE_BOOL, scale=scale, keep_prob=keep_prob, pre_tockens=W - 1, next_tockens=0,
              sparse_mode=4)
    out, smax, ssum, _, seed, offset, numels = op_plugin.swa_forward(q, k, v, 8, "BNSD", **kw)
    if backward:
        del kw["scale"]
        op_plugin.swa_backward(q, k, v, dy, 8, "BNSD", softmax_max=smax, softmax_sum=ssum, attention_in=out,
                               scale_value=scale, seed=seed, offset=offset, numels=numels, **kw)


def flash(xs, W: int, backward: bool) -> None:
    q, k, v, dy = xs
    kw = dict(layout_q="BNSD", layout_kv="BNSD", layout_out="BNSD", mask_mode=4, attn_mask=TEMPLATE_INT8,
              win_left=W - 1, win_right=0, softmax_scale=q.shape[-1] ** -0.5)
    out, lse = op_plugin.flash_attn(q, k, v, return_softmax_lse=backward, **kw)
    if backward:
        op_plugin.flash_attn_grad(q, k, v, dy, out, lse, **kw)


def sdpa(xs, band: torch.Tensor, backward: bool) -> None:
    q, k, v, dy = xs
    if backward:
        q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=band)
    if backward:
        out.backward(dy)


def run(quick: bool = False) -> list[dict[str, object]]:
    from common import gemm_peak_gflops, interleaved_medians

    S, W, D = (1024, 128, 64) if quick else (8192, 512, 64)
    i = torch.arange(S).view(-1, 1)
    j = torch.arange(S).view(1, -1)
    band = (j <= i) & (j > i - W)
    pairs = sum(min(n + 1, W) for n in range(S))
    rows = []
    for name, dtype in DTYPES.items():
        peak = gemm_peak_gflops(dtype)
        xs = inputs(S, D, dtype)
        for backward in (False, True):
            what = "fwd+bwd" if backward else "fwd"
            flops = 4.0 * 8 * pairs * D * (3.5 if backward else 1.0)
            t_swa, t_sdpa, t_flash, t_drop = interleaved_medians(
                [lambda: swa(xs, W, backward), lambda: sdpa(xs, band, backward), lambda: flash(xs, W, backward),
                 lambda: swa(xs, W, backward, keep_prob=0.9)], [7, 3, 7, 7])
            gflops = f"{flops / t_swa / 1e9:.0f} useful GFLOP/s = {100 * flops / t_swa / 1e9 / peak:.0f}% of GEMM peak"
            shape = f"sparse_mode 4 band {W} B=1 N=8 S={S} D={D}"
            rows += [
                {"workload": f"swa {what} {shape} vs SDPA+band mask", "dtype": name, "op_plugin_s": t_swa,
                 "pytorch_s": t_sdpa, "speedup": t_sdpa / t_swa, "throughput": gflops, "peak_extra_mb": "-"},
                {"workload": f"swa {what} {shape} vs flash_attn mask_mode 4", "dtype": name, "op_plugin_s": t_swa,
                 "pytorch_s": t_flash, "speedup": t_flash / t_swa, "throughput": "same engine, other front door",
                 "peak_extra_mb": "-"},
                {"workload": f"swa {what} {shape} keep_prob 0.9 vs 1.0", "dtype": name, "op_plugin_s": t_drop,
                 "pytorch_s": t_swa, "speedup": t_swa / t_drop,
                 "throughput": f"dropout costs {t_drop / t_swa:.2f}x", "peak_extra_mb": "-"},
            ]
    return rows
