"""Spawning the ranks of a distributed test: each worker(rank, world, store, out_dir) starts with
init_rank and saves its results to out_dir/rank<r>.pt; a worker's error fails the test with its
traceback, and a hang past the deadline terminates the workers and fails it."""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def init_rank(rank: int, world: int, store: str, timeout: timedelta) -> None:
    """A worker's start: one thread (the ranks share the cores), gloo on the loopback, the file store."""
    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world, timeout=timeout)


def spawn_and_load(worker: Callable[..., None], world: int, tmp: Path, timeout_s: float, what: str) -> list[Any]:
    ctx = mp.spawn(worker, args=(world, str(tmp / "store"), str(tmp)), nprocs=world, join=False)
    deadline = time.monotonic() + timeout_s
    while not ctx.join(timeout=max(deadline - time.monotonic(), 0.1)):  # raises if a worker failed
        if time.monotonic() >= deadline:
            for p in ctx.processes:
                if p.is_alive():
                    p.terminate()
            pytest.fail(f"{what} workers (world {world}) did not finish within {timeout_s} s")
    return [torch.load(tmp / f"rank{r}.pt") for r in range(world)]
