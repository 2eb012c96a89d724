"""block_attention_residuals and its grad (SPEC §4) against float64 PyTorch references."""
from __future__ import annotations

import re

import pytest
import torch
from op_test_utils import (ALL_DTYPES, assert_within_budget, eager_shapes, fake_shapes, num_threads,
                           raises_same_in_eager_and_fake)

import op_plugin
from op_plugin import reference

FWD = torch.ops.op_plugin.block_attention_residuals.default
BWD = torch.ops.op_plugin.block_attention_residuals_grad.default
SHAPES = [(1, 1, 1), (3, 1, 7), (5, 4, 33), (17, 8, 64), (4, 2, 4097)]  # (T, N, H): odd H, tails


def make_inputs(T: int, N: int, H: int, dtype: torch.dtype, requires_grad: bool = False, seed: int = 0,
                proj_2d: bool = False) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    partial = torch.randn(T, H, generator=g, dtype=torch.float64)
    blocks = torch.randn(T, N, H, generator=g, dtype=torch.float64) * torch.linspace(0.5, 2, N, dtype=torch.float64).view(1, N, 1)
    proj = torch.randn((1, H) if proj_2d else (H,), generator=g, dtype=torch.float64) / H ** 0.5 * 4
    norm = 1 + 0.1 * torch.randn(H, generator=g, dtype=torch.float64)
    return [x.to(dtype).requires_grad_(requires_grad) for x in (partial, blocks, proj, norm)]


