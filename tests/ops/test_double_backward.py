"""The backward ops have no derivative: double backward raises a clear error, never a silent zero.

Ops without an 'autograd:' pairing get torch's not-implemented Autograd kernel from the generator.
Before it, the second backward of a graph built through a backward op (create_graph=True) ran
torch's deprecated fallback: a warning that no autograd kernel was registered, and that path's
second-order gradient silently taken as zero.
"""
from __future__ import annotations

import warnings

import pytest
import torch

import op_plugin


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64).requires_grad_(True)


def _flash_attn():
    q, k, v = _randn(1, 4, 2, 8), _randn(1, 5, 2, 8), _randn(1, 5, 2, 8)
    return q, op_plugin.flash_attn(q, k, v, softmax_scale=0.3)[0]


def _swa_forward():
    q, k, v = _randn(1, 2, 4, 8), _randn(1, 2, 5, 8), _randn(1, 2, 5, 8)
    return q, op_plugin.swa_forward(q, k, v, 2, "BNSD", scale=0.3)[0]


def _fused_floyd_attention():
    q, k1, v1, k2, v2 = _randn(1, 2, 3, 4, 8), _randn(1, 2, 3, 5, 8), _randn(1, 2, 3, 5, 8), \
        _randn(1, 2, 5, 4, 8), _randn(1, 2, 5, 4, 8)
    return q, op_plugin.fused_floyd_attention(q, k1, v1, k2, v2, scale_value=0.3)[2]


def _block_attention_residuals():
    partial, blocks, proj, norm = _randn(3, 8), _randn(3, 2, 8), _randn(8), _randn(8)
    return partial, op_plugin.block_attention_residuals(partial, blocks, proj, norm)


FORWARDS = {
    "flash_attn_grad": _flash_attn,
    "swa_backward": _swa_forward,
    "fused_floyd_attention_grad": _fused_floyd_attention,
    "block_attention_residuals_grad": _block_attention_residuals,
}


@pytest.mark.parametrize("backward_op", sorted(FORWARDS))
def test_backward_through_a_backward_op_raises(backward_op: str) -> None:
    x, out = FORWARDS[backward_op]()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "autograd kernel was not registered" deprecation warning
        (grad_x,) = torch.autograd.grad(out, x, torch.randn_like(out), create_graph=True)
    assert grad_x.requires_grad  # the backward op's output is attached to the graph ...
    with pytest.raises(RuntimeError, match=f"derivative for op_plugin::{backward_op} is not implemented"):
        grad_x.sum().backward()  # ... and backward through it says so


@pytest.mark.parametrize("backward_op", sorted(FORWARDS))
def test_first_order_gradients_are_untouched(backward_op: str) -> None:
    x, out = FORWARDS[backward_op]()
    (plain,) = torch.autograd.grad(out, x, torch.ones_like(out), retain_graph=True)
    (with_graph,) = torch.autograd.grad(out, x, torch.ones_like(out), create_graph=True)
    assert not plain.requires_grad
    torch.testing.assert_close(with_graph.detach(), plain, rtol=0, atol=0)
