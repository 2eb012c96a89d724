"""Timing, machine peaks and peak-memory measurement shared by the benchmarks.

The machine is shared and noisy: every figure is a median, and every speed is reported as a
ratio against the PyTorch baseline measured in the same run.
"""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time

import torch

from op_plugin.timing import interleaved_medians, median_seconds

__all__ = ["interleaved_medians", "median_seconds", "memcpy_bandwidth_gbs", "gemm_peak_gflops", "cpu_model", "host_state",
           "peak_extra_memory_mb", "run_in_fresh_process", "rss_mb", "reset_peak_rss", "peak_rss_mb"]


def memcpy_bandwidth_gbs(nbytes: int = 1 << 30) -> float:
    """Copy bandwidth (bytes read + bytes written per second) of a large tensor copy."""
    src = torch.ones(nbytes // 4)
    dst = torch.empty_like(src)
    seconds = median_seconds(lambda: dst.copy_(src), repeat=5)
    return 2 * nbytes / seconds / 1e9


@functools.lru_cache(maxsize=None)
def _mm_gflops(dtype: torch.dtype, n: int, repeat: int) -> float:
    a = torch.randn(n, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    seconds = median_seconds(lambda: a @ b, repeat=repeat)
    return 2 * n ** 3 / seconds / 1e9


def gemm_peak_gflops(dtype: torch.dtype, n: int = 2048) -> float:
    """The machine's GEMM peak in ``dtype``: torch.mm at n x n x n.

    A 16-bit dtype whose torch.mm is slower than float32's (a CPU without AVX512_BF16 / AMX: torch
    falls back to a path about 15x slower than its float32 GEMM on an AVX2 host) peaks at the float32
    rate, which converting the operands reaches; that rate is reported and the slow n^3 run (minutes
    there) is skipped. Measured once per process.
    """
    if dtype in (torch.bfloat16, torch.float16) and _mm_gflops(dtype, 256, 3) < _mm_gflops(torch.float32, 256, 3):
        dtype = torch.float32
    return _mm_gflops(dtype, n, 5)


def cpu_model() -> str:
    """The CPU's model name and family / model numbers (Linux's /proc/cpuinfo), or the platform's name."""
    try:
        with open("/proc/cpuinfo") as f:
            info = dict(line.split(":", 1) for line in f.read().split("\n\n")[0].splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in info.items()}
        return f"{fields['model name']} (family {fields['cpu family']} model {fields['model']})"
    except (OSError, KeyError):
        import platform

        return platform.processor() or platform.machine()


def host_state(dtype: torch.dtype = torch.bfloat16, n: int = 2048) -> str:
    """The host's speed now: torch.mm GFLOP/s at n x n x n with every thread, then one thread on each
    CPU this process may use.

    On a shared host a vCPU can run at half speed for seconds at a time (its core's other
    hyperthread busy with another guest), which moves every ratio of a run whose threads meet at
    barriers; benchmarks/run.py prints this at its start and end so that a table can be read
    against the state it ran in.
    """
    def rate() -> float:  # measured afresh each time: _mm_gflops's cache would repeat its first answer
        return _mm_gflops.__wrapped__(dtype, n, 7)

    threads = torch.get_num_threads()
    # first, so that the thread pool starts with the process's whole affinity
    state = f"{str(dtype).removeprefix('torch.')} GEMM {n}^3: {threads} threads {rate():.0f} GFLOP/s"
    if not hasattr(os, "sched_setaffinity"):  # not Linux: no per-CPU figures
        return state
    cpus, alone = sorted(os.sched_getaffinity(0)), {}
    try:
        torch.set_num_threads(1)
        for cpu in cpus:
            os.sched_setaffinity(0, {cpu})
            alone[cpu] = rate()
    finally:
        os.sched_setaffinity(0, cpus)
        torch.set_num_threads(threads)
    return state + "; one thread on " + ", ".join(f"cpu{cpu} {gf:.0f}" for cpu, gf in alone.items())


def peak_extra_memory_mb(module: str, function: str, *args: object) -> float:
    """Runs ``module.function(*args)`` in a fresh process and returns its peak RSS growth (MB).

    The function sets up its inputs, takes ``base = rss_mb()`` and calls ``reset_peak_rss()``, runs
    the workload and returns ``peak_rss_mb() - base``: the extra memory the workload held.
    """
    return float(run_in_fresh_process(module, function, *args))


def run_in_fresh_process(module: str, function: str, *args: object) -> object:
    """Runs ``module.function(*args)`` in a fresh Python process and returns its JSON result.

    glibc's mmap threshold is fixed at 64 KB there (it would otherwise rise as blocks are freed), so
    memory a warm-up step frees leaves the RSS instead of staying in the heap, where the measured
    step would reuse it unseen: the peak RSS growth counts what the measured step itself holds.
    """
    code = (f"import json, resource, sys; sys.path.insert(0, {sys.path[0]!r}); import {module} as m; "
            f"print(json.dumps(m.{function}(*{list(args)!r})))")
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def spawn_ranks(worker: object, args: tuple[object, ...], world: int, timeout_s: float, what: str) -> object:
    """Runs ``worker(rank, *args, store, result)`` in ``world`` spawned processes (``store``: a file
    for init_process_group's file:// method, in a temporary directory) and returns the JSON the
    workers wrote to ``result``; a worker's error is raised here, and a hang past ``timeout_s``
    terminates them."""
    import tempfile

    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, "result.json")
        ctx = mp.spawn(worker, args=(*args, os.path.join(tmp, "store"), result), nprocs=world, join=False)
        deadline = time.monotonic() + timeout_s
        while not ctx.join(timeout=max(deadline - time.monotonic(), 0.1)):  # raises if a worker failed
            if time.monotonic() >= deadline:
                for p in ctx.processes:
                    p.terminate()
                raise TimeoutError(f"{what} workers did not finish within {timeout_s} s")
        with open(result) as f:
            return json.load(f)


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(field)


def settle_after_warm_up() -> None:
    """Between a warm-up step and the measured one: frees what the warm-up left collectable, and
    the stage-2 workspace buffer op_plugin keeps per thread, so that the measured step's growth
    counts its workspace as the step's memory rather than hiding it in the base."""
    import gc

    import op_plugin

    gc.collect()
    op_plugin.release_workspace()


def rss_mb() -> float:
    """The current resident set size (MB)."""
    return _status_mb("VmRSS")


def reset_peak_rss() -> None:
    """Restarts the peak-RSS count (VmHWM) at the current RSS (Linux: clear_refs 5)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_rss_mb() -> float:
    """The peak resident set size (MB) since the last reset_peak_rss()."""
    return _status_mb("VmHWM")