def reference_grads(inputs: list[torch.Tensor], grad_out: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    leaves = [x.detach().requires_grad_(True) for x in inputs]
    hidden = reference.block_attention_residuals(*leaves)[0]
    hidden.backward(grad_out)
    return hidden.detach(), [x.grad for x in leaves]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("T,N,H", SHAPES)
def test_forward_and_backward_match_float64_reference(T: int, N: int, H: int, dtype: torch.dtype) -> None:
    inputs = make_inputs(T, N, H, dtype, requires_grad=True, seed=T * 100 + H)
    grad_out = torch.randn(T, H, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(dtype)

    ours = op_plugin.block_attention_residuals(*inputs)
    ours.backward(grad_out)
    our_grads = [x.grad for x in inputs]

    ref64, ref64_grads = reference_grads([x.double() for x in inputs], grad_out.double())
    same, same_grads = reference_grads(inputs, grad_out)
    assert ours.dtype == dtype and ours.shape == (T, H)
    assert_within_budget(ours, same, ref64, "hidden_states")
    for name, g, s, r in zip(("partial_block", "block_res", "proj_weight", "norm_weight"), our_grads, same_grads, ref64_grads):
        assert g.dtype == dtype and g.shape == r.shape
        assert_within_budget(g, s, r, f"grad of {name}")


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_statistics_outputs(dtype: torch.dtype) -> None:
    inputs = make_inputs(6, 3, 40, dtype)
    hidden, inv_norm, probs = FWD(*inputs)
    _, ref_inv, ref_probs = reference.block_attention_residuals(*[x.double() for x in inputs])
    stats = torch.float64 if dtype == torch.float64 else torch.float32
    assert inv_norm.dtype == stats and probs.dtype == stats
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(inv_norm.double(), ref_inv, rtol=tol, atol=tol)
    torch.testing.assert_close(probs.double(), ref_probs, rtol=tol, atol=tol)
    torch.testing.assert_close(probs.sum(-1).double(), torch.ones(6, dtype=torch.float64), rtol=tol, atol=tol)


def test_proj_weight_1xH_and_norm_eps() -> None:
    inputs = make_inputs(4, 2, 16, torch.float64, proj_2d=True)
    ours = op_plugin.block_attention_residuals(*inputs, norm_eps=0.5)
    ref = reference.block_attention_residuals(*inputs, norm_eps=0.5)[0]
    torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-12)
    # eps sits inside the sqrt: a huge eps flattens the logits towards uniform weights.
    _, _, probs = FWD(*inputs, -1, 1e12)
    torch.testing.assert_close(probs, torch.full_like(probs, 1 / 3), rtol=1e-5, atol=1e-5)


def test_valid_block_num_accepts_minus_one_or_n_and_is_ignored() -> None:
    inputs = make_inputs(3, 4, 8, torch.float64)
    a = op_plugin.block_attention_residuals(*inputs, valid_block_num=-1)
    b = op_plugin.block_attention_residuals(*inputs, valid_block_num=4)
    assert torch.equal(a, b)


def test_gradcheck_float64() -> None:
    inputs = make_inputs(3, 2, 5, torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *x: op_plugin.block_attention_residuals(*x, norm_eps=1e-3), inputs)
    assert torch.autograd.gradgradcheck is not None  # second order is not registered: see docs


def test_gradcheck_float64_proj_1xH() -> None:
    inputs = make_inputs(2, 3, 4, torch.float64, requires_grad=True, proj_2d=True)
    assert torch.autograd.gradcheck(lambda *x: op_plugin.block_attention_residuals(*x), inputs)


# opcheck of both ops (proj_weight [H] and [1, H], valid_block_num = N, norm_eps) is generated from
# the registry's samples: tests/ops/test_generated.py.


@pytest.mark.parametrize("T,N,H", [(0, 3, 8), (4, 3, 0), (0, 0, 0), (3, 1, 5)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_fake_shapes_match_eager(T: int, N: int, H: int, dtype: torch.dtype) -> None:
    x = make_inputs(T, N, H, dtype)
    assert fake_shapes(FWD, *x) == eager_shapes(FWD(*x))
    _, inv_norm, probs = FWD(*x)
    grad = torch.zeros(T, H, dtype=dtype)
    assert fake_shapes(BWD, *x, grad, inv_norm, probs) == eager_shapes(BWD(*x, grad, inv_norm, probs))


def test_empty_edges() -> None:
    # T = 0 and H = 0 give empty outputs; the weight grads of an empty T are zero.
    x = make_inputs(0, 3, 8, torch.float32)
    hidden, inv_norm, probs = FWD(*x)
    assert hidden.shape == (0, 8) and inv_norm.shape == (0, 4) and probs.shape == (0, 4)
    grads = BWD(*x, torch.zeros(0, 8), inv_norm, probs)
    assert [g.shape for g in grads] == [(0, 8), (0, 3, 8), (8,), (8,)]
    assert torch.equal(grads[2], torch.zeros(8)) and torch.equal(grads[3], torch.zeros(8))
    x = make_inputs(4, 3, 0, torch.float32)
    hidden, inv_norm, probs = FWD(*x)
    assert hidden.shape == (4, 0) and inv_norm.shape == (4, 4)


def test_grad_with_no_completed_blocks() -> None:
    # N = 0 (the grad allows it): only the partial row, whose softmax weight is 1.
    x = make_inputs(5, 0, 6, torch.float64)
    hidden, inv_norm, probs = FWD(*x)
    torch.testing.assert_close(hidden, x[0])
    grad = torch.randn(5, 6, dtype=torch.float64)
    g_partial, g_blocks, g_proj, g_norm = BWD(*x, grad, inv_norm, probs)
    torch.testing.assert_close(g_partial, grad)  # d(hidden)/d(partial) is the identity when probs = 1
    assert g_blocks.shape == (5, 0, 6)
    torch.testing.assert_close(g_proj, torch.zeros(6, dtype=torch.float64))
    torch.testing.assert_close(g_norm, torch.zeros(6, dtype=torch.float64))


def test_torch_compile_fullgraph_forward_and_backward() -> None:
    x = make_inputs(8, 3, 32, torch.float32, requires_grad=True)

    def step(partial, blocks, proj, norm):
        return (op_plugin.block_attention_residuals(partial, blocks, proj, norm) * 2).square().sum()

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    loss = compiled(*x)
    loss.backward()
    got = [t.grad.clone() for t in x]
    for t in x:
        t.grad = None
    expected = step(*x)
    expected.backward()
    torch.testing.assert_close(loss, expected)
    for g, t in zip(got, x):
        torch.testing.assert_close(g, t.grad)


def test_torch_compile_inductor_dynamic() -> None:
    compiled = torch.compile(op_plugin.block_attention_residuals, fullgraph=True, dynamic=True)
    for T in (5, 9):
        x = make_inputs(T, 2, 16, torch.float32)
        torch.testing.assert_close(compiled(*x), op_plugin.block_attention_residuals(*x))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_bitwise_identical_for_1_and_2_threads(dtype: torch.dtype) -> None:
    x = make_inputs(300, 5, 257, dtype, seed=3)
    grad = torch.randn(300, 257).to(dtype)
    with num_threads(1):
        one = FWD(*x)
        one_grad = BWD(*x, grad, one[1], one[2])
    with num_threads(2):
        two = FWD(*x)
        two_grad = BWD(*x, grad, two[1], two[2])
        again = BWD(*x, grad, two[1], two[2])
    for a, b in zip(one + one_grad, two + two_grad):
        assert torch.equal(a, b)
    for a, b in zip(two_grad, again):
        assert torch.equal(a, b)


def test_non_contiguous_inputs() -> None:
    x = make_inputs(6, 3, 10, torch.float64)
    blocks_t = x[1].transpose(0, 1).contiguous().transpose(0, 1)  # same values, other strides
    assert not blocks_t.is_contiguous()
    torch.testing.assert_close(op_plugin.block_attention_residuals(x[0], blocks_t, x[2], x[3]),
                               op_plugin.block_attention_residuals(*x))


# ---- every SPEC §4 error, in eager and fake mode ------------------------------------------------

def _bad(**change: object) -> list[object]:
    args: dict[str, object] = dict(zip(("partial_block", "block_res", "proj_weight", "norm_weight"),
                                       make_inputs(4, 3, 8, torch.float32)))
    args.update(valid_block_num=-1, norm_eps=1e-6)
    args.update(change)
    return list(args.values())


ERRORS = [
    (dict(partial_block=torch.zeros(4, 8, dtype=torch.int32)), "partial_block must have dtype float16, bfloat16, float32, float64, but got int32"),
    (dict(partial_block=torch.zeros(4, 8, 1)), "partial_block must be 2D [T, H], but got 3D"),
    (dict(block_res=torch.zeros(4, 8)), "block_res must be 3D [T, N, H], but got 2D"),
    (dict(block_res=torch.zeros(5, 3, 8)), "block_res must have shape [T, N, H] = [4, N, 8] like partial_block, but got [5, 3, 8]"),
    (dict(block_res=torch.zeros(4, 3, 9)), "block_res must have shape [T, N, H] = [4, N, 8] like partial_block, but got [4, 3, 9]"),
    (dict(proj_weight=torch.zeros(7)), "proj_weight must have shape [H] or [1, H] with H = 8, but got [7]"),
    (dict(proj_weight=torch.zeros(2, 4)), "proj_weight must have shape [H] or [1, H] with H = 8, but got [2, 4]"),
    (dict(norm_weight=torch.zeros(1, 8)), "norm_weight must have shape [H] with H = 8, but got [1, 8]"),
    (dict(block_res=torch.zeros(4, 3, 8, dtype=torch.float64)), "block_res must have the dtype of partial_block (float32), but got float64"),
    (dict(valid_block_num=2), "valid_block_num must be -1 or N = 3, but got 2"),
    (dict(norm_eps=0.0), "norm_eps must be > 0 and finite, but got 0.0"),
    (dict(norm_eps=-1e-6), "norm_eps must be > 0 and finite, but got -1e-06"),
    (dict(norm_eps=float("inf")), "norm_eps must be > 0 and finite, but got inf"),
]


@pytest.mark.parametrize("change,message", ERRORS, ids=[m[:40] for _, m in ERRORS])
def test_errors_in_eager_and_fake(change: dict[str, object], message: str) -> None:
    raises_same_in_eager_and_fake(FWD, _bad(**change), "^block_attention_residuals: " + re.escape(message))


def test_grad_errors_in_eager_and_fake() -> None:
    x = make_inputs(4, 3, 8, torch.float32)
    _, inv_norm, probs = FWD(*x)
    grad = torch.zeros(4, 8)
    raises_same_in_eager_and_fake(BWD, [*x, torch.zeros(4, 7), inv_norm, probs],
                                  re.escape("grad_hidden_states must have shape [T, H] = [4, 8], but got [4, 7]"))
    raises_same_in_eager_and_fake(BWD, [*x, grad, inv_norm[:, :3], probs],
                                  re.escape("inv_norm must have shape [T, N + 1] = [4, 4], but got [4, 3]"))
    raises_same_in_eager_and_fake(BWD, [*x, grad, inv_norm.half(), probs],
                                  re.escape("inv_norm must be float32, but got float16"))


def test_strict_mode_enforces_device_limits() -> None:
    many_blocks = make_inputs(2, 101, 4, torch.float32)
    FWD(*many_blocks)  # fine on the CPU
    with op_plugin.strict():
        raises_same_in_eager_and_fake(FWD, many_blocks, re.escape("block_res N (number of blocks) must be in [1, 100] on the device, but got 101"))
        raises_same_in_eager_and_fake(FWD, [*make_inputs(2, 3, 4, torch.float32), 3, 1e-6],
                                      re.escape("valid_block_num must be -1 on the device, but got 3"))
    FWD(*many_blocks)  # the context manager restored the CPU limits
    op_plugin.set_strict(True)
    try:
        with pytest.raises(RuntimeError, match="must be in"):
            FWD(*many_blocks)
    finally:
        op_plugin.set_strict(False)


def test_workspace_size_helper() -> None:
    x = make_inputs(64, 4, 128, torch.float32)
    size = op_plugin.workspace_size("block_attention_residuals", *x)
    assert isinstance(size, int) and size >= 0
    with pytest.raises(RuntimeError, match="norm_eps must be > 0"):
        op_plugin.workspace_size("block_attention_residuals", *x, norm_eps=0.0)
