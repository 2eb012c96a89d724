"""Fused Floyd attention forward+backward against the composite einsum PyTorch with autograd.

The composite materialises the 5-D score tensor [B,H,N,M,K] (two einsums, masked_fill, softmax,
two einsums), as the issue's baseline. Figures: median time of each and their ratio; the op's
GFLOP/s on the 14 GEMM-sized terms (each 2*B*H*N*M*K*D) it executes (forward: S = Q.K1 + Q.K2
and O = P.V1 + P.V2; backward: S again, dP, dQ, dK1 + dK2, dV1 + dV2) against the machine's GEMM
peak measured in the same dtype and run; the roofline ceiling (the composite's time over the
time of those 14 terms at that peak: the largest speedup any P-recomputing kernel can reach);
and the peak extra memory of one step of each (RSS growth, fresh process). The composite runs
12 such terms: it keeps P instead of recomputing S. The extra memory includes the output and the
five input gradients, which both produce; the part beyond them ("beyond outputs") is the working
memory of each implementation.

The large rows run one step of op_plugin alone at N=M=K=384 and 768 (the composite's score
tensor alone would be 7.2 GB per copy at 768 in float32): time and peak extra memory, and that
memory per byte of input, which stays flat when memory is linear in the input size.
"""
from __future__ import annotations

import torch

import op_plugin

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
B, H, D = 1, 4, 64


def composite(q, k1, v1, k2, v2, mask, scale):
    s = scale * (torch.einsum("bhnmd,bhnkd->bhnmk", q, k1) + torch.einsum("bhnmd,bhkmd->bhnmk", q, k2))
    s = s.masked_fill(mask.view(mask.shape[0], 1, mask.shape[2], 1, mask.shape[4]), torch.finfo(s.dtype).min)
    p = s.softmax(-1)
    return torch.einsum("bhnmk,bhnkd->bhnmd", p, v1) + torch.einsum("bhnmk,bhkmd->bhnmd", p, v2)


def make_inputs(S: int, dtype: torch.dtype) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    shapes = [(B, H, S, S, D)] + [(B, H, S, S, D)] * 4
    xs = [torch.randn(s, generator=g).to(dtype).requires_grad_(True) for s in shapes]
    mask = torch.rand(B, 1, S, 1, S, generator=g) < 0.1
    return xs, mask, torch.randn(B, H, S, S, D, generator=g).to(dtype)


def step(impl: str, xs: list[torch.Tensor], mask: torch.Tensor, grad: torch.Tensor) -> None:
    for x in xs:
        x.grad = None
    scale = D ** -0.5
    if impl == "op_plugin":
        out = op_plugin.fused_floyd_attention(*xs, atten_mask=mask, scale_value=scale)[2]
    else:
        out = composite(*xs, mask, scale)
    out.backward(grad)


def flops(S: int) -> float:
    """The 14 GEMM-sized terms op_plugin's forward + backward execute."""
    return 14 * 2.0 * B * H * S ** 3 * D


def output_mb(S: int, dtype: torch.dtype) -> float:
    """attention_out and the five gradients (all [B,H,S,S,D])."""
    return 6 * B * H * S * S * D * (torch.finfo(dtype).bits // 8) / 2 ** 20


def measure_peak(impl: str, S: int, dtype_name: str) -> float:
    """Run in a fresh process by common.peak_extra_memory_mb: peak RSS growth of one step."""
    from common import peak_rss_mb, reset_peak_rss, rss_mb, settle_after_warm_up

    xs, mask, grad = make_inputs(S, DTYPES[dtype_name])
    step(impl, xs, mask, grad)  # warm up allocator and code paths, then measure a second step
    for x in xs:
        x.grad = None
    settle_after_warm_up()
    base = rss_mb()
    reset_peak_rss()
    step(impl, xs, mask, grad)
    return max(peak_rss_mb() - base, 0.0)


def measure_large(S: int, dtype_name: str) -> list[float]:
    """Fresh process: seconds of an op_plugin step after a first one, the first step's peak extra RSS
    (MB) and the inputs' MB. The first step pays the first touch of every fresh page (its time is
    not the kernels'); the second runs as a training loop would."""
    import gc
    import time

    from common import peak_rss_mb, reset_peak_rss, rss_mb

    xs, mask, grad = make_inputs(S, DTYPES[dtype_name])
    gc.collect()
    base = rss_mb()
    reset_peak_rss()
    step("op_plugin", xs, mask, grad)
    extra = max(peak_rss_mb() - base, 0.0)
    start = time.perf_counter()
    step("op_plugin", xs, mask, grad)
    seconds = time.perf_counter() - start
    inputs_mb = sum(x.numel() * x.element_size() for x in xs + [grad]) / 2 ** 20
    return [seconds, extra, inputs_mb]


def run(quick: bool = False) -> list[dict[str, object]]:
    from common import gemm_peak_gflops, interleaved_medians, peak_extra_memory_mb

    S = 64 if quick else 256
    rows = []
    for name, dtype in DTYPES.items():
        peak = gemm_peak_gflops(dtype)
        xs, mask, grad = make_inputs(S, dtype)
        t_ours, t_torch = interleaved_medians(
            [lambda: step("op_plugin", xs, mask, grad), lambda: step("torch", xs, mask, grad)], [5, 5])
        gflops = flops(S) / t_ours / 1e9
        mem_ours = peak_extra_memory_mb("bench_fused_floyd_attention", "measure_peak", "op_plugin", S, name)
        mem_torch = peak_extra_memory_mb("bench_fused_floyd_attention", "measure_peak", "torch", S, name)
        outs = output_mb(S, dtype)
        beyond_ours, beyond_torch = max(mem_ours - outs, 0.0), max(mem_torch - outs, 1e-9)
        rows.append({
            "workload": f"fused_floyd_attention fwd+bwd B={B} H={H} N=M=K={S} D={D}", "dtype": name,
            "op_plugin_s": t_ours, "pytorch_s": t_torch, "speedup": t_torch / t_ours,
            "throughput": f"{gflops:.0f} GFLOP/s = {100 * gflops / peak:.0f}% of GEMM peak {peak:.0f} GFLOP/s",
            "peak_extra_mb": (f"{mem_ours:.0f} vs {mem_torch:.0f} (ratio {mem_ours / max(mem_torch, 1e-9):.2f}; "
                              f"beyond the {outs:.0f} MB of outputs: {beyond_ours:.0f} vs {beyond_torch:.0f}, "
                              f"ratio {beyond_ours / beyond_torch:.3f})"),
        })
        rows[-1]["roofline_ceiling"] = f"{t_torch / (flops(S) / peak / 1e9):.2f}x at 100% of the GEMM peak"
    if not quick:
        from common import run_in_fresh_process

        for S_large in (384, 768):
            seconds, extra, inputs = run_in_fresh_process("bench_fused_floyd_attention", "measure_large", S_large,
                                                          "float32")
            rows.append({
                "workload": f"fused_floyd_attention fwd+bwd B={B} H={H} N=M=K={S_large} D={D} (op_plugin only)",
                "dtype": "float32", "op_plugin_s": seconds, "pytorch_s": float("nan"), "speedup": float("nan"),
                "throughput": f"{flops(S_large) / seconds / 1e9:.0f} GFLOP/s",
                "peak_extra_mb": (f"{extra:.0f} MB for {inputs:.0f} MB of inputs and output grad "
                                  f"({extra / inputs:.2f} MB per input MB)"),
            })
    return rows
