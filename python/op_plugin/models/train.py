"""``op-plugin demo train``: train the op_plugin model and its plain PyTorch reference side by side.

Both models start from the same weights (one state_dict) and see the same batches in the same
order; each step runs one model then the other (alternating who goes first, so neither always
gets the warm cache). The run prints a progress bar, then a table (final and validation loss of
each, median step time and their ratio, peak extra memory of one training step measured in a
fresh process) and writes the two loss curves to a PNG.

The curves cannot be identical: the two models round differently (flash attention's online
softmax against SDPA, a fused residual kernel against a composite), and training amplifies
differences of 1e-6 step by step. They are required to agree within ``tolerance`` (the
largest per-step loss difference, in nats per byte; the loss starts at ln 256 = 5.5): 0.08 in
float32 and 0.2 in bfloat16 by default (measured: about 0.03 and 0.1 over the default 300 steps).
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor, nn

from op_plugin.models import data
from op_plugin.models.block_attnres_transformer import BlockAttnResTransformer, ModelConfig, lm_loss
from op_plugin.models.reference import ReferenceBlockAttnResTransformer

# --dtype: the parameters' dtype, or mixed precision: float32 parameters with the forward under
# torch.autocast on the CPU (AUTOCAST: autocast's dtype).
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64,
          "autocast_bfloat16": torch.float32}
AUTOCAST = {"autocast_bfloat16": torch.bfloat16}
IMPLS = {"op_plugin": BlockAttnResTransformer, "reference": ReferenceBlockAttnResTransformer}
TOLERANCE = {"float32": 0.08, "bfloat16": 0.2, "float64": 0.08, "autocast_bfloat16": 0.2}


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 300
    batch: int = 4
    seq_len: int = 256
    lr: float = 3e-3
    warmup: int = 30
    weight_decay: float = 0.0
    clip: float = 1.0
    seed: int = 0
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, but got {self.dtype!r}")
        for name in ("steps", "batch", "seq_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, but got {getattr(self, name)}")


def make_model(impl: str, cfg: ModelConfig, seed: int, dtype: torch.dtype) -> nn.Module:
    """A model whose weights depend only on (cfg, seed): both impls get the same state_dict."""
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {sorted(IMPLS)}, but got {impl!r}")
    torch.manual_seed(seed)
    return IMPLS[impl](cfg).to(dtype)


def make_optimizer(model: nn.Module, tc: TrainConfig) -> torch.optim.Optimizer:
    # foreach=False: the per-parameter loop, identical on every rank and in every process
    return torch.optim.AdamW(model.parameters(), lr=tc.lr, betas=(0.9, 0.95), weight_decay=tc.weight_decay,
                             foreach=False)


def lr_at(step: int, tc: TrainConfig) -> float:
    """Linear warmup, then cosine decay to a tenth of the peak."""
    if step < tc.warmup:
        return tc.lr * (step + 1) / tc.warmup
    progress = (step - tc.warmup) / max(tc.steps - tc.warmup, 1)
    return tc.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: Tensor, y: Tensor, lr: float, clip: float,
               autocast: Optional[torch.dtype] = None) -> Tensor:
    """Forward (under torch.autocast to ``autocast`` if given), backward, clip, AdamW step; returns the
    loss (detached)."""
    for group in opt.param_groups:
        group["lr"] = lr
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=autocast is not None):
        loss = lm_loss(model(x), y)
    loss.backward()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip, foreach=False)
    opt.step()
    return loss.detach()


@torch.no_grad()
def evaluate(model: nn.Module, val: list[tuple[Tensor, Tensor]], autocast: Optional[torch.dtype] = None) -> float:
    with torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=autocast is not None):
        return statistics.fmean(lm_loss(model(x), y).item() for x, y in val)


class ProgressBar:
    """A one-line progress bar on stderr (redrawn in place on a terminal, a line per 10% otherwise)."""

    def __init__(self, total: int, width: int = 28) -> None:
        self.total, self.width, self.start = total, width, time.perf_counter()
        self.tty = sys.stderr.isatty()
        self.last_decile = -1

    def update(self, done: int, text: str) -> None:
        elapsed = time.perf_counter() - self.start
        eta = elapsed / done * (self.total - done) if done else 0.0
        filled = self.width * done // self.total
        line = f"[{'#' * filled}{'.' * (self.width - filled)}] {done}/{self.total} {text} {elapsed:.0f}s<{eta:.0f}s"
        if self.tty:
            print(f"\r{line}", end="\n" if done == self.total else "", file=sys.stderr, flush=True)
        elif 10 * done // self.total > self.last_decile:
            self.last_decile = 10 * done // self.total
            print(line, file=sys.stderr, flush=True)


def train_both(cfg: ModelConfig, tc: TrainConfig, tokens: Tensor, progress: bool = True) -> dict[str, dict]:
    """Trains both impls side by side; per impl: losses, step_seconds, val_loss."""
    dtype = DTYPES[tc.dtype]
    train_tokens, val_tokens = data.split(tokens)
    steps = data.batches(train_tokens, tc.steps, tc.batch, tc.seq_len, seed=tc.seed + 1)
    val = data.batches(val_tokens, 4, tc.batch, tc.seq_len, seed=tc.seed + 2)
    models = {impl: make_model(impl, cfg, tc.seed, dtype) for impl in IMPLS}
    models["reference"].load_state_dict(models["op_plugin"].state_dict())
    opts = {impl: make_optimizer(m, tc) for impl, m in models.items()}
    results: dict[str, dict] = {impl: {"losses": [], "step_seconds": []} for impl in IMPLS}
    bar = ProgressBar(tc.steps) if progress else None
    order = list(IMPLS)
    for step, (x, y) in enumerate(steps):
        for impl in order if step % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            loss = train_step(models[impl], opts[impl], x, y, lr_at(step, tc), tc.clip, AUTOCAST.get(tc.dtype))
            results[impl]["losses"].append(loss.item())
            results[impl]["step_seconds"].append(time.perf_counter() - start)
        if bar:
            bar.update(step + 1, " ".join(f"{impl} {r['losses'][-1]:.3f}" for impl, r in results.items()))
    for impl, model in models.items():
        results[impl]["val_loss"] = evaluate(model, val, AUTOCAST.get(tc.dtype))
    return results


def peak_step_mb(impl: str, cfg: dict, batch: int, seq_len: int, dtype_name: str) -> float:
    """Peak RSS growth (MB) of one training step (fwd + bwd + AdamW), after a warm-up step.

    Meant to run in a fresh process (peak_step_mb_fresh), so neither model inherits the other's
    freed memory. Optimizer state exists before the measured step; gradients are re-created.
    Blocks of 64 KB and more are mmapped (glibc's threshold fixed, not raised as blocks are freed),
    so a freed activation leaves the RSS instead of being kept in the heap for the measured step:
    the growth counts what the step itself holds at its peak.
    """
    import ctypes

    from op_plugin import release_workspace

    with open("/proc/self/status") as f:
        assert any(line.startswith("VmHWM") for line in f), "peak RSS needs Linux /proc/self/status"
    ctypes.CDLL("libc.so.6").mallopt(-3, 1 << 16)  # M_MMAP_THRESHOLD

    def status_mb(field: str) -> float:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1024

    tc = TrainConfig(steps=2, batch=batch, seq_len=seq_len, dtype=dtype_name)
    model_cfg = ModelConfig(**{**cfg, "layers": tuple(cfg["layers"])})
    model = make_model(impl, model_cfg, 0, DTYPES[dtype_name])
    opt = make_optimizer(model, tc)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, model_cfg.vocab_size, (batch, seq_len), generator=g)
    y = torch.randint(0, model_cfg.vocab_size, (batch, seq_len), generator=g)
    train_step(model, opt, x, y, tc.lr, tc.clip, AUTOCAST.get(dtype_name))
    gc.collect()
    release_workspace()  # the measured step's workspaces count as its memory
    base = status_mb("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:  # restart the peak (VmHWM) at the current RSS
        f.write("5")
    train_step(model, opt, x, y, tc.lr, tc.clip, AUTOCAST.get(dtype_name))
    return max(status_mb("VmHWM") - base, 0.0)


def peak_step_mb_fresh(impl: str, cfg: ModelConfig, batch: int, seq_len: int, dtype_name: str) -> float:
    args = (impl, dataclasses.asdict(cfg), batch, seq_len, dtype_name)
    code = ("import json, sys; from op_plugin.models.train import peak_step_mb; "
            f"print(json.dumps(peak_step_mb(*json.loads(sys.argv[1]))))")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(args)], check=True, capture_output=True,
                         text=True, timeout=600).stdout
    return float(out.strip().splitlines()[-1])


def plot(path: str, results: dict[str, dict], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    styles = {"reference": dict(color="tab:gray", lw=3, alpha=0.6), "op_plugin": dict(color="tab:blue", lw=1)}
    for impl, style in styles.items():
        ax.plot(range(1, len(results[impl]["losses"]) + 1), results[impl]["losses"], label=impl, **style)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (nats per byte)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summary(results: dict[str, dict], memory: dict[str, float] | None) -> tuple[str, float]:
    """The markdown table and the largest per-step loss difference."""
    skip = min(5, len(results["op_plugin"]["step_seconds"]) - 1)  # first steps: allocator and caches warm up
    med = {impl: statistics.median(r["step_seconds"][skip:]) for impl, r in results.items()}
    diffs = [abs(a - b) for a, b in zip(results["op_plugin"]["losses"], results["reference"]["losses"])]
    diff = max(diffs)
    lines = ["| model | final loss | validation loss | median step | peak extra memory of a step |",
             "|---|---|---|---|---|"]
    for impl, r in results.items():
        mem = f"{memory[impl]:.0f} MB" if memory else "-"
        lines.append(f"| {impl} | {r['losses'][-1]:.4f} | {r['val_loss']:.4f} | {med[impl] * 1e3:.1f} ms | {mem} |")
    ratio = med["reference"] / med["op_plugin"]
    lines.append("")
    lines.append(f"step-time ratio (reference / op_plugin): {ratio:.2f}x; "
                 f"largest per-step loss difference: {diff:.4f} (step {diffs.index(diff) + 1})")
    if memory:
        ratio_mb = memory["op_plugin"] / max(memory["reference"], 1e-9)
        lines[-1] += f"; peak memory ratio (op_plugin / reference): {ratio_mb:.2f}"
    return "\n".join(lines), diff


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="op-plugin demo train", description=__doc__.split("\n\n")[0])
    defaults = TrainConfig()
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--batch", type=int, default=defaults.batch)
    parser.add_argument("--seq-len", type=int, default=defaults.seq_len)
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default=defaults.dtype)
    parser.add_argument("--corpus", help="a UTF-8 text file (default: the generated stories of op_plugin.models.data)")
    parser.add_argument("--png", default="e2e_loss.png", help="where to write the loss curves (default: %(default)s)")
    parser.add_argument("--tolerance", type=float, help="largest allowed per-step loss difference "
                                                        f"(default: {TOLERANCE})")
    parser.add_argument("--no-memory", action="store_true",
                        help="skip the peak-memory measurement (two fresh processes)")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's choice)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads must be >= 1, but got {args.threads}")
        torch.set_num_threads(args.threads)

    tc = TrainConfig(steps=args.steps, batch=args.batch, seq_len=args.seq_len, lr=args.lr, seed=args.seed,
                     dtype=args.dtype, warmup=min(defaults.warmup, max(args.steps // 10, 1)))
    cfg = ModelConfig()
    tokens = data.load_tokens(args.corpus)
    n_params = sum(p.numel() for p in BlockAttnResTransformer(cfg).parameters())
    print(f"op-plugin demo train: {n_params / 1e6:.2f}M parameters, layers {'/'.join(cfg.layers)} "
          f"(window {cfg.window}), "
          f"AttnRes blocks of {cfg.layers_per_block} layers; {len(tokens) / 1e3:.0f} KB of text; {tc.steps} steps of "
          f"{tc.batch}x{tc.seq_len} bytes, {tc.dtype}, {torch.get_num_threads()} threads")
    results = train_both(cfg, tc, tokens)
    memory = None if args.no_memory else {
        impl: peak_step_mb_fresh(impl, cfg, tc.batch, tc.seq_len, tc.dtype) for impl in IMPLS}
    table, diff = summary(results, memory)
    print(table)
    tolerance = args.tolerance if args.tolerance is not None else TOLERANCE[tc.dtype]
    plot(args.png, results, f"Block-AttnRes transformer, {tc.dtype}, batch {tc.batch}x{tc.seq_len}: "
                            f"op_plugin vs plain PyTorch (largest difference {diff:.3f})")
    print(f"loss curves: {args.png}")
    if diff > tolerance:
        print(f"op-plugin demo train: the loss curves differ by {diff:.4f} > tolerance {tolerance}", file=sys.stderr)
        return 1
    print(f"the loss curves agree within {tolerance} (largest per-step difference {diff:.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
