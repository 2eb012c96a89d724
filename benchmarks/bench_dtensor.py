"""op_plugin's ops on DTensors, 2 ranks (2 gloo processes x 1 thread, a 1-D mesh).

Tensor parallel: flash_attn with the heads split, against PyTorch's SDPA on each rank's local
heads. SDPA cannot take these DTensors: torch 2.13 has no DTensor strategy for its CPU kernels
(aten._scaled_dot_product_flash_attention_for_cpu and its backward raise "does not have a sharding
strategy registered"), so its baseline is what a user writes by hand around DTensor: SDPA on
to_local() tensors. Each rank computes its own heads with no collective on either side (Shard on
the heads in and out, by the registry's sharding: strategies), so a row compares the attention
kernels, plus DTensor's dispatch on op_plugin's side. B=1 N=8 S=2048 D=128, dense and causal,
forward (no_grad) and forward+backward, float32 and bfloat16; and a decode-size call (1 query,
16 keys, N=8, D=64) whose time is mostly per-call cost.

Sequence parallel: block_attention_residuals with the tokens split (T=8192 N=8 H=1024) and the
weights whole on each rank (their gradients partial sums), against the plain-PyTorch composite
on the same DTensors, forward and forward+backward.

Every row also times op_plugin's calls on the rank's local tensors, to show DTensor's share. A
step's time is the slower rank's (after a barrier); op, baseline and local calls are interleaved,
medians of the runs.
"""
from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import op_plugin
from op_plugin import reference
import torch
import torch.distributed as dist
import torch.nn.functional as F

TEMPLATE = torch.triu(torch.ones(2048, 2048, dtype=torch.int8), 1)
WORLD = 2
TIMEOUT_S = 1800


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def _time(fn: Callable[[], Any], calls: int) -> float:
    dist.barrier()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    t = torch.tensor([(time.perf_counter() - start) / calls], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # a step lasts as long as its slowest rank
    return t.item()


def _calls(mesh: Any, shape: tuple[int, int, int, int, int], dtype: torch.dtype, causal: bool, backward: bool
           ) -> dict[str, Callable[[], Any]]:
    """The op_plugin, SDPA and local (op_plugin on this rank's plain tensors) steps of one workload."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    B, N, Sq, Skv, D = shape
    g = torch.Generator().manual_seed(0)
    bsnd = [torch.randn(B, s, N, D, generator=g).to(dtype) for s in (Sq, Skv, Skv, Sq)]  # q, k, v, dout
    ours = [distribute_tensor(t, mesh, [Shard(2)]) for t in bsnd]
    theirs = [distribute_tensor(t.transpose(1, 2).contiguous(), mesh, [Shard(1)]) for t in bsnd]
    local = [t.to_local() for t in ours]
    mask = distribute_tensor(TEMPLATE, mesh, [Replicate()])
    kw = dict(mask_mode=3) if causal else {}

    def step(fn: Callable[..., Any], xs: list[Any], mask_arg: dict[str, Any]) -> Callable[[], Any]:
        def run() -> Any:
            q, k, v, dout = xs
            if not backward:
                with torch.no_grad():
                    return fn(q, k, v, **mask_arg)
            q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
            fn(q, k, v, **mask_arg).backward(dout)
        return run

    def flash(q: Any, k: Any, v: Any, **m: Any) -> Any:
        return op_plugin.flash_attn(q, k, v, softmax_scale=D ** -0.5, **kw, **m)[0]

    def sdpa(q: Any, k: Any, v: Any) -> Any:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    masks = ({"attn_mask": mask}, {"attn_mask": TEMPLATE}) if causal else ({}, {})
    # SDPA's CPU kernels have no DTensor strategy in torch 2.13: the baseline is SDPA on each rank's
    # local heads, what a user writes by hand around DTensor (to_local / from_local).
    return {"op_plugin": step(flash, ours, masks[0]), "pytorch": step(sdpa, [t.to_local() for t in theirs], {}),
            "local": step(flash, local, masks[1])}


def _bar_calls(mesh: Any, shape: tuple[int, int, int], dtype: torch.dtype, backward: bool
               ) -> dict[str, Callable[[], Any]]:
    """Block AttnRes with the tokens split (sequence parallel), the weights whole on each rank (their
    gradients partial sums): op_plugin's op and the plain-PyTorch composite, both on DTensors, and
    op_plugin's op on the rank's local tensors."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    T, N, H = shape
    g = torch.Generator().manual_seed(0)
    whole = [torch.randn(T, H, generator=g), torch.randn(T, N, H, generator=g),
             torch.randn(H, generator=g) * 4 / H ** 0.5, 1 + 0.1 * torch.randn(H, generator=g)]
    xs = [distribute_tensor(t.to(dtype), mesh, [Shard(0) if i < 2 else Replicate()]) for i, t in enumerate(whole)]
    grad = distribute_tensor(torch.randn(T, H, generator=g).to(dtype), mesh, [Shard(0)])

    def step(fn: Callable[..., Any], inputs: list[Any], dout: Any) -> Callable[[], Any]:
        def run() -> Any:
            if not backward:
                with torch.no_grad():
                    return fn(*inputs)
            fn(*[t.detach().requires_grad_(True) for t in inputs])[0].backward(dout)
        return run

    ours = torch.ops.op_plugin.block_attention_residuals  # (hidden_states, inv_norm, probs), as the composite
    return {"op_plugin": step(ours, xs, grad),
            "pytorch": step(reference.block_attention_residuals, xs, grad),
            "local": step(ours, [t.to_local() for t in xs], grad.to_local())}


WORKLOADS = [  # (name, kind, shape, causal, backward, dtype, runs, calls per run)
    *[(f"{'causal' if c else 'dense'} {'fwd+bwd' if b else 'fwd'}", "attention", (1, 8, 2048, 2048, 128), c, b, dt,
       5, 1) for dt in (torch.float32, torch.bfloat16) for c in (False, True) for b in (False, True)],
    *[(f"decode {'fwd+bwd' if b else 'fwd'}", "attention", (1, 8, 1, 16, 64), False, b, torch.float32, 7, 500)
      for b in (False, True)],
    *[(f"{'fwd+bwd' if b else 'fwd'}", "block_attnres", (8192, 8, 1024), False, b, dt, 5, 1)
      for dt in (torch.float32, torch.bfloat16) for b in (False, True)],
]


def _worker(rank: int, quick: bool, store: str, result: str) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD,
                            timeout=timedelta(seconds=600))
    try:
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cpu", (WORLD,))
        times: dict[str, dict[str, float]] = {}
        for name, kind, shape, causal, backward, dtype, runs, calls in WORKLOADS:
            if quick:
                shape = ((*shape[:2], min(shape[2], 256), min(shape[3], 256), shape[4]) if kind == "attention"
                         else (512, *shape[1:]))
            steps = (_calls(mesh, shape, dtype, causal, backward) if kind == "attention"
                     else _bar_calls(mesh, shape, dtype, backward))
            measured: dict[str, list[float]] = {k: [] for k in steps}
            for i in range(runs + 1):  # run 0 warms up (the sharding propagation's caches too)
                for k, fn in steps.items():
                    t = _time(fn, calls)
                    if i:
                        measured[k].append(t)
            times[f"{kind} {name} {dtype}"] = {k: _median(ts) for k, ts in measured.items()}
            times[f"{kind} {name} {dtype}"]["shape"] = list(shape)  # type: ignore[assignment]
        if rank == 0:
            with open(result, "w") as f:
                json.dump(times, f)
    finally:
        dist.destroy_process_group()


