"""Block attention residuals forward+backward against the composite eager PyTorch with autograd.

Figures: median time of each, their ratio, the op's effective bandwidth on the bytes it must
move (against the machine's measured copy bandwidth), and the peak extra memory of each.
"""
from __future__ import annotations

import torch

import op_plugin
from op_plugin import reference

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def make_inputs(T: int, N: int, H: int, dtype: torch.dtype) -> tuple[list[torch.Tensor], torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(s, generator=g).to(dtype).requires_grad_(True) for s in [(T, H), (T, N, H), (H,), (H,)]]
    return xs, torch.randn(T, H, generator=g).to(dtype)


def step(impl: str, xs: list[torch.Tensor], grad: torch.Tensor) -> None:
    for x in xs:
        x.grad = None
    if impl == "op_plugin":
        out = op_plugin.block_attention_residuals(*xs)
    else:
        out = reference.block_attention_residuals(*xs)[0]
    out.backward(grad)


def bytes_moved(T: int, N: int, H: int, dtype: torch.dtype) -> int:
    """What forward + backward must read and write at the least."""
    e = torch.finfo(dtype).bits // 8
    stats = 2 * T * (N + 1) * 4
    forward = (N + 1) * T * H * e + T * H * e + stats
    backward = (N + 1) * T * H * e + T * H * e + stats + (N + 1) * T * H * e
    return forward + backward


def measure_peak(impl: str, T: int, N: int, H: int, dtype_name: str) -> float:
    """Run in a fresh process by common.peak_extra_memory_mb: peak RSS growth of one step."""
    from common import peak_rss_mb, reset_peak_rss, rss_mb, settle_after_warm_up

    xs, grad = make_inputs(T, N, H, DTYPES[dtype_name])
    step(impl, xs, grad)  # warm up allocator and code paths, then measure a second step
    for x in xs:
        x.grad = None
    settle_after_warm_up()
    base = rss_mb()
    reset_peak_rss()
    step(impl, xs, grad)
    return max(peak_rss_mb() - base, 0.0)


def run(quick: bool = False) -> list[dict[str, object]]:
    from common import interleaved_medians, memcpy_bandwidth_gbs, peak_extra_memory_mb

    T, N, H = (1024, 8, 1024) if quick else (8192, 8, 4096)
    bandwidth = memcpy_bandwidth_gbs()
    rows = []
    for name, dtype in DTYPES.items():
        xs, grad = make_inputs(T, N, H, dtype)
        t_ours, t_torch = interleaved_medians([lambda: step("op_plugin", xs, grad), lambda: step("torch", xs, grad)],
                                              [5, 3])
        gbs = bytes_moved(T, N, H, dtype) / t_ours / 1e9
        mem_ours = peak_extra_memory_mb("bench_block_attention_residuals", "measure_peak", "op_plugin", T, N, H, name)
        mem_torch = peak_extra_memory_mb("bench_block_attention_residuals", "measure_peak", "torch", T, N, H, name)
        rows.append({
            "workload": f"block_attention_residuals fwd+bwd T={T} N={N} H={H}", "dtype": name,
            "op_plugin_s": t_ours, "pytorch_s": t_torch, "speedup": t_torch / t_ours,
            "throughput": f"{gbs:.1f} GB/s = {100 * gbs / bandwidth:.0f}% of copy bandwidth {bandwidth:.1f} GB/s",
            "peak_extra_mb": f"{mem_ours:.0f} vs {mem_torch:.0f} (ratio {mem_ours / max(mem_torch, 1e-9):.2f})",
        })
    return rows
