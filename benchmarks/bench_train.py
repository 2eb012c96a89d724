"""One training step of the Block-AttnRes transformer (issue 8): op_plugin model vs plain PyTorch twin.

The model of op_plugin.models at sequence length 4096, batch 1: d_model 256, 4 query heads and
2 key/value heads of 64 (GQA), SwiGLU 768, four layers window/window/window/causal (window 512,
the 3:1 local:global mix of recent long-context models), Block AttnRes blocks of 2 layers.
A step is forward, backward, gradient clipping and AdamW, on the same weights and tokens.
op_plugin: flash_attn (mask_mode 4 / 3, BSND, GQA) and block_attention_residuals with their
backward ops through autograd; reference: SDPA (band mask / is_causal, enable_gqa) and the
composite Block AttnRes with autograd. Everything else (projections, MLP, norms, rotary,
embedding, loss, optimizer) is the same code on both sides.

Figures: median step time of each and their ratio; peak extra memory of one step of each
(RSS growth after a warm-up step, fresh process). Target: op_plugin >= 2x faster, less memory.
"""
from __future__ import annotations

import torch

DTYPES = ("float32", "bfloat16", "autocast_bfloat16")  # the last: float32 weights, torch.autocast


def config(quick: bool):
    from op_plugin.models import ModelConfig

    return ModelConfig(d_model=256, n_heads=4, n_kv_heads=2, head_dim=64, mlp_hidden=768,
                       layers=("window", "window", "window", "causal"), window=128 if quick else 512,
                       layers_per_block=2)


def measure_peak(impl: str, dtype_name: str, quick: bool) -> float:
    """Run in a fresh process by common.peak_extra_memory_mb."""
    import dataclasses

    from op_plugin.models.train import peak_step_mb

    return peak_step_mb(impl, dataclasses.asdict(config(quick)), 1, 1024 if quick else 4096, dtype_name)


def run(quick: bool = False) -> list[dict[str, object]]:
    from common import interleaved_medians, peak_extra_memory_mb
    from op_plugin.models import train

    cfg = config(quick)
    S = 1024 if quick else 4096
    tc = train.TrainConfig(batch=1, seq_len=S)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, cfg.vocab_size, (1, S), generator=g)
    y = torch.randint(0, cfg.vocab_size, (1, S), generator=g)
    rows = []
    for name in DTYPES:
        dtype = train.DTYPES[name]
        steps = {}
        for impl in train.IMPLS:
            model = train.make_model(impl, cfg, 0, dtype)
            opt = train.make_optimizer(model, tc)
            steps[impl] = (lambda m=model, o=opt: train.train_step(m, o, x, y, 1e-4, tc.clip, train.AUTOCAST.get(name)))
        t_ours, t_ref = interleaved_medians([steps["op_plugin"], steps["reference"]], [3, 3])
        mem_ours = peak_extra_memory_mb("bench_train", "measure_peak", "op_plugin", name, quick)
        mem_ref = peak_extra_memory_mb("bench_train", "measure_peak", "reference", name, quick)
        layers = "/".join(k[0].upper() for k in cfg.layers)
        rows.append({
            "workload": f"train step S={S} d={cfg.d_model} GQA 4:2 D=64 {layers} W={cfg.window} vs plain PyTorch",
            "dtype": name, "op_plugin_s": t_ours, "pytorch_s": t_ref, "speedup": t_ref / t_ours,
            "throughput": f"{S / t_ours:.0f} tokens/s vs {S / t_ref:.0f}",
            "peak_extra_mb": f"{mem_ours:.0f} vs {mem_ref:.0f} (ratio {mem_ours / max(mem_ref, 1e-9):.2f})",
        })
    return rows


if __name__ == "__main__":
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    for row in run(quick="--quick" in sys.argv):
        print(row)