def run(quick: bool = False) -> list[dict[str, object]]:
    from common import spawn_ranks
    times = spawn_ranks(_worker, (quick,), WORLD, TIMEOUT_S, "DTensor benchmark")
    rows = []
    for name, kind, _, causal, backward, dtype, _, _ in WORKLOADS:
        t = times[f"{kind} {name} {dtype}"]
        local = f"the same calls on local tensors {t['local'] * 1e3:.3f} ms (DTensor adds {(t['op_plugin'] - t['local']) * 1e3:.3f} ms)"
        if kind == "attention":
            B, N, Sq, Skv, D = t["shape"]
            flops = 4 * B * N * Sq * Skv * D * (0.5 if causal else 1.0) * (3.5 if backward else 1.0)
            workload = (f"DTensor heads over 2 ranks x 1 thr, flash_attn {name} B={B} N={N} Sq={Sq} Skv={Skv} D={D} "
                        "vs SDPA on the local heads")
            throughput = (f"useful GFLOP/s ours {flops / t['op_plugin'] / 1e9:.0f} vs SDPA "
                          f"{flops / t['pytorch'] / 1e9:.0f}; {local}")
        else:
            T, N, H = t["shape"]
            workload = (f"DTensor tokens over 2 ranks x 1 thr, block_attention_residuals {name} T={T} N={N} H={H} "
                        "vs the composite on DTensors")
            throughput = local
        rows.append({"workload": workload, "dtype": str(dtype).removeprefix("torch."), "op_plugin_s": t["op_plugin"],
                     "pytorch_s": t["pytorch"], "speedup": t["pytorch"] / t["op_plugin"], "throughput": throughput,
                     "peak_extra_mb": "-"})
    return rows

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    for row in run(quick="--quick" in sys.argv):
        print(row["workload"], row["dtype"], f"{row['op_plugin_s'] * 1e3:.2f} ms vs {row['pytorch_s'] * 1e3:.2f} ms",
              f"{row['speedup']:.2f}x;", row["throughput"])
