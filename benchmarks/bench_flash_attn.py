"""Flash attention (flash_attn, then flash_attn_grad) against torch SDPA.

Workloads (issue 3): B=1 N=8 S=2048 D=128 dense and causal, float32, bfloat16 and float16, forward and
forward+backward, against torch SDPA (is_causal for causal: Sq = Skv, so top-left and
bottom-right agree and SDPA may use its flash backend); and the sliding window S=8192,
W=512 (mask_mode 4, win_left=511, win_right=0), D=64, against SDPA with an explicit boolean band
mask. op_plugin runs in BNSD, SDPA's own layout, so neither side transposes.

Few query rows (speculative decode, 2026-12-06; chunked prefill, 2026-12-07): Sq = 1, 4, 5, 12 and
32 against Skv = 2048 keys of 2 kv heads (8 query heads, D=128), float32 and bfloat16, forward (and
forward+backward at Sq = 4, 12 and 32), and one-row decode against 16,384 keys of one kv head
(split-K), against SDPA with enable_gqa; memory bound at one row, so their throughput is K and V's
bytes read per second against the machine's copy bandwidth.

Figures: median time of each and their ratio, op_plugin's useful GFLOP/s (only the allowed
(query, key) pairs count: 4*D per pair forward, 2.5x that backward, the usual flash attention
convention) against the machine's GEMM peak in the same dtype, and for forward+backward the
peak extra memory of one step of each (RSS growth, fresh process).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

import op_plugin

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# float16 runs the dense and causal workloads only: its window baseline (SDPA with a band mask in
# float16) is no more telling than bf16's and takes minutes per call on CPUs without fp16 GEMMs.
WINDOW_DTYPES = ("float32", "bfloat16")
TEMPLATE = torch.triu(torch.ones(2048, 2048, dtype=torch.int8), 1)


def make_inputs(B: int, N: int, S: int, D: int, dtype: torch.dtype) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(B, N, S, D, generator=g).to(dtype) for _ in range(4)]  # q, k, v, dout


def band(S: int, W: int) -> torch.Tensor:
    """SDPA keep-mask of mask_mode 4 with win_left = W - 1, win_right = 0 (Sq = Skv)."""
    i = torch.arange(S).view(-1, 1)
    j = torch.arange(S).view(1, -1)
    return (j <= i) & (j > i - W)


def op_kwargs(mode: str, W: int) -> dict[str, object]:
    kw: dict[str, object] = dict(layout_q="BNSD", layout_kv="BNSD", layout_out="BNSD")
    if mode == "causal":
        kw.update(mask_mode=3, attn_mask=TEMPLATE)
    elif mode == "window":
        kw.update(mask_mode=4, attn_mask=TEMPLATE, win_left=W - 1, win_right=0)
    return kw


def run_op(xs: list[torch.Tensor], mode: str, W: int, backward: bool) -> None:
    q, k, v, dout = xs
    kw = op_kwargs(mode, W)
    scale = q.shape[-1] ** -0.5
    out, lse = op_plugin.flash_attn(q, k, v, softmax_scale=scale, return_softmax_lse=backward, **kw)
    if backward:
        op_plugin.flash_attn_grad(q, k, v, dout, out, lse, softmax_scale=scale, **kw)


def run_sdpa(xs: list[torch.Tensor], mode: str, mask: torch.Tensor | None, backward: bool) -> None:
    q, k, v, dout = xs
    if backward:
        q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mode == "causal")
    if backward:
        out.backward(dout)


def useful_flops(B: int, N: int, S: int, D: int, mode: str, W: int, backward: bool) -> float:
    if mode == "dense":
        pairs = S * S
    elif mode == "causal":
        pairs = S * (S + 1) // 2
    else:
        pairs = sum(min(i + 1, W) for i in range(S))
    fwd = 4.0 * B * N * pairs * D
    return fwd * (3.5 if backward else 1.0)


def measure_peak(impl: str, B: int, N: int, S: int, D: int, dtype_name: str, mode: str, W: int) -> float:
    """Run in a fresh process by common.peak_extra_memory_mb: peak RSS growth of one fwd+bwd step."""
    from common import peak_rss_mb, reset_peak_rss, rss_mb, settle_after_warm_up

    xs = make_inputs(B, N, S, D, DTYPES[dtype_name])
    mask = band(S, W) if mode == "window" else None

    def step():
        if impl == "op_plugin":
            run_op(xs, mode, W, True)
        else:
            run_sdpa(xs, mode, mask, True)

    step()  # warm up allocator and code paths, then measure a second step
    settle_after_warm_up()
    base = rss_mb()
    reset_peak_rss()
    step()
    return max(peak_rss_mb() - base, 0.0)


def few_rows(quick: bool = False) -> list[dict[str, object]]:
    """Few query rows against a long key sequence (module docstring)."""
    from common import interleaved_medians, memcpy_bandwidth_gbs

    B, N, D = 1, 8, 128
    copy_gbs = memcpy_bandwidth_gbs()
    g = torch.Generator().manual_seed(0)
    kw = op_kwargs("dense", 0)
    rows = []
    # (kv heads, keys, [(query rows, backward)]): then one-row decode against a long context of
    # one kv head, whose keys the row kernels split (kSmallFwdSplitKeys)
    calls = [(2, 512 if quick else 2048, [(1, False), (4, False), (5, False), (12, False), (32, False), (4, True),
                                          (12, True), (32, True)]),
             (1, 2048 if quick else 16384, [(1, False)])]
    for name, (N2, Skv, shapes) in ((n, c) for n in WINDOW_DTYPES for c in calls):
        dtype = DTYPES[name]
        k, v = (torch.randn(B, N2, Skv, D, generator=g).to(dtype) for _ in range(2))
        for sq, backward in shapes:
            q = torch.randn(B, N, sq, D, generator=g).to(dtype)
            dout = torch.randn(B, N, sq, D, generator=g).to(dtype)

            def ours(q=q, dout=dout, backward=backward):
                out, lse = op_plugin.flash_attn(q, k, v, softmax_scale=D ** -0.5, return_softmax_lse=backward, **kw)
                if backward:
                    op_plugin.flash_attn_grad(q, k, v, dout, out, lse, softmax_scale=D ** -0.5, **kw)

            def sdpa(q=q, dout=dout, backward=backward):
                qq, kk, vv = (t.detach().requires_grad_(backward) for t in (q, k, v))
                out = F.scaled_dot_product_attention(qq, kk, vv, enable_gqa=True)
                if backward:
                    out.backward(dout)

            t_ours, t_torch = interleaved_medians([ours, sdpa], [21, 21], warmup=3)
            gbs = 2 * k.numel() * k.element_size() / t_ours / 1e9
            rows.append({
                "workload": f"flash_attn {'fwd+bwd' if backward else 'fwd'} few rows Sq={sq} Skv={Skv} B={B} N={N} "
                            f"on {N2} kv heads D={D} vs SDPA",
                "dtype": name, "op_plugin_s": t_ours, "pytorch_s": t_torch, "speedup": t_torch / t_ours,
                "throughput": f"K, V read at {gbs:.1f} GB/s = {100 * gbs / copy_gbs:.0f}% of copy {copy_gbs:.1f} GB/s",
                "peak_extra_mb": "-",
            })
    return rows


def run(quick: bool = False) -> list[dict[str, object]]:
    from common import gemm_peak_gflops, interleaved_medians, peak_extra_memory_mb

    dense = (1, 8, 512 if quick else 2048, 128)
    window = (1, 8, 1024 if quick else 8192, 64)
    W = 128 if quick else 512
    workloads = [(dense, "dense"), (dense, "causal"), (window, "window")]
    rows = []
    for name, dtype in DTYPES.items():
        peak = gemm_peak_gflops(dtype)
        for (B, N, S, D), mode in workloads:
            if mode == "window" and name not in WINDOW_DTYPES:
                continue
            xs = make_inputs(B, N, S, D, dtype)
            mask = band(S, W) if mode == "window" else None
            for backward in (False, True):
                repeat = 3 if (mode == "window" and backward) else 5
                t_ours, t_torch = interleaved_medians(
                    [lambda: run_op(xs, mode, W, backward), lambda: run_sdpa(xs, mode, mask, backward)], [5, repeat])
                gflops = useful_flops(B, N, S, D, mode, W, backward) / t_ours / 1e9
                if backward:
                    args = (B, N, S, D, name, mode, W)
                    mem_ours = peak_extra_memory_mb("bench_flash_attn", "measure_peak", "op_plugin", *args)
                    mem_torch = peak_extra_memory_mb("bench_flash_attn", "measure_peak", "torch", *args)
                    memory = f"{mem_ours:.0f} vs {mem_torch:.0f} (ratio {mem_ours / max(mem_torch, 1e-9):.2f})"
                else:
                    memory = "-"
                what = f"W={W} " if mode == "window" else ""
                baseline = "SDPA+band mask" if mode == "window" else "SDPA"
                rows.append({
                    "workload": f"flash_attn {'fwd+bwd' if backward else 'fwd'} {mode} {what}B={B} N={N} S={S} D={D} vs {baseline}",
                    "dtype": name, "op_plugin_s": t_ours, "pytorch_s": t_torch, "speedup": t_torch / t_ours,
                    "throughput": f"{gflops:.0f} useful GFLOP/s = {100 * gflops / peak:.0f}% of GEMM peak {peak:.0f} GFLOP/s",
                    "peak_extra_mb": memory,
                })
    return rows + few_rows(quick)
