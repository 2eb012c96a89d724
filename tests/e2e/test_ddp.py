"""DDP (gloo, 2 spawned processes) gives the single-process losses for the same global batch.

float64, so the only differences are summation order: each rank's mean loss and DDP's gradient
all-reduce (sum / 2) against one mean over the global batch, about 1e-16 relative per step. Over
three AdamW steps that stays far below 1e-9 (Adam divides by sqrt(v) + 1e-8, so a gradient
difference of d moves a weight by at most lr * d / 1e-8 ~ 1e-11 here). A wrong rank slice, a
missing gradient average or an unsynchronised parameter changes the losses by 1e-3 or more.
"""
from __future__ import annotations

import pytest

from op_plugin.models import ModelConfig
from op_plugin.models.ddp import train_ddp, train_single
from op_plugin.models.train import TrainConfig

CFG = ModelConfig(d_model=32, n_heads=4, n_kv_heads=2, head_dim=8, mlp_hidden=64, window=8)
TC = TrainConfig(steps=3, batch=4, seq_len=32, lr=1e-2, warmup=1, dtype="float64")


def test_ddp_two_processes_match_single_process() -> None:
    single = train_single(CFG, TC)
    distributed = train_ddp(CFG, TC, world=2, timeout=120)  # a hung worker fails the test, not blocks it
    assert len(distributed) == TC.steps
    assert single[0] > single[-1] + 0.1  # the steps really train: later losses depend on the updates
    for step, (a, b) in enumerate(zip(single, distributed)):
        assert abs(a - b) <= 1e-9, (step, single, distributed)


def test_ddp_needs_a_divisible_batch() -> None:
    with pytest.raises(ValueError, match="global batch"):
        train_ddp(CFG, TrainConfig(steps=1, batch=3, seq_len=32), world=2)
