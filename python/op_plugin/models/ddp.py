"""The demo training under torch.distributed: DistributedDataParallel, gloo, N processes.

Each rank takes its slice of every global batch (the same batches train_single uses), so with
DDP's gradient averaging and equal token counts per rank the update equals the single-process
update on the whole global batch; the loss reported for a step is the mean of the ranks' losses.

    python -m op_plugin.models.ddp [--world 2] [--steps 20]     # DDP losses next to single-process ones
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

from op_plugin.models import data
from op_plugin.models.block_attnres_transformer import ModelConfig
from op_plugin.models.train import AUTOCAST, DTYPES, TrainConfig, lr_at, make_model, make_optimizer, train_step

COLLECTIVE_TIMEOUT = timedelta(seconds=60)  # a hung peer fails the collective instead of blocking forever


def _global_batches(tc: TrainConfig, corpus: str | None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    train_tokens, _ = data.split(data.load_tokens(corpus))
    return data.batches(train_tokens, tc.steps, tc.batch, tc.seq_len, seed=tc.seed + 1)


def train_single(cfg: ModelConfig, tc: TrainConfig, impl: str = "op_plugin", corpus: str | None = None) -> list[float]:
    """Losses of ``tc.steps`` steps in this process on the global batches."""
    model = make_model(impl, cfg, tc.seed, DTYPES[tc.dtype])
    opt = make_optimizer(model, tc)
    return [train_step(model, opt, x, y, lr_at(step, tc), tc.clip, AUTOCAST.get(tc.dtype)).item()
            for step, (x, y) in enumerate(_global_batches(tc, corpus))]


def _train_rank(rank: int, world: int, cfg: dict, tc: dict, impl: str, corpus: str | None) -> list[float]:
    model_cfg = ModelConfig(**{**cfg, "layers": tuple(cfg["layers"])})
    train_cfg = TrainConfig(**tc)
    model = DistributedDataParallel(make_model(impl, model_cfg, train_cfg.seed, DTYPES[train_cfg.dtype]))
    opt = make_optimizer(model, train_cfg)
    local = train_cfg.batch // world
    losses = []
    for step, (x, y) in enumerate(_global_batches(train_cfg, corpus)):
        rows = slice(rank * local, (rank + 1) * local)
        loss = train_step(model, opt, x[rows], y[rows], lr_at(step, train_cfg), train_cfg.clip,
                          AUTOCAST.get(train_cfg.dtype))
        dist.all_reduce(loss)  # sum of the ranks' means; equal token counts: /world is the global mean
        losses.append(loss.item() / world)
    return losses


def _worker(rank: int, world: int, store: str, out: str, cfg: dict, tc: dict, impl: str, corpus: str | None,
            threads: int) -> None:
    torch.set_num_threads(threads)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=COLLECTIVE_TIMEOUT)
    try:
        losses = _train_rank(rank, world, cfg, tc, impl, corpus)
        if rank == 0:
            with open(out, "w") as f:
                json.dump(losses, f)
        dist.barrier()  # no rank tears down while a peer is still in a collective
    finally:
        dist.destroy_process_group()
    # Done: leave without interpreter finalization. DDP's reducer keeps the gloo group and its
    # worker threads alive past destroy_process_group (without DDP they are joined there), and a
    # gloo thread that releases a collective's tensor once finalization has begun cannot take the
    # GIL and aborts the process: "terminate called without an active exception" at exit, about
    # one run in ten on 2 cores (pytorch/pytorch#179291). Nothing of this worker needs finalizing.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def train_ddp(cfg: ModelConfig, tc: TrainConfig, world: int = 2, impl: str = "op_plugin", corpus: str | None = None,
              timeout: float = 300.0, threads: int = 1) -> list[float]:
    """Losses of ``tc.steps`` DDP steps over ``world`` spawned gloo processes (tc.batch is the global batch).

    Raises TimeoutError (after terminating the workers) if they are not done within ``timeout`` s.
    """
    if world < 1 or tc.batch % world:
        raise ValueError(f"the global batch ({tc.batch}) must be a multiple of world ({world}) >= 1")
    with tempfile.TemporaryDirectory(prefix="op_plugin_ddp_") as tmp:
        out = os.path.join(tmp, "losses.json")
        args = (world, os.path.join(tmp, "store"), out, dataclasses.asdict(cfg), dataclasses.asdict(tc), impl, corpus,
                threads)
        ctx = mp.spawn(_worker, args=args, nprocs=world, join=False)
        deadline = time.monotonic() + timeout
        while not ctx.join(timeout=max(deadline - time.monotonic(), 0.1)):  # raises if a worker failed
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    p.terminate()
                raise TimeoutError(f"DDP workers not done after {timeout:.0f} s")
        with open(out) as f:
            return json.load(f)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m op_plugin.models.ddp", description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=4, help="global batch")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    args = parser.parse_args(argv)
    cfg = ModelConfig()
    tc = TrainConfig(steps=args.steps, batch=args.batch, seq_len=args.seq_len, dtype=args.dtype,
                     warmup=max(args.steps // 10, 1))
    single = train_single(cfg, tc)
    distributed = train_ddp(cfg, tc, world=args.world, threads=max(torch.get_num_threads() // args.world, 1))
    print(f"{'step':>4} {'single':>10} {'DDP x' + str(args.world):>10} {'difference':>11}")
    for step, (a, b) in enumerate(zip(single, distributed)):
        print(f"{step:4d} {a:10.6f} {b:10.6f} {abs(a - b):11.2e}")
    print(f"largest difference {max(abs(a - b) for a, b in zip(single, distributed)):.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
