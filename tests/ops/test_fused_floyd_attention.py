"""fused_floyd_attention and its grad (SPEC §3) against explicit float64 index formulas."""
from __future__ import annotations

import re

import pytest
import torch
from op_test_utils import (ALL_DTYPES, assert_within_budget, eager_shapes, fake_shapes, num_threads,
                           raises_same_in_eager_and_fake)
from op_plugin.reference import FLOYD_MASKED, floyd_reference as reference

import op_plugin

OP = torch.ops.op_plugin.fused_floyd_attention.default


def FWD(*args: object) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The registered op with (q, k1, v1, k2, v2, atten_mask, scale_value): the last two are keyword-only."""
    *xs, mask, scale = args
    return OP(*xs, atten_mask=mask, scale_value=scale)

BWD = torch.ops.op_plugin.fused_floyd_attention_grad.default
# B,H,N,M,K,D; 530 keys run in two key blocks (fast::kMaxKeyBlock = 512), so the online softmax rescales.
SHAPES = [(1, 1, 1, 1, 1, 1), (1, 2, 5, 6, 7, 8), (2, 1, 17, 15, 65, 16), (1, 2, 16, 16, 64, 32), (1, 1, 9, 7, 530, 16)]


def make_inputs(B, H, N, M, K, D, dtype, requires_grad=False, seed=0, masked=True, full_row=True):
    g = torch.Generator().manual_seed(seed)
    shapes = [(B, H, N, M, D), (B, H, N, K, D), (B, H, N, K, D), (B, H, K, M, D), (B, H, K, M, D)]
    xs = [torch.randn(s, generator=g, dtype=torch.float64).to(dtype).requires_grad_(requires_grad) for s in shapes]
    mask = None
    if masked:
        mask = torch.rand(B, 1, N, 1, K, generator=g) < 0.3
        mask[:, :, :, :, 0] = False
        if full_row:
            mask[:, :, 0] = True  # a fully masked row: uniform weights (golden behaviour)
    return xs, mask


def _grads(fn, xs, grad):
    leaves = [x.detach().requires_grad_(True) for x in xs]
    out = fn(*leaves)
    out.backward(grad)
    return out.detach(), [x.grad for x in leaves]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_and_backward_match_float64_reference(shape, dtype) -> None:
    xs, mask = make_inputs(*shape, dtype, seed=sum(shape))
    scale = shape[-1] ** -0.5
    grad = torch.randn(xs[0].shape, generator=torch.Generator().manual_seed(5)).to(dtype)
    ours, our_grads = _grads(lambda *x: op_plugin.fused_floyd_attention(*x, atten_mask=mask, scale_value=scale)[2], xs, grad)
    ref64, ref_grads = _grads(lambda *x: reference(*x, mask, scale), [x.double() for x in xs], grad.double())
    same, same_grads = _grads(lambda *x: reference(*x, mask, scale), xs, grad)
    assert_within_budget(ours, same, ref64, "attention_out")
    for name, o, s, r in zip(("dq", "dk1", "dv1", "dk2", "dv2"), our_grads, same_grads, ref_grads):
        assert o.dtype == dtype and o.shape == r.shape
        assert_within_budget(o, s, r, name)


def test_softmax_statistics_repeated_8_times() -> None:
    xs, mask = make_inputs(1, 2, 4, 5, 6, 8, torch.float64)
    mx, sm, _ = FWD(*xs, mask, 0.5)
    s = 0.5 * (torch.einsum("bhnmd,bhnkd->bhnmk", xs[0], xs[1]) + torch.einsum("bhnmd,bhkmd->bhnmk", xs[0], xs[3]))
    s = s.masked_fill(mask.view(1, 1, 4, 1, 6), FLOYD_MASKED * 0.5)  # row n = 0 is fully masked: max -2e9
    ref_max = s.amax(-1)
    ref_sum = (s - ref_max.unsqueeze(-1)).exp().sum(-1)
    assert mx.shape == (1, 2, 4, 5, 8) and mx.dtype == torch.float64
    torch.testing.assert_close(mx, ref_max.unsqueeze(-1).expand(-1, -1, -1, -1, 8))
    torch.testing.assert_close(sm, ref_sum.unsqueeze(-1).expand(-1, -1, -1, -1, 8))


def test_fully_masked_rows_get_uniform_weights() -> None:
    xs, _ = make_inputs(1, 1, 2, 3, 4, 8, torch.float64, masked=False)
    mask = torch.ones(1, 1, 2, 1, 4, dtype=torch.uint8)
    mx, sm, out = op_plugin.fused_floyd_attention(*xs, atten_mask=mask, scale_value=0.5)
    uniform = (xs[2].mean(3, keepdim=True) + xs[4].mean(2).unsqueeze(2))  # mean over k of V1 + V2
    torch.testing.assert_close(out, uniform.expand_as(out))
    assert bool((mx == -2e9).all()) and bool((sm == 4).all()), "the golden's finite statistics: -4e9 * scale, K"


def golden(q, k1, v1, k2, v2, mask, scale, grad, stats=None):
    """op-plugin's test of npu_fused_floyd_attention, as written there (float32 throughout):
    the masked raw score gets -4e9 added, then the softmax of score * scale. Returns
    (softmax_max, softmax_sum, out, (dq, dk1, dv1, dk2, dv2)); ``stats`` replaces the forward's
    statistics in the backward, as a caller feeding another op's statistics does."""
    q, k1, v1, k2, v2, grad = (t.float() for t in (q, k1, v1, k2, v2, grad))
    s = torch.einsum("bhikc,bhijc->bhikj", q, k1) + torch.einsum("bhikc,bhjkc->bhikj", q, k2)
    s = s + mask.bool() * FLOYD_MASKED
    x = s * scale
    x_max = x.amax(-1, keepdim=True)
    x_sum = torch.exp(x - x_max).sum(-1, keepdim=True)
    p = torch.exp(x - x_max) / x_sum
    out = torch.einsum("bhikj,bhijc->bhikc", p, v1) + torch.einsum("bhikj,bhjkc->bhikc", p, v2)
    if stats is not None:
        x_max, x_sum = (t[..., :1] for t in stats)
    p = torch.exp(x - x_max) / x_sum
    dp = torch.einsum("bhikc,bhijc->bhikj", grad, v1) + torch.einsum("bhikc,bhjkc->bhikj", grad, v2)
    ds = p * (dp - (grad * out).sum(-1, keepdim=True)) * scale
    grads = (torch.einsum("bhikj,bhijc->bhikc", ds, k1) + torch.einsum("bhikj,bhjkc->bhikc", ds, k2),
             torch.einsum("bhikj,bhikc->bhijc", ds, q), torch.einsum("bhikj,bhikc->bhijc", p, grad),
             torch.einsum("bhikj,bhikc->bhjkc", ds, q), torch.einsum("bhikj,bhikc->bhjkc", p, grad))
    return x_max.expand(*x_max.shape[:-1], 8), x_sum.expand(*x_sum.shape[:-1], 8), out, grads


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fully_masked_rows_statistics_and_gradients_as_the_golden(dtype) -> None:
    # The case: a 16 x 128 problem with fully masked rows. The golden's softmax_max is
    # finite (-4e9 * scale), and its backward gives such a row uniform P: dv1 = mean over m of dY.
    xs, mask = make_inputs(1, 1, 16, 16, 128, 64, dtype, seed=3)
    mask[:, :, 1:4] = True
    scale = 0.5
    grad = torch.randn(xs[0].shape, generator=torch.Generator().manual_seed(9)).to(dtype)
    g_max, g_sum, g_out, g_grads = golden(*xs, mask, scale, grad)
    mx, sm, out = FWD(*xs, mask, scale)
    rows = mask[0, 0, :, 0].all(-1)  # fully masked n
    assert bool((mx[:, :, rows] == g_max[:, :, rows]).all()) and bool((sm[:, :, rows] == 128).all())
    torch.testing.assert_close(mx, g_max, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(sm, g_sum, rtol=1e-4, atol=1e-4)
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5  # of the largest gradient

    def close(got, want, name):
        err = (got.float() - want).abs().max().item()
        assert err <= tol * max(want.abs().max().item(), 1.0), f"{name}: error {err:.3g}"

    for stats in ((mx, sm), (g_max.contiguous(), g_sum.contiguous())):  # either op's statistics
        ours = BWD(grad, *xs, out, *stats, atten_mask=mask, scale_value=scale)
        _, _, _, want = golden(*xs, mask, scale, grad, stats=stats)
        for name, o, w in zip(("dq", "dk1", "dv1", "dk2", "dv2"), ours, want):
            close(o, w, name)
    dv1 = BWD(grad, *xs, out, g_max.contiguous(), g_sum.contiguous(), atten_mask=mask, scale_value=scale)[2]
    close(dv1[0, 0, 1], (grad[0, 0, 1].float().sum(0) / 128).expand(128, -1), "dv1 of a fully masked row")


def test_gradcheck_float64() -> None:
    # No fully masked row here: its output is constant, while the golden backward (which the
    # kernel follows) still passes gradient through its uniform weights.
    xs, mask = make_inputs(1, 2, 3, 4, 5, 3, torch.float64, requires_grad=True, full_row=False)
    assert torch.autograd.gradcheck(lambda *x: op_plugin.fused_floyd_attention(*x, atten_mask=mask, scale_value=0.7)[2], xs)
    xs, _ = make_inputs(1, 1, 2, 3, 4, 2, torch.float64, requires_grad=True, masked=False)
    assert torch.autograd.gradcheck(lambda *x: op_plugin.fused_floyd_attention(*x)[2], xs)


# opcheck of both ops, masked and not, is generated from the registry's samples: tests/ops/test_generated.py.


def test_fake_shapes_match_eager() -> None:
    xs, mask = make_inputs(2, 3, 4, 5, 6, 8, torch.bfloat16)
    assert fake_shapes(FWD, *xs, mask, 1.0) == eager_shapes(FWD(*xs, mask, 1.0))
    mx, sm, out = FWD(*xs, mask, 1.0)
    args = (out, *xs, out, mx, sm)
    assert fake_shapes(BWD, *args, atten_mask=mask) == eager_shapes(BWD(*args, atten_mask=mask))


def test_keyword_only_mask_in_the_registered_schema_and_the_wrapper() -> None:
    # SPEC Decision 11, settled by the C++ Autograd kernel: the op is registered as documented.
    assert "Tensor value_jk, *, Tensor? atten_mask=None" in str(OP._schema)
    xs, mask = make_inputs(1, 1, 2, 3, 4, 8, torch.float32)
    with pytest.raises(TypeError):
        op_plugin.fused_floyd_attention(*xs, mask)
    with pytest.raises(RuntimeError, match="takes 5 positional argument"):
        OP(*xs, mask)
    torch.testing.assert_close(op_plugin.fused_floyd_attention(*xs, atten_mask=mask)[2], FWD(*xs, mask, 1.0)[2])


def test_torch_compile_fullgraph() -> None:
    xs, mask = make_inputs(1, 2, 4, 5, 6, 8, torch.float32, requires_grad=True)

    def loss(*x):
        return op_plugin.fused_floyd_attention(*x, atten_mask=mask, scale_value=0.3)[2].square().sum()

    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    got = compiled(*xs)
    got.backward()
    got_grads = [x.grad.clone() for x in xs]
    for x in xs:
        x.grad = None
    expected = loss(*xs)
    expected.backward()
    torch.testing.assert_close(got, expected)
    for a, x in zip(got_grads, xs):
        torch.testing.assert_close(a, x.grad)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_bitwise_identical_for_1_and_2_threads(dtype) -> None:
    xs, mask = make_inputs(1, 2, 33, 20, 70, 16, dtype, seed=4)
    grad = torch.randn(xs[0].shape).to(dtype)
    results = []
    for threads in (1, 2):
        with num_threads(threads):
            mx, sm, out = FWD(*xs, mask, 0.25)
            results.append((mx, sm, out, *BWD(grad, *xs, out, mx, sm, atten_mask=mask, scale_value=0.25)))
    for a, b in zip(*results):
        assert torch.equal(a, b)


def _args(**change):
    xs, mask = make_inputs(1, 2, 4, 5, 6, 8, torch.float32)
    args = dict(zip(("query_ik", "key_ij", "value_ij", "key_jk", "value_jk"), xs), atten_mask=mask, scale_value=1.0)
    args.update(change)
    return list(args.values())


ERRORS = [
    (dict(query_ik=torch.zeros(1, 2, 4, 5)), "query_ik must be 5D, but got 4D"),
    (dict(value_jk=torch.zeros(1, 2, 6, 5, 8, 1)), "value_jk must be 5D, but got 6D"),
    (dict(key_ij=torch.zeros(1, 2, 4, 6, 8, dtype=torch.float64)), "must have the dtype of query_ik (float32), but got float64"),
    (dict(key_ij=torch.zeros(1, 2, 3, 6, 8)), "key_ij must have shape [B, H, N, K, D] = [1, 2, 4, K, 8] (query_ik's axes 0, 1, 2, 4), but got [1, 2, 3, 6, 8]"),
    (dict(value_ij=torch.zeros(1, 2, 4, 7, 8)), "value_ij must have the shape of key_ij [1, 2, 4, 6, 8], but got [1, 2, 4, 7, 8]"),
    (dict(key_jk=torch.zeros(1, 2, 6, 4, 8)), "key_jk must have shape [B, H, K, M, D] = [1, 2, 6, 5, 8], but got [1, 2, 6, 4, 8]"),
    (dict(value_jk=torch.zeros(1, 2, 6, 5, 4)), "value_jk must have the shape of key_jk [1, 2, 6, 5, 8], but got [1, 2, 6, 5, 4]"),
    (dict(atten_mask=torch.zeros(1, 1, 4, 1, 5, dtype=torch.bool)), "atten_mask must have shape [B, 1, N, 1, K] = [1, 1, 4, 1, 6], but got [1, 1, 4, 1, 5]"),
    (dict(atten_mask=torch.zeros(1, 1, 4, 1, 6)), "atten_mask must have dtype bool, uint8, but got float32"),
]


@pytest.mark.parametrize("change,message", ERRORS, ids=[m[:40] for _, m in ERRORS])
def test_errors_in_eager_and_fake(change, message) -> None:
    raises_same_in_eager_and_fake(FWD, _args(**change), "^fused_floyd_attention: .*" + re.escape(message))


def test_strict_mode_device_limits() -> None:
    args = _args()
    FWD(*args)
    with op_plugin.strict():
        raises_same_in_eager_and_fake(FWD, args, re.escape("N must be a multiple of 16 (>= 16) on the device, but got 4"))
