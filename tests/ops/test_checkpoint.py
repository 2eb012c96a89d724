"""Activation checkpointing (torch.utils.checkpoint) through the ops: the recomputed forward equals
the first one bit for bit, swa_forward's dropout included (its binding draws from torch's default
CPU generator, whose state checkpoint saves and restores), in both checkpoint modes and compiled."""
from __future__ import annotations

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import op_plugin


def _leaves() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(1, 40, 4, 16, generator=g).requires_grad_() for _ in range(3)]


def _block(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """flash_attn next to swa_forward with dropout: a recomputation that drew other numbers, or none,
    would change the output or the gradients."""
    dense = op_plugin.flash_attn(q, k, v, softmax_scale=0.25)[0]
    dropped = op_plugin.swa_forward(q, k, v, 4, "BSND", scale=0.25, keep_prob=0.8)[0]
    return dense + dropped


def _run(fn, leaves: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    torch.manual_seed(1)
    out = fn(*leaves)
    for t in leaves:
        t.grad = None
    out.square().sum().backward()  # .backward(): the reentrant mode refuses torch.autograd.grad
    return out.detach(), [t.grad for t in leaves]


@pytest.mark.parametrize("reentrant", [False, True], ids=["non_reentrant", "reentrant"])
def test_checkpoint_recomputes_the_same_forward(reentrant: bool) -> None:
    leaves = _leaves()
    want, want_grads = _run(_block, leaves)
    got, got_grads = _run(lambda *t: checkpoint(_block, *t, use_reentrant=reentrant), leaves)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    for a, b in zip(got_grads, want_grads):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    # the dropout is live: another seed gives another output
    torch.manual_seed(2)
    assert not torch.equal(_block(*leaves), want)


def test_compiled_checkpoint() -> None:
    torch._dynamo.reset()
    leaves = _leaves()
    want, want_grads = _run(_block, leaves)
    compiled = torch.compile(lambda *t: checkpoint(_block, *t, use_reentrant=False), backend="aot_eager",
                             fullgraph=True)
    got, got_grads = _run(compiled, leaves)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    for a, b in zip(got_grads, want_grads):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
