"""flash_attn and flash_attn_grad (SPEC §1) against float64 PyTorch references.

The reference works per sequence: it cuts each batch out of the layout (BSND, BNSD or the
cu_seqlens ranges of TND), builds the explicit bottom-right boolean mask of the mode over the
actual lengths (seqused), and computes softmax attention with GQA by repeating the KV heads.
Rows with nothing to attend to are fixed by hand (out 0, lse +inf, no gradient). The float64
reference is an explicit einsum (it also handles sinks); the same-dtype PyTorch computation
the error budget is measured against is torch SDPA with the same mask and enable_gqa (einsum
when sinks are given, which SDPA cannot express).

There is no autograd registration for flash_attn yet (the softmax_lse of return_softmax_lse=False
is an open design question), so flash_attn_grad is compared with torch.autograd of the float64
reference rather than through gradcheck, and opcheck skips test_autograd_registration.
"""
from __future__ import annotations

import re

import pytest
import torch
from op_test_utils import (ALL_DTYPES, assert_within_budget, copies_made, eager_shapes, fake_shapes, num_threads,
                           raises_same_in_eager_and_fake)
from op_plugin.reference import flash_attn_reference as reference

import op_plugin

FWD = torch.ops.op_plugin.flash_attn.default
BWD = torch.ops.op_plugin.flash_attn_grad.default
TEMPLATE = torch.triu(torch.ones(2048, 2048, dtype=torch.int8), 1)  # the device's mask template


def metadata_length(B: int, N2: int) -> int:
    """SPEC Decision 7: roundup(((36 + 72) * B * N2 + 1) * 16, 4096)."""
    n = ((36 + 72) * B * N2 + 1) * 16
    return (n + 4095) // 4096 * 4096


# ---- inputs -------------------------------------------------------------------------------------

def make_inputs(layout: str, B: int, Sq, Skv, N1: int, N2: int, D: int, Dv: int, dtype: torch.dtype,
                seed: int = 0) -> dict[str, torch.Tensor]:
    """q, k, v, dout in ``layout`` (and cu_seqlens for TND, where Sq/Skv are per-batch lists)."""
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape):
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)

    if layout == "TND":
        cu_q = torch.tensor([0, *torch.tensor(Sq).cumsum(0).tolist()], dtype=torch.int32)
        cu_kv = torch.tensor([0, *torch.tensor(Skv).cumsum(0).tolist()], dtype=torch.int32)
        T1, T2 = int(cu_q[-1]), int(cu_kv[-1])
        return dict(q=rnd(T1, N1, D), k=rnd(T2, N2, D), v=rnd(T2, N2, Dv), dout=rnd(T1, N1, Dv),
                    cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv)
    if layout == "BSND":
        return dict(q=rnd(B, Sq, N1, D), k=rnd(B, Skv, N2, D), v=rnd(B, Skv, N2, Dv), dout=rnd(B, Sq, N1, Dv))
    return dict(q=rnd(B, N1, Sq, D), k=rnd(B, N2, Skv, D), v=rnd(B, N2, Skv, Dv), dout=rnd(B, N1, Sq, Dv))


def _grads(fn, xs, dout):
    leaves = [x.detach().requires_grad_(True) for x in xs]
    out, lse = fn(*leaves)
    out.backward(dout)
    return out.detach(), (None if lse is None else lse.detach()), [x.grad for x in leaves]


OPTION_NAMES = ("cu_seqlens_q", "cu_seqlens_kv", "seqused_q", "seqused_kv", "sinks", "attn_mask", "metadata",
                "softmax_scale", "mask_mode", "win_left", "win_right", "max_seqlen_q", "max_seqlen_kv",
                "layout_q", "layout_kv", "layout_out")


def run_forward(x: dict, opts: dict, return_softmax_lse: bool = True):
    kw = {k: v for k, v in opts.items() if k in OPTION_NAMES}
    kw.setdefault("layout_kv", kw.get("layout_q", "BSND"))
    kw.setdefault("layout_out", kw.get("layout_q", "BSND"))
    if kw.get("mask_mode", 0) != 0:
        kw.setdefault("attn_mask", TEMPLATE)
    return op_plugin.flash_attn(x["q"], x["k"], x["v"], cu_seqlens_q=x.get("cu_seqlens_q"),
                                cu_seqlens_kv=x.get("cu_seqlens_kv"), return_softmax_lse=return_softmax_lse, **kw)


def run_grad(x: dict, out: torch.Tensor, lse: torch.Tensor, opts: dict):
    kw = {k: v for k, v in opts.items() if k in OPTION_NAMES and k != "layout_out"}
    kw.setdefault("layout_kv", kw.get("layout_q", "BSND"))
    kw["layout_out"] = kw.get("layout_q", "BSND")
    kw.setdefault("softmax_scale", 1.0)  # the forward's default; the grad's own default 0.0 means 1/sqrt(D)
    if kw.get("mask_mode", 0) != 0:
        kw.setdefault("attn_mask", TEMPLATE)
    return op_plugin.flash_attn_grad(x["q"], x["k"], x["v"], x["dout"], out, lse, cu_seqlens_q=x.get("cu_seqlens_q"),
                                     cu_seqlens_kv=x.get("cu_seqlens_kv"), **kw)


def check_against_reference(x: dict, opts: dict, check_grad: bool = True) -> None:
    """Forward out/lse and (optionally) flash_attn_grad's dq/dk/dv against the float64 reference,
    with the error budget of the same-dtype PyTorch computation (SDPA, einsum with sinks)."""
    dtype = x["q"].dtype
    ref_opts = dict(opts, cu_seqlens_q=x.get("cu_seqlens_q"), cu_seqlens_kv=x.get("cu_seqlens_kv"))
    qkv = [x["q"], x["k"], x["v"]]
    out, lse = run_forward(x, opts)
    dout = x["dout"] if check_grad else torch.ones_like(out)
    ref_out, ref_lse, ref_grads = _grads(lambda *t: reference(*t, **ref_opts), [t.double() for t in qkv], dout.double())
    same_out, _, same_grads = _grads(lambda *t: reference(*t, **ref_opts, use_sdpa=True), qkv, dout)
    # The lse is float32 (float64 for float64 inputs), accumulated in float32 or wider: its budget
    # is that of the einsum reference in float32 on the same (rounded) inputs.
    with torch.no_grad():
        same_lse = reference(*[t if dtype == torch.float64 else t.float() for t in qkv], **ref_opts)[1]
    assert out.dtype == dtype and out.shape == ref_out.shape
    stats = torch.float64 if dtype == torch.float64 else torch.float32
    assert lse.dtype == stats and lse.shape == ref_lse.shape
    assert_within_budget(out, same_out, ref_out, "attn_out")
    inf = torch.isinf(ref_lse)
    assert torch.equal(torch.isinf(lse), inf) and bool((lse[inf] > 0).all()), "lse must be +inf exactly on empty rows"
    assert_within_budget(lse.masked_fill(inf, 0), same_lse.masked_fill(inf, 0), ref_lse.masked_fill(inf, 0), "softmax_lse")
    if not check_grad:
        return
    grads = run_grad(x, out, lse, opts)
    for name, ours, same, ref in zip(("dq", "dk", "dv"), grads, same_grads, ref_grads):
        assert ours.dtype == dtype and ours.shape == ref.shape, name
        assert_within_budget(ours, same, ref, name)


# ---- forward and grad against the float64 reference ------------------------------------------

# (layout, B, Sq, Skv, N1, N2, D, Dv): MHA/GQA/MQA, Dv != D, Sq != Skv both ways, tile edges
# (query blocks of 64 rows, key tiles of 96).
SHAPES = [
    ("BSND", 2, 5, 7, 4, 2, 16, 16),
    ("BSND", 1, 65, 97, 2, 1, 32, 24),
    ("BNSD", 2, 9, 4, 6, 3, 8, 8),
    ("BNSD", 1, 64, 96, 3, 3, 24, 17),
    ("TND", None, [5, 0, 13, 1], [7, 4, 0, 1], 4, 1, 16, 16),
    ("TND", None, [64, 3], [95, 97], 4, 2, 32, 32),
]
MASKS = [
    dict(mask_mode=0),
    dict(mask_mode=3),
    dict(mask_mode=4, win_left=3, win_right=0),
    dict(mask_mode=4, win_left=-1, win_right=2),
    dict(mask_mode=4, win_left=1, win_right=-1),
    dict(mask_mode=4, win_left=0, win_right=0),
]


def _shape_id(s):
    return f"{s[0]}-B{s[1]}-Sq{s[2]}-Skv{s[3]}-N{s[4]}/{s[5]}-D{s[6]}/{s[7]}".replace(" ", "")


def _mask_id(m):
    return "-".join(f"{k}{v}" for k, v in m.items())


@pytest.mark.parametrize("mask", MASKS, ids=_mask_id)
@pytest.mark.parametrize("shape", SHAPES, ids=_shape_id)
def test_layouts_and_masks_float64(shape, mask) -> None:
    layout, B, Sq, Skv, N1, N2, D, Dv = shape
    x = make_inputs(layout, B, Sq, Skv, N1, N2, D, Dv, torch.float64, seed=N1 * 7 + D)
    check_against_reference(x, dict(mask, layout_q=layout, softmax_scale=D ** -0.5))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("mask", [MASKS[0], MASKS[1], MASKS[2]], ids=_mask_id)
@pytest.mark.parametrize("shape", [SHAPES[1], SHAPES[2], SHAPES[5]], ids=_shape_id)
def test_every_dtype_within_budget(shape, mask, dtype) -> None:
    layout, B, Sq, Skv, N1, N2, D, Dv = shape
    x = make_inputs(layout, B, Sq, Skv, N1, N2, D, Dv, dtype, seed=3)
    check_against_reference(x, dict(mask, layout_q=layout, softmax_scale=D ** -0.5))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
@pytest.mark.parametrize("mask", [MASKS[0], MASKS[1], MASKS[3]], ids=_mask_id)
def test_seqused(mask, dtype) -> None:
    # seqused shortens both sides per batch (0, partial, full); masks align to the used lengths.
    x = make_inputs("BSND", 4, 11, 9, 2, 1, 16, 16, dtype, seed=5)
    opts = dict(mask, seqused_q=torch.tensor([11, 4, 0, 7], dtype=torch.int32),
                seqused_kv=torch.tensor([9, 2, 5, 0], dtype=torch.int32), softmax_scale=0.25)
    check_against_reference(x, opts)


@pytest.mark.parametrize("cu_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("mask", [MASKS[0], MASKS[1]], ids=_mask_id)
def test_seqused_with_cu_seqlens_the_shorter_wins(mask, cu_dtype) -> None:
    x = make_inputs("TND", None, [6, 9, 4], [8, 3, 5], 2, 2, 16, 8, torch.float64, seed=6)
    x["cu_seqlens_q"], x["cu_seqlens_kv"] = x["cu_seqlens_q"].to(cu_dtype), x["cu_seqlens_kv"].to(cu_dtype)
    opts = dict(mask, layout_q="TND", seqused_q=torch.tensor([3, 9, 10], dtype=torch.int64),
                seqused_kv=torch.tensor([8, 1, 2], dtype=torch.int32), softmax_scale=0.3)
    check_against_reference(x, opts)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_bnsd_in_bsnd_out(dtype) -> None:
    x = make_inputs("BNSD", 2, 7, 10, 4, 2, 16, 16, dtype, seed=7)
    check_against_reference(x, dict(layout_q="BNSD", layout_out="BSND", mask_mode=3, softmax_scale=0.25),
                            check_grad=False)
    out_bsnd, lse_bsnd = run_forward(x, dict(layout_q="BNSD", layout_out="BSND", softmax_scale=0.25))
    out_bnsd, lse_bnsd = run_forward(x, dict(layout_q="BNSD", softmax_scale=0.25))
    assert out_bsnd.shape == (2, 7, 4, 16) and lse_bsnd.shape == (2, 4, 7)
    assert torch.equal(out_bsnd, out_bnsd.transpose(1, 2)) and torch.equal(lse_bsnd, lse_bnsd)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("mask", [MASKS[0], MASKS[2]], ids=_mask_id)
def test_sinks(mask, dtype) -> None:
    # Sinks (Decision 6): a per-head logit, unscaled, in the denominator and the lse. The grad
    # treats that lse as authoritative, so its dq/dk/dv are the exact gradients of the forward.
    x = make_inputs("BSND", 2, 6, 9, 4, 2, 16, 16, dtype, seed=8)
    sinks = torch.randn(4, generator=torch.Generator().manual_seed(9), dtype=torch.float64).to(torch.float32) * 2
    sinks = sinks.to(torch.float64) if dtype == torch.float64 else sinks
    check_against_reference(x, dict(mask, sinks=sinks, softmax_scale=0.25))


def test_sinks_tnd_with_empty_rows() -> None:
    # Rows with nothing to attend to stay out 0, lse +inf with a sink too (Decision 5).
    x = make_inputs("TND", None, [3, 4, 2], [4, 0, 5], 4, 2, 16, 16, torch.float64, seed=1)
    opts = dict(layout_q="TND", sinks=torch.tensor([0.5, -1.0, 2.0, 0.0], dtype=torch.float64), mask_mode=3,
                seqused_kv=torch.tensor([4, 0, 1], dtype=torch.int32), softmax_scale=0.25)
    out, lse = run_forward(x, opts)
    assert bool(torch.isposinf(lse[:, 3:8]).all()) and torch.equal(out[3:8], torch.zeros_like(out[3:8]))
    check_against_reference(x, opts)


def test_sinks_change_the_result_and_lse() -> None:
    x = make_inputs("BSND", 1, 4, 5, 2, 2, 8, 8, torch.float32, seed=10)
    sinks = torch.tensor([0.5, -1.0])
    plain_out, plain_lse = run_forward(x, {})
    out, lse = run_forward(x, dict(sinks=sinks))
    # lse grows by exactly log(1 + e^(sink - lse)); out shrinks by the same factor.
    expected = torch.logaddexp(plain_lse, sinks.view(1, 2, 1))
    torch.testing.assert_close(lse, expected)
    torch.testing.assert_close(out, plain_out * torch.exp(plain_lse - lse).transpose(1, 2).unsqueeze(-1))


def test_sinks_float64_are_not_rounded_to_float32() -> None:
    # float64 is the gradcheck dtype (Decision 2): a float64 sink must keep its precision.
    x = make_inputs("BSND", 1, 3, 4, 2, 1, 8, 8, torch.float64, seed=11)
    sinks = torch.tensor([0.1, -0.7], dtype=torch.float64)  # not representable in float32
    check_against_reference(x, dict(sinks=sinks), check_grad=False)


def test_softmax_scale_defaults() -> None:
    # flash_attn: default 1.0 used as given. flash_attn_grad: default 0.0 means 1/sqrt(D).
    x = make_inputs("BSND", 2, 5, 6, 2, 1, 16, 16, torch.float64, seed=12)
    out, lse = op_plugin.flash_attn(x["q"], x["k"], x["v"], return_softmax_lse=True)
    ref_out, ref_lse = reference(x["q"], x["k"], x["v"], softmax_scale=1.0)
    torch.testing.assert_close(out, ref_out, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(lse, ref_lse, rtol=1e-10, atol=1e-12)

    scale = 16 ** -0.5
    out, lse = run_forward(x, dict(softmax_scale=scale))
    default = op_plugin.flash_attn_grad(x["q"], x["k"], x["v"], x["dout"], out, lse)
    explicit = op_plugin.flash_attn_grad(x["q"], x["k"], x["v"], x["dout"], out, lse, softmax_scale=scale)
    _, _, ref_grads = _grads(lambda *t: reference(*t, softmax_scale=scale), [x["q"], x["k"], x["v"]], x["dout"])
    for a, b, r in zip(default, explicit, ref_grads):
        assert torch.equal(a, b)
        torch.testing.assert_close(a, r, rtol=1e-10, atol=1e-12)
    # ...and another explicit scale is really used by the grad.
    out2, lse2 = run_forward(x, dict(softmax_scale=0.6))
    grads2 = op_plugin.flash_attn_grad(x["q"], x["k"], x["v"], x["dout"], out2, lse2, softmax_scale=0.6)
    _, _, ref2 = _grads(lambda *t: reference(*t, softmax_scale=0.6), [x["q"], x["k"], x["v"]], x["dout"])
    for a, r in zip(grads2, ref2):
        torch.testing.assert_close(a, r, rtol=1e-10, atol=1e-12)


def _small_case(layout: str, dtype: torch.dtype, seed: int) -> dict:
    if layout == "TND":
        return make_inputs(layout, None, [5, 2], [6, 1], 2, 2, 8, 8, dtype, seed=seed)
    return make_inputs(layout, 2, 5, 6, 2, 2, 8, 8, dtype, seed=seed)


@pytest.mark.parametrize("layout", ["BSND", "BNSD", "TND"])
def test_return_softmax_lse_false_shape_and_out(layout) -> None:
    x = _small_case(layout, torch.bfloat16, 13)
    out, lse = run_forward(x, dict(layout_q=layout, mask_mode=3), return_softmax_lse=False)
    full_out, full_lse = run_forward(x, dict(layout_q=layout, mask_mode=3), return_softmax_lse=True)
    assert lse.shape == (1,) and lse.dtype == torch.float32
    assert torch.equal(out, full_out)
    assert full_lse.shape == ((2, 7) if layout == "TND" else (2, 2, 5))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_return_softmax_lse_false_gives_one_zero(dtype) -> None:
    x = _small_case("BSND", dtype, 13)
    for _ in range(8):
        poison = torch.full((1,), 7.0, dtype=x["q"].dtype)  # freed memory a fresh 1-element tensor may reuse
        del poison
        _, lse = run_forward(x, {}, return_softmax_lse=False)
        assert torch.equal(lse, torch.zeros(1, dtype=lse.dtype)), f"softmax_lse is {lse}, not a zero"


def test_empty_rows_out_zero_lse_inf_grads_zero() -> None:
    # Fully masked rows (a window beyond the keys), Skv = 0 (TND), rows past seqused_q.
    x = make_inputs("TND", None, [4, 3, 5], [2, 0, 6], 2, 1, 8, 8, torch.float64, seed=14)
    opts = dict(layout_q="TND", mask_mode=4, win_left=0, win_right=-1, seqused_q=torch.tensor([4, 3, 2], dtype=torch.int32),
                softmax_scale=0.4)
    out, lse = run_forward(x, opts)
    # batch 0 (rows 0-3): Sq=4, Skv=2, o=-2, keys j >= i - 2: none empty. batch 1 (rows 4-6): no keys
    # at all. batch 2 (rows 7-11): rows 9-11 past seqused_q.
    for rows in (slice(4, 7), slice(9, 12)):
        assert torch.equal(out[rows], torch.zeros_like(out[rows]))
        assert bool(torch.isposinf(lse[:, rows]).all())
    assert bool(torch.isfinite(lse[:, :4]).all()) and bool(torch.isfinite(lse[:, 7:9]).all())
    dq, dk, dv = run_grad(x, out, lse, opts)
    for rows in (slice(4, 7), slice(9, 12)):
        assert torch.equal(dq[rows], torch.zeros_like(dq[rows]))
    check_against_reference(x, opts)


def test_fully_masked_rows_by_window() -> None:
    # Sq > Skv with causal: o < 0, the first Sq - Skv rows attend to nothing.
    x = make_inputs("BSND", 1, 6, 2, 2, 2, 8, 8, torch.float64, seed=15)
    out, lse = run_forward(x, dict(mask_mode=3))
    assert torch.equal(out[:, :4], torch.zeros_like(out[:, :4]))
    assert bool(torch.isposinf(lse[..., :4]).all()) and bool(torch.isfinite(lse[..., 4:]).all())
    check_against_reference(x, dict(mask_mode=3))


def test_attn_mask_contents_ignored() -> None:
    x = make_inputs("BSND", 1, 6, 8, 2, 1, 8, 8, torch.float32, seed=16)
    a = run_forward(x, dict(mask_mode=3, attn_mask=TEMPLATE))
    b = run_forward(x, dict(mask_mode=3, attn_mask=torch.zeros(2048, 2048, dtype=torch.int8)))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    ga = run_grad(x, *a, dict(mask_mode=3, attn_mask=TEMPLATE))
    gb = run_grad(x, *a, dict(mask_mode=3, attn_mask=torch.ones(2048, 2048, dtype=torch.int8)))
    for u, w in zip(ga, gb):
        assert torch.equal(u, w)


@pytest.mark.parametrize("layout", ["BSND", "TND"])
def test_metadata_none_or_correct_length(layout) -> None:
    x = make_inputs("BSND", 3, 5, 6, 4, 2, 8, 8, torch.float32, seed=17) if layout == "BSND" else \
        make_inputs("TND", None, [5, 0, 2], [6, 3, 0], 4, 2, 8, 8, torch.float32, seed=17)
    meta = torch.zeros(metadata_length(3, 2), dtype=torch.int32)
    assert meta.numel() == 12288  # (108 * 3 * 2 + 1) * 16 = 10384, rounded up to a multiple of 4096
    plain = run_forward(x, dict(layout_q=layout))
    given = run_forward(x, dict(layout_q=layout, metadata=meta))
    assert torch.equal(plain[0], given[0]) and torch.equal(plain[1], given[1])
    g_plain = run_grad(x, *plain, dict(layout_q=layout))
    g_given = run_grad(x, *plain, dict(layout_q=layout, metadata=meta))
    for a, b in zip(g_plain, g_given):
        assert torch.equal(a, b)


def test_max_seqlen_accepted() -> None:
    x = make_inputs("TND", None, [5, 2], [3, 7], 2, 1, 8, 8, torch.float64, seed=18)
    a = run_forward(x, dict(layout_q="TND"))
    b = run_forward(x, dict(layout_q="TND", max_seqlen_q=5, max_seqlen_kv=7))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_float32_gradients_on_a_long_causal_sequence() -> None:
    # dK/dV sum over every query row: accumulated as one chain of rounded FMAs their float32 error
    # grew with S (7x SDPA's for dK at S=2048); block sums keep it within budget.
    x = make_inputs("BSND", 1, 2048, 2048, 2, 2, 64, 64, torch.float32, seed=45)
    check_against_reference(x, dict(mask_mode=3, softmax_scale=0.125))


def test_grad_of_mqa_sums_over_the_group() -> None:
    # dK/dV of the single KV head is the sum over all query heads: compare with N2 = N1 copies.
    x = make_inputs("BSND", 1, 5, 6, 4, 1, 8, 8, torch.float64, seed=19)
    out, lse = run_forward(x, dict(softmax_scale=0.5))
    dq, dk, dv = run_grad(x, out, lse, dict(softmax_scale=0.5))
    xr = dict(x, k=x["k"].repeat_interleave(4, 2), v=x["v"].repeat_interleave(4, 2))
    out_r, lse_r = run_forward(xr, dict(softmax_scale=0.5))
    dq_r, dk_r, dv_r = run_grad(xr, out_r, lse_r, dict(softmax_scale=0.5))
    torch.testing.assert_close(dq, dq_r, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(dk, dk_r.sum(2, keepdim=True), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(dv, dv_r.sum(2, keepdim=True), rtol=1e-12, atol=1e-12)


def test_gqa_backward_workspace_holds_no_per_head_partial() -> None:
    # With enough kv heads (B * N2 >= 4) a backward task runs its kv head's whole group and writes
    # dK / dV itself, on every ISA level. It used to write an fp32 dK | dV partial per query head,
    # summed after: those alone took N1 x S x (D + Dv) fp32 (32 MiB here, 256 MiB at S=8192 D=128).
    S, N1, N2, D = 2048, 32, 8, 64
    x = make_inputs("BNSD", 1, S, S, N1, N2, D, D, torch.bfloat16, seed=3)
    opts = dict(layout_q="BNSD", layout_kv="BNSD", layout_out="BNSD", mask_mode=3, attn_mask=TEMPLATE,
                softmax_scale=0.125)
    out, lse = run_forward(x, opts)
    with num_threads(1):
        ws = op_plugin.workspace_size("flash_attn_grad", x["q"], x["k"], x["v"], x["dout"], out, lse, **opts)
    assert ws < N1 * S * 2 * D * 4, ws


# ---- autograd: flash_attn -> flash_attn_grad (and dsinks, Decision 6) ---------------------------

# (layout, B, Sq, Skv, N1, N2, D, Dv, opts): every layout, GQA/MQA, Dv != D, masks, seqused, empty
# sequences and rows, BNSD in / BSND out.
AUTOGRAD_CASES = [
    ("BSND", 2, 6, 9, 4, 2, 8, 8, dict(mask_mode=3, softmax_scale=0.4)),
    ("BNSD", 1, 7, 5, 3, 1, 8, 6, dict(mask_mode=4, win_left=2, win_right=1)),
    ("BNSD", 2, 5, 5, 2, 2, 8, 8, dict(layout_out="BSND", softmax_scale=0.3)),
    ("TND", None, [4, 0, 6], [5, 3, 0], 4, 2, 8, 8, dict(mask_mode=3, seqused_kv=torch.tensor([5, 1, 0]))),
]


def _autograd_inputs(case, dtype, seed):
    layout, B, Sq, Skv, N1, N2, D, Dv, opts = case
    x = make_inputs(layout, B, Sq, Skv, N1, N2, D, Dv, dtype, seed=seed)
    opts = dict(opts, layout_q=layout, layout_kv=layout)
    opts.setdefault("layout_out", layout)
    if opts["layout_out"] != layout:  # BNSD in, BSND out: dout is shaped like out
        x["dout"] = x["dout"].transpose(1, 2).contiguous()
    sinks = torch.linspace(-1.0, 1.5, N1, dtype=torch.float64).to(dtype)
    return x, opts, sinks


def _autograd_call(x, opts, q, k, v, sinks, return_softmax_lse=False):
    return run_forward(dict(x, q=q, k=k, v=v), dict(opts, sinks=sinks), return_softmax_lse=return_softmax_lse)


@pytest.mark.parametrize("with_sinks", [False, True])
@pytest.mark.parametrize("case", AUTOGRAD_CASES, ids=lambda c: f"{c[0]}-{c[8]}")
def test_autograd_matches_the_float64_reference(case, with_sinks) -> None:
    x, opts, sinks = _autograd_inputs(case, torch.float64, seed=40)
    leaves = [t.clone().requires_grad_(True) for t in (x["q"], x["k"], x["v"], sinks)]
    ref_leaves = [t.clone().requires_grad_(True) for t in (x["q"], x["k"], x["v"], sinks)]
    out, lse = _autograd_call(x, opts, *leaves[:3], leaves[3] if with_sinks else None)
    assert lse.shape == (1,) and float(lse) == 0.0  # return_softmax_lse=False, also under autograd
    ref_out, _ = reference(*ref_leaves[:3], **dict(opts, cu_seqlens_q=x.get("cu_seqlens_q"),
                                                   cu_seqlens_kv=x.get("cu_seqlens_kv"),
                                                   sinks=ref_leaves[3] if with_sinks else None))
    out.backward(x["dout"])
    ref_out.backward(x["dout"])
    torch.testing.assert_close(out, ref_out, rtol=1e-10, atol=1e-10)
    for name, ours, ref in zip(("dq", "dk", "dv", "dsinks"), leaves, ref_leaves):
        if name == "dsinks" and not with_sinks:
            assert ours.grad is None
            continue
        torch.testing.assert_close(ours.grad, ref.grad, rtol=1e-10, atol=1e-10, msg=name)


@pytest.mark.parametrize("case", AUTOGRAD_CASES, ids=lambda c: f"{c[0]}-{c[8]}")
def test_gradcheck(case) -> None:
    x, opts, sinks = _autograd_inputs(case, torch.float64, seed=41)
    leaves = [t.clone().requires_grad_(True) for t in (x["q"], x["k"], x["v"], sinks)]
    assert torch.autograd.gradcheck(lambda *t: _autograd_call(x, opts, *t)[0], leaves)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("return_lse", [False, True])
def test_autograd_runs_flash_attn_grad_on_the_full_lse(dtype, return_lse) -> None:
    # Whatever return_softmax_lse says, the backward is flash_attn_grad on the forward's full lse:
    # the gradients equal an explicit flash_attn_grad call bit for bit.
    x, opts, _ = _autograd_inputs(AUTOGRAD_CASES[0], dtype, seed=42)
    leaves = [t.clone().requires_grad_(True) for t in (x["q"], x["k"], x["v"])]
    out, lse = _autograd_call(x, opts, *leaves, None, return_softmax_lse=return_lse)
    out.backward(x["dout"])
    full_out, full_lse = run_forward(x, opts)
    expected = run_grad(x, full_out, full_lse, opts)
    assert torch.equal(out.detach(), full_out)
    assert torch.equal(lse, full_lse) if return_lse else torch.equal(lse, torch.zeros(1))
    for leaf, grad in zip(leaves, expected):
        assert torch.equal(leaf.grad, grad)


def test_autograd_only_sinks_requires_grad() -> None:
    # dsinks alone: q/k/v are plain tensors, the formula still gets grad(attn_out).
    x, opts, sinks = _autograd_inputs(AUTOGRAD_CASES[3], torch.float64, seed=43)
    s = sinks.clone().requires_grad_(True)
    out, _ = _autograd_call(x, opts, x["q"], x["k"], x["v"], s)
    (dsinks,) = torch.autograd.grad(out, s, x["dout"])
    s_ref = sinks.clone().requires_grad_(True)
    ref_out, _ = reference(x["q"], x["k"], x["v"], **dict(opts, cu_seqlens_q=x["cu_seqlens_q"],
                                                          cu_seqlens_kv=x["cu_seqlens_kv"], sinks=s_ref))
    (ref_dsinks,) = torch.autograd.grad(ref_out, s_ref, x["dout"])
    torch.testing.assert_close(dsinks, ref_dsinks, rtol=1e-10, atol=1e-12)


def test_torch_compile_training_step() -> None:
    # The loss through op_plugin.flash_attn compiles with fullgraph=True; AOTAutograd compiles its
    # backward (flash_attn_grad and the dsinks formula), which must give the eager gradients.
    x, opts, sinks = _autograd_inputs(AUTOGRAD_CASES[0], torch.float32, seed=44)

    def loss_fn(q, k, v, s):
        out, _ = _autograd_call(x, opts, q, k, v, s)
        return (out * x["dout"]).sum()

    def grads_of(fn):
        leaves = [t.clone().requires_grad_(True) for t in (x["q"], x["k"], x["v"], sinks)]
        loss = fn(*leaves)
        loss.backward()
        return loss.detach(), [t.grad for t in leaves]

    expected_loss, expected_grads = grads_of(loss_fn)
    for backend in ("aot_eager", "inductor"):
        torch._dynamo.reset()
        got_loss, got_grads = grads_of(torch.compile(loss_fn, fullgraph=True, backend=backend))
        torch.testing.assert_close(got_loss, expected_loss)
        for got, want in zip(got_grads, expected_grads):
            torch.testing.assert_close(got, want)


# ---- opcheck, fake tensors, torch.compile ------------------------------------------------------

OPCHECK_CASES = [
    ("BSND", dict(mask_mode=0)),
    ("BNSD", dict(mask_mode=3)),
    ("TND", dict(mask_mode=4, win_left=2, win_right=1)),
]


@pytest.mark.parametrize("return_lse", [True, False])
@pytest.mark.parametrize("layout,opts", OPCHECK_CASES, ids=[c[0] for c in OPCHECK_CASES])
def test_opcheck(layout, opts, return_lse) -> None:
    x = make_inputs(layout, 2, 5, 6, 4, 2, 8, 8, torch.float32, seed=20) if layout != "TND" else \
        make_inputs(layout, None, [5, 2], [6, 1], 4, 2, 8, 8, torch.float32, seed=20)
    kw = dict(opts, layout_q=layout, layout_kv=layout, layout_out=layout, softmax_scale=0.3,
              cu_seqlens_q=x.get("cu_seqlens_q"), cu_seqlens_kv=x.get("cu_seqlens_kv"))
    if opts["mask_mode"]:
        kw["attn_mask"] = TEMPLATE
    # Inputs that require grad, so test_autograd_registration sees the autograd kernel, and the
    # sinks gradient (a formula) is traced by test_aot_dispatch_dynamic too.
    sinks = torch.tensor([0.5, -1.0, 0.0, 2.0], requires_grad=True)
    qkv = [t.clone().requires_grad_(True) for t in (x["q"], x["k"], x["v"])]
    torch.library.opcheck(FWD, tuple(qkv), dict(kw, sinks=sinks, return_softmax_lse=return_lse))
    out, lse = FWD(x["q"], x["k"], x["v"], **kw, return_softmax_lse=True)
    torch.library.opcheck(BWD, (x["q"], x["k"], x["v"], x["dout"], out, lse), kw)


FAKE_CASES = [
    ("BSND", "BSND", dict()),
    ("BNSD", "BNSD", dict(mask_mode=3)),
    ("BNSD", "BSND", dict(mask_mode=4, win_left=1, win_right=1)),
    ("TND", "TND", dict()),
]


@pytest.mark.parametrize("return_lse", [True, False])
@pytest.mark.parametrize("layout,layout_out,opts", FAKE_CASES, ids=[f"{a}-{b}" for a, b, _ in FAKE_CASES])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_fake_shapes_match_eager(layout, layout_out, opts, return_lse, dtype) -> None:
    x = make_inputs(layout, 2, 5, 3, 6, 2, 16, 8, dtype, seed=21) if layout != "TND" else \
        make_inputs(layout, None, [5, 0, 2], [3, 4, 0], 6, 2, 16, 8, dtype, seed=21)
    kw = dict(opts, layout_q=layout, layout_kv=layout, layout_out=layout_out, cu_seqlens_q=x.get("cu_seqlens_q"),
              cu_seqlens_kv=x.get("cu_seqlens_kv"), return_softmax_lse=return_lse)
    if opts.get("mask_mode"):
        kw["attn_mask"] = TEMPLATE
    args = (x["q"], x["k"], x["v"])
    assert fake_shapes(FWD, *args, **kw) == eager_shapes(FWD(*args, **kw))
    if layout_out != layout or not return_lse:
        return
    out, lse = FWD(*args, **kw)
    del kw["return_softmax_lse"]
    gargs = (*args, x["dout"], out, lse)
    assert fake_shapes(BWD, *gargs, **kw) == eager_shapes(BWD(*gargs, **kw))


def test_torch_compile_fullgraph() -> None:
    x = make_inputs("BSND", 2, 6, 7, 4, 2, 16, 16, torch.float32, seed=22)
    seqused = torch.tensor([6, 3], dtype=torch.int32)

    def fwd_bwd(q, k, v, dout):
        out, lse = torch.ops.op_plugin.flash_attn(q, k, v, seqused_q=seqused, attn_mask=TEMPLATE, softmax_scale=0.25,
                                                  mask_mode=3, return_softmax_lse=True)
        dq, dk, dv = torch.ops.op_plugin.flash_attn_grad(q, k, v, dout, out, lse, seqused_q=seqused, attn_mask=TEMPLATE,
                                                         softmax_scale=0.25, mask_mode=3)
        return out * 2, lse, dq, dk + 1, dv

    args = (x["q"], x["k"], x["v"], x["dout"])
    expected = fwd_bwd(*args)
    for backend in ("aot_eager", "inductor"):
        torch._dynamo.reset()
        got = torch.compile(fwd_bwd, fullgraph=True, backend=backend)(*args)
        for a, b in zip(got, expected):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    # the op_plugin wrappers compile too
    def wrapped(q, k, v, dout):
        out, lse = op_plugin.flash_attn(q, k, v, softmax_scale=0.25, return_softmax_lse=True)
        return op_plugin.flash_attn_grad(q, k, v, dout, out, lse)

    torch._dynamo.reset()
    got = torch.compile(wrapped, fullgraph=True, backend="aot_eager")(*args)
    for a, b in zip(got, wrapped(*args)):
        assert torch.equal(a, b)


# ---- determinism ------------------------------------------------------------------------------

# Few query rows against more than kSmallFwdSplitKeys (2,048) keys: the row kernels' forward splits
# the keys (split-K decode) and merges the splits' max, sum and O. TND with 3, 1 and 2 splits, GQA,
# sinks, a window leaving the first splits of the long sequence without keys.
SPLIT_X = ("TND", None, [1, 3, 2], [4200, 40, 2100], 4, 2, 64, 64)
SPLIT_OPTS = dict(layout_q="TND", mask_mode=4, win_left=1500, win_right=0, softmax_scale=0.125)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_decode_key_splits_within_budget(dtype) -> None:
    x = make_inputs(*SPLIT_X, dtype, seed=31)
    sinks = torch.linspace(-1.0, 2.0, 4, dtype=torch.float64).to(dtype)
    check_against_reference(x, dict(SPLIT_OPTS, sinks=sinks))


def test_decode_key_splits_bitwise_identical_for_1_and_2_threads() -> None:
    x = make_inputs("BSND", 1, 1, 4500, 8, 1, 64, 64, torch.float32, seed=32)
    results = []
    for threads in (1, 2):
        with num_threads(threads):
            results.append(run_forward(x, dict(layout_q="BSND", softmax_scale=0.125)))
    for a, b in zip(*results):
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_qkv_views_are_not_copied_forward_or_backward(dtype) -> None:
    # q, k, v sliced from one packed projection [B, S, 3, N, D] (strided: in the registry for
    # flash_attn and flash_attn_grad): forward and backward read the views in place, with results
    # bitwise those of contiguous copies, and the grad op makes no copy of them.
    qkv = torch.randn(2, 70, 3, 4, 32, generator=torch.Generator().manual_seed(43)).to(dtype)
    views = [t.requires_grad_(True) for t in qkv.detach().clone().unbind(2)]
    copies = [t.detach().contiguous().requires_grad_(True) for t in views]
    dout = torch.randn(2, 70, 4, 32, dtype=torch.float64).to(dtype)
    opts = dict(softmax_scale=0.2, mask_mode=3, attn_mask=TEMPLATE)
    results = []
    for q, k, v in (views, copies):
        out = op_plugin.flash_attn(q, k, v, **opts)[0]
        out.backward(dout)
        results.append((out, q.grad, k.grad, v.grad))
    assert not views[0].is_contiguous()
    for a, b in zip(*results):
        assert torch.equal(a, b)
    out, lse = op_plugin.flash_attn(*views, return_softmax_lse=True, **opts)
    copied = copies_made(lambda: torch.ops.op_plugin.flash_attn_grad(
        *[t.detach() for t in views], dout, out, lse, softmax_scale=0.2, mask_mode=3, attn_mask=TEMPLATE))
    assert not copied, copied


@pytest.mark.parametrize("d", [128, 40])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_decode_row_bitwise_the_same_in_any_pass(dtype, d) -> None:
    # The row kernels widen 16-bit K and V in registers in passes of few (head, row) pairs and, at
    # AVX2, convert them a block at a time in larger bf16 passes (raw_rows); at AVX-512 the forward
    # takes two pairs at a time where it can (kTwoRows), one where it cannot: a row's out, lse and
    # dq are bitwise the same either way. 3 rows of 8 query heads on 2 kv heads (12 pairs a pass)
    # against each row alone (4 pairs); 64 keys keep 3 rows on the row kernels at every ISA level
    # (the fewest is bf16 on the vector pair tiles': kSmallRowsQBf16Pairs); D = 40 has a tail past
    # the vector width.
    x = make_inputs("BSND", 1, 3, 64, 8, 2, d, d, dtype, seed=41)
    opts = dict(layout_q="BSND", softmax_scale=0.1)
    out, lse = run_forward(x, opts)
    dq = run_grad(x, out, lse, opts)[0]
    for i in range(3):
        row = dict(x, q=x["q"][:, i:i + 1].contiguous(), dout=x["dout"][:, i:i + 1].contiguous())
        out_i, lse_i = run_forward(row, opts)
        assert torch.equal(out_i, out[:, i:i + 1])
        assert torch.equal(lse_i, lse[:, :, i:i + 1])
        assert torch.equal(run_grad(row, out_i, lse_i, opts)[0], dq[:, i:i + 1])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("layout", ["BSND", "TND"])
def test_bitwise_identical_for_1_and_2_threads(layout, dtype) -> None:
    # Enough work for several query blocks and key chunks per head; few enough heads (B * N1 < 4)
    # that the backward splits the keys into chunks and sums their dQ partials.
    x = make_inputs("BSND", 1, 130, 200, 2, 1, 32, 32, dtype, seed=23) if layout == "BSND" else \
        make_inputs("TND", None, [130, 1, 70], [200, 90, 0], 1, 1, 32, 32, dtype, seed=23)
    opts = dict(layout_q=layout, mask_mode=4, win_left=100, win_right=-1, softmax_scale=0.2)
    results = []
    for threads in (1, 2, 2):
        with num_threads(threads):
            out, lse = run_forward(x, opts)
            results.append((out, lse, *run_grad(x, out, lse, opts)))
    for one, two in ((results[0], results[1]), (results[1], results[2])):
        for a, b in zip(one, two):
            assert torch.equal(a, b)


# ---- every registry check of SPEC §1.6, in eager and fake mode ---------------------------------

FWD_ARGS = ("q", "k", "v", "block_table", "cu_seqlens_q", "cu_seqlens_kv", "seqused_q", "seqused_kv", "sinks",
            "attn_mask", "metadata", "softmax_scale", "mask_mode", "win_left", "win_right", "max_seqlen_q",
            "max_seqlen_kv", "layout_q", "layout_kv", "layout_out", "return_softmax_lse")
BWD_ARGS = ("q", "k", "v", "dout", "attn_out", "softmax_lse", "cu_seqlens_q", "cu_seqlens_kv", "seqused_q",
            "seqused_kv", "sinks", "attn_mask", "metadata", "softmax_scale", "mask_mode", "win_left", "win_right",
            "max_seqlen_q", "max_seqlen_kv", "layout_q", "layout_kv", "layout_out")
DEFAULTS = dict(block_table=None, cu_seqlens_q=None, cu_seqlens_kv=None, seqused_q=None, seqused_kv=None, sinks=None,
                attn_mask=None, metadata=None, softmax_scale=0.25, mask_mode=0, win_left=-1, win_right=-1,
                max_seqlen_q=-1, max_seqlen_kv=-1, layout_q="BSND", layout_kv="BSND", layout_out="BSND",
                return_softmax_lse=True)


def _fwd_args(**change) -> list[object]:
    """A valid BSND call (B=2, Sq=5, Skv=7, N1=4, N2=2, D=Dv=16, float32) with ``change`` applied."""
    x = make_inputs("BSND", 2, 5, 7, 4, 2, 16, 16, torch.float32, seed=30)
    args = dict(DEFAULTS, q=x["q"], k=x["k"], v=x["v"])
    args.update(change)
    return [args[n] for n in FWD_ARGS]


def _tnd_change(**change) -> dict[str, object]:
    x = make_inputs("TND", None, [3, 2], [4, 1], 4, 2, 16, 16, torch.float32, seed=31)
    base = dict(q=x["q"], k=x["k"], v=x["v"], cu_seqlens_q=x["cu_seqlens_q"], cu_seqlens_kv=x["cu_seqlens_kv"],
                layout_q="TND", layout_kv="TND", layout_out="TND")
    base.update(change)
    return base


def _bwd_args(**change) -> list[object]:
    x = make_inputs("BSND", 2, 5, 7, 4, 2, 16, 16, torch.float32, seed=32)
    with op_plugin.strict(False):
        out, lse = FWD(*_fwd_args(q=x["q"], k=x["k"], v=x["v"]))
    args = dict(DEFAULTS, q=x["q"], k=x["k"], v=x["v"], dout=x["dout"], attn_out=out, softmax_lse=lse)
    del args["block_table"], args["return_softmax_lse"]
    args.update(change)
    return [args[n] for n in BWD_ARGS]


def _z(*shape, dtype=torch.float32):
    return torch.zeros(shape, dtype=dtype)


M = TEMPLATE
COMMON_ERRORS = [  # (change, message) valid for both ops (BSND base: B=2, Sq=5, Skv=7, N1=4, N2=2, D=16)
    (dict(q=_z(2, 5, 4, 16, dtype=torch.int32)), "q must have dtype float16, bfloat16, float32, float64, but got int32"),
    (dict(mask_mode=1, attn_mask=M), "mask_mode only supports 0, 3, 4, but got 1."),
    (dict(mask_mode=2), "mask_mode only supports 0, 3, 4, but got 2."),
    (dict(layout_q="SBH", layout_kv="SBH", layout_out="SBH"), "layout_q only supports BSND, TND, BNSD, but got SBH."),
    (dict(q=_z(2, 5, 64)), "q must be 4D when layout is BSND, but got 3D."),
    (dict(k=_z(7, 2, 16)), "k must be 4D when layout is BSND, but got 3D."),
    (dict(v=_z(1, 2, 7, 2, 16)), "v must be 4D when layout is BSND, but got 5D."),
    (dict(win_left=-2), "win_left must be -1 or >= 0, but got -2."),
    (dict(win_right=-5), "win_right must be -1 or >= 0, but got -5."),
    (dict(max_seqlen_q=-2), "max_seqlen_q must be -1 or >= 0, but got -2."),
    (dict(max_seqlen_kv=-3), "max_seqlen_kv must be -1 or >= 0, but got -3."),
    (dict(attn_mask=M), "attn_mask must not be provided when mask_mode is 0."),
    (dict(win_left=3), "win_left must be -1 when mask_mode is 0, but got 3."),
    (dict(win_right=0), "win_right must be -1 when mask_mode is 0, but got 0."),
    (dict(mask_mode=3, attn_mask=M, win_left=2), "win_left must be -1 when mask_mode is 3, but got 2."),
    (dict(mask_mode=3, attn_mask=M, win_right=0), "win_right must be -1 when mask_mode is 3, but got 0."),
    (dict(mask_mode=3), "attn_mask must be provided when mask_mode is 3."),
    (dict(mask_mode=4, win_left=2, win_right=0), "attn_mask must be provided when mask_mode is 4."),
    (dict(mask_mode=3, attn_mask=_z(1, 2048, 2048, dtype=torch.int8)), "attn_mask must be 2D, but got 3D."),
    (dict(mask_mode=4, attn_mask=_z(2048, 1024, dtype=torch.int8)), "attn_mask shape must be [2048, 2048], but got [2048, 1024]."),
    (dict(mask_mode=3, attn_mask=_z(1024, 2048, dtype=torch.int8)), "attn_mask shape must be [2048, 2048], but got [1024, 2048]."),
    (dict(cu_seqlens_q=torch.tensor([0, 5], dtype=torch.int32), cu_seqlens_kv=torch.tensor([0, 7], dtype=torch.int32)),
     "cu_seqlens_q must not be provided when layout is not TND."),
    (dict(cu_seqlens_kv=torch.tensor([0, 7], dtype=torch.int32)),
     "cu_seqlens_kv must not be provided when layout is not TND."),
    (dict(k=_z(3, 7, 2, 16), v=_z(3, 7, 2, 16)), "B dim of k must be the same as q (2), but got 3."),
    (dict(v=_z(3, 7, 2, 16)), "B dim of v must be the same as q (2), but got 3."),
    (dict(k=_z(2, 7, 2, 8)), "D dim of k must be the same as q (16), but got 8."),
    (dict(v=_z(2, 7, 2, 32)), "D dim of v must not exceed D dim of q. Got Dv = 32, D = 16."),
    (dict(k=_z(2, 7, 3, 16), v=_z(2, 7, 3, 16)), "N dim of q must be divisible by N dim of k. Got N1 = 4, N2 = 3."),
    (dict(v=_z(2, 6, 2, 16)), "v must match k except in D, but got [2, 6, 2, 16] and [2, 7, 2, 16]."),
    (dict(v=_z(2, 7, 1, 16)), "v must match k except in D, but got [2, 7, 1, 16] and [2, 7, 2, 16]."),
    (dict(seqused_q=torch.tensor([5, 5, 5], dtype=torch.int32)), "seqused_q must be 1D of length B = 2, but got [3]."),
    (dict(seqused_kv=torch.tensor([[7, 7]], dtype=torch.int32)), "seqused_kv must be 1D of length B = 2, but got [1, 2]."),
    (dict(seqused_q=torch.tensor([5.0, 5.0])), "seqused_q must have dtype int32, int64, but got float32"),
    (dict(metadata=_z(4096, dtype=torch.int32)),
     f"metadata must be 1D of length {metadata_length(2, 2)} (from flash_attn_metadata), but got [4096]."),
    (dict(metadata=_z(metadata_length(2, 2), dtype=torch.int64)), "metadata must have dtype int32, but got int64"),
    (dict(metadata=_z(2, metadata_length(2, 2) // 2, dtype=torch.int32)),
     f"metadata must be 1D of length {metadata_length(2, 2)} (from flash_attn_metadata), but got [2, {metadata_length(2, 2) // 2}]."),
]
TND_ERRORS = [
    (dict(cu_seqlens_kv=None), "cu_seqlens_kv must be provided when layout is TND."),
    (dict(cu_seqlens_q=None), "cu_seqlens_q must be provided when layout is TND."),
    (dict(cu_seqlens_q=torch.tensor([0, 3, 5], dtype=torch.int32), cu_seqlens_kv=torch.tensor([0, 4, 5, 5], dtype=torch.int32)),
     "cu_seqlens_kv must have the length of cu_seqlens_q (B + 1 = 3), but got 4."),
    (dict(cu_seqlens_q=torch.tensor([0], dtype=torch.int32), cu_seqlens_kv=torch.tensor([0], dtype=torch.int32)),
     "cu_seqlens_q must have B + 1 >= 2 elements, but got 1."),
    (dict(cu_seqlens_q=torch.tensor([[0, 3, 5]], dtype=torch.int32)), "cu_seqlens_q must be 1D, but got 2D."),
    (dict(cu_seqlens_kv=torch.tensor([[0, 4, 5]], dtype=torch.int32)), "cu_seqlens_kv must be 1D, but got 2D."),
    (dict(cu_seqlens_q=torch.tensor([0.0, 3.0, 5.0])), "cu_seqlens_q must have dtype int32, int64, but got float32"),
    (dict(q=_z(2, 5, 4, 16)), "q must be 3D when layout is TND, but got 4D."),
    (dict(layout_kv="BSND"), "layout_q(TND), layout_kv(BSND), layout_out(TND) must be the same"),
    (dict(seqused_kv=torch.tensor([1, 1, 1], dtype=torch.int32)), "seqused_kv must be 1D of length B = 2, but got [3]."),
    (dict(metadata=_z(4096, dtype=torch.int32)),
     f"metadata must be 1D of length {metadata_length(2, 2)} (from flash_attn_metadata), but got [4096]."),
]
FWD_ERRORS = COMMON_ERRORS + [
    (dict(k=_z(2, 7, 2, 16, dtype=torch.float64)), "dtype of k must be the same as q (float32), but got float64."),
    (dict(v=_z(2, 7, 2, 16, dtype=torch.bfloat16)), "dtype of v must be the same as q (float32), but got bfloat16."),
    (dict(layout_kv="BNSD"), "layout_q(BSND), layout_kv(BNSD), layout_out(BSND) must be the same. (BNSD in may give BSND out; a paged KV cache has "
     "layout_kv PA_BBND or PA_BNBD.)"),
    (dict(layout_out="BNSD"), "layout_q(BSND), layout_kv(BSND), layout_out(BNSD) must be the same. (BNSD in may give BSND out; a paged KV cache has "
     "layout_kv PA_BBND or PA_BNBD.)"),
    (dict(layout_out="TND"), "layout_q(BSND), layout_kv(BSND), layout_out(TND) must be the same. (BNSD in may give BSND out; a paged KV cache has "
     "layout_kv PA_BBND or PA_BNBD.)"),
    (dict(block_table=_z(2, 4, dtype=torch.int32)),
     "block_table must not be provided when layout_kv is BSND (a paged KV cache has layout_kv PA_BBND or PA_BNBD)."),
    (dict(sinks=_z(3)), "sinks must be 1D of length N1 = 4, but got [3]."),
    (dict(sinks=_z(4, dtype=torch.int32)), "sinks must have dtype float16, bfloat16, float32, float64, but got int32"),
    (dict(sinks=_z(1, 4)), "sinks must be 1D of length N1 = 4, but got [1, 4]."),
]
BWD_ERRORS = COMMON_ERRORS + [
    (dict(dout=_z(2, 5, 4, 16, dtype=torch.float64)), "dtype of dout must be the same as q (float32), but got float64."),
    (dict(attn_out=_z(2, 5, 4, 16, dtype=torch.float64)), "dtype of attn_out must be the same as q (float32), but got float64."),
    (dict(k=_z(2, 7, 2, 16, dtype=torch.float16)), "dtype of k must be the same as q (float32), but got float16."),
    (dict(v=_z(2, 7, 2, 16, dtype=torch.float16)), "dtype of v must be the same as q (float32), but got float16."),
    (dict(softmax_lse=_z(2, 4, 5, dtype=torch.float64)), "softmax_lse must be float32, but got float64"),
    (dict(softmax_lse=_z(2, 4, 5, dtype=torch.bfloat16)), "softmax_lse must be float32, but got bfloat16"),
    (dict(layout_kv="BNSD"), "layout_q(BSND), layout_kv(BNSD), layout_out(BSND) must be the same. (BNSD in may give BSND out.)"),
    (dict(layout_out="BNSD"), "layout_q(BSND), layout_kv(BSND), layout_out(BNSD) must be the same. (BNSD in may give BSND out.)"),
    (dict(dout=_z(2, 5, 64)), "dout must be 4D when layout is BSND, but got 3D."),
    (dict(attn_out=_z(2, 5, 4, 16, 1)), "attn_out must be 4D when layout is BSND, but got 5D."),
    (dict(dout=_z(2, 5, 4, 8)), "dout must have the shape of attn_out [2, 5, 4, 16], but got [2, 5, 4, 8]."),
    (dict(dout=_z(2, 5, 4, 8), attn_out=_z(2, 5, 4, 8)), "attn_out must have q's shape in layout_out with D = Dv (16), but got [2, 5, 4, 8]."),
    (dict(dout=_z(2, 6, 4, 16), attn_out=_z(2, 6, 4, 16)),
     "attn_out must have q's shape in layout_out with D = Dv (16), but got [2, 6, 4, 16]."),
    (dict(softmax_lse=_z(1)), "softmax_lse must be 3D (B, N, S) when layout is BSND: (2, 4, 5), but got [1]."),
    (dict(softmax_lse=_z(2, 5, 4)), "softmax_lse must be 3D (B, N, S) when layout is BSND: (2, 4, 5), but got [2, 5, 4]."),
]


def _ids(cases):
    return [f"{i}-{m[:36]}" for i, (_, m) in enumerate(cases)]


@pytest.mark.parametrize("change,message", FWD_ERRORS, ids=_ids(FWD_ERRORS))
def test_forward_errors_in_eager_and_fake(change, message) -> None:
    raises_same_in_eager_and_fake(FWD, _fwd_args(**change), "^flash_attn: " + re.escape(message))


@pytest.mark.parametrize("change,message", BWD_ERRORS, ids=_ids(BWD_ERRORS))
def test_grad_errors_in_eager_and_fake(change, message) -> None:
    raises_same_in_eager_and_fake(BWD, _bwd_args(**change), "^flash_attn_grad: " + re.escape(message))


@pytest.mark.parametrize("change,message", TND_ERRORS, ids=_ids(TND_ERRORS))
def test_tnd_errors_in_eager_and_fake(change, message) -> None:
    raises_same_in_eager_and_fake(FWD, _fwd_args(**_tnd_change(**change)), "^flash_attn: " + re.escape(message))
    x = _tnd_change()
    out, lse = FWD(*_fwd_args(**x))
    grad_args = _bwd_args(**dict(_tnd_change(**change), dout=torch.zeros_like(out), attn_out=out, softmax_lse=lse))
    raises_same_in_eager_and_fake(BWD, grad_args, "^flash_attn_grad: " + re.escape(message))


def test_grad_tnd_softmax_lse_must_be_n_by_t() -> None:
    x = _tnd_change()
    out, lse = FWD(*_fwd_args(**x))
    assert lse.shape == (4, 5)
    for bad in (lse.t().contiguous(), lse.unsqueeze(0)):
        raises_same_in_eager_and_fake(BWD, _bwd_args(**x, dout=out, attn_out=out, softmax_lse=bad), re.escape(
            f"softmax_lse must be 2D (N, T) when layout is TND: (4, 5), but got {list(bad.shape)}."))


@pytest.mark.parametrize("op", ["flash_attn", "flash_attn_grad"])
def test_empty_tensors_rejected_in_eager_and_fake(op) -> None:
    x = make_inputs("BSND", 2, 0, 7, 4, 2, 16, 16, torch.float32)
    if op == "flash_attn":
        args = _fwd_args(q=x["q"])
        raises_same_in_eager_and_fake(FWD, args, "must not be empty")
    else:
        args = _bwd_args(q=x["q"], dout=x["dout"], attn_out=x["dout"], softmax_lse=_z(2, 4, 0))
        raises_same_in_eager_and_fake(BWD, args, "must not be empty")


# ---- contents (eager only: fake mode cannot see data) -------------------------------------------

CONTENT_ERRORS = [
    (dict(cu_seqlens_q=torch.tensor([1, 3, 5], dtype=torch.int32)), "cu_seqlens_q must start at 0"),
    (dict(cu_seqlens_kv=torch.tensor([0, 4, 3], dtype=torch.int32)), "cu_seqlens_kv must be non-decreasing"),
    (dict(cu_seqlens_q=torch.tensor([0, 3, 1], dtype=torch.int64)), "cu_seqlens_q must be non-decreasing"),
    (dict(cu_seqlens_q=torch.tensor([0, 3, 4], dtype=torch.int32)), "cu_seqlens_q must end at the token count 5"),
    (dict(cu_seqlens_kv=torch.tensor([0, 4, 6], dtype=torch.int32)), "cu_seqlens_kv must end at the token count 5"),
    (dict(seqused_q=torch.tensor([-1, 2], dtype=torch.int32)), re.escape("seqused_q[0] = -1 must be within [0, 5]")),
    (dict(seqused_kv=torch.tensor([1, 6], dtype=torch.int32)), re.escape("seqused_kv[1] = 6 must be within [0, 5]")),
]


@pytest.mark.parametrize("change,message", CONTENT_ERRORS, ids=[m[:30] for _, m in CONTENT_ERRORS])
def test_content_errors_in_eager(change, message) -> None:
    x = _tnd_change()
    out, lse = FWD(*_fwd_args(**x))
    with pytest.raises(RuntimeError, match="^flash_attn: " + message):
        FWD(*_fwd_args(**_tnd_change(**change)))
    with pytest.raises(RuntimeError, match="^flash_attn_grad: " + message):
        BWD(*_bwd_args(**dict(_tnd_change(**change), dout=out, attn_out=out, softmax_lse=lse)))
    # fake mode cannot see the contents: it accepts the call and gives the shapes of a valid one.
    assert fake_shapes(FWD, *_fwd_args(**_tnd_change(**change))) == eager_shapes((out, lse))


def test_content_errors_bsnd_seqused() -> None:
    with pytest.raises(RuntimeError, match=re.escape("seqused_kv[0] = 8 must be within [0, 7]")):
        FWD(*_fwd_args(seqused_kv=torch.tensor([8, 7], dtype=torch.int32)))
    with pytest.raises(RuntimeError, match=re.escape("seqused_q[1] = 6 must be within [0, 5]")):
        BWD(*_bwd_args(seqused_q=torch.tensor([5, 6], dtype=torch.int64)))


# ---- strict device-compatibility mode (Decision 3) ----------------------------------------------

def test_strict_mode_device_limits() -> None:
    window_unbounded = dict(mask_mode=4, attn_mask=M, win_left=-1, win_right=3)
    sinks = dict(sinks=torch.zeros(4))
    for change in ({}, window_unbounded, sinks):  # fine on the CPU
        FWD(*_fwd_args(**change))
    BWD(*_bwd_args())
    BWD(*_bwd_args(**window_unbounded))
    with op_plugin.strict():
        raises_same_in_eager_and_fake(FWD, _fwd_args(), re.escape(
            "D must be 64, 128 or 256 on the device, but got 16."))
        x = make_inputs("BSND", 1, 3, 4, 4, 2, 64, 32, torch.float32)
        raises_same_in_eager_and_fake(FWD, _fwd_args(q=x["q"], k=x["k"], v=x["v"]), re.escape(
            "Dv must equal D on the device (the forward), but got Dv = 32, D = 64."))
        x = make_inputs("BSND", 2, 5, 7, 4, 2, 64, 64, torch.float32)
        ok = dict(q=x["q"], k=x["k"], v=x["v"])
        FWD(*_fwd_args(**ok))
        FWD(*_fwd_args(**ok, mask_mode=4, attn_mask=M, win_left=0, win_right=3))
        raises_same_in_eager_and_fake(FWD, _fwd_args(**ok, **sinks), "^flash_attn: sinks is currently not supported")
        raises_same_in_eager_and_fake(FWD, _fwd_args(**ok, **window_unbounded), re.escape(
            "win_left must be >= 0 when mask_mode is 4, but got -1."))
        raises_same_in_eager_and_fake(FWD, _fwd_args(**ok, mask_mode=4, attn_mask=M, win_left=2, win_right=-1), re.escape(
            "win_right must be >= 0 when mask_mode is 4, but got -1."))
        # B < 65536: TND with 65536 sequences (all but one empty) is cheap to build.
        cu = torch.zeros(65537, dtype=torch.int32)
        cu[-1] = 1
        big = _tnd_change(q=_z(1, 4, 64), k=_z(1, 2, 64), v=_z(1, 2, 64), cu_seqlens_q=cu, cu_seqlens_kv=cu)
        raises_same_in_eager_and_fake(FWD, _fwd_args(**big), re.escape("B must be < 65536 on the device, but got 65536."))
        cu_ok = cu[1:]
        FWD(*_fwd_args(**dict(big, cu_seqlens_q=cu_ok, cu_seqlens_kv=cu_ok)))

        # grad: 0 < Dv <= D <= 192
        raises_same_in_eager_and_fake(BWD, _bwd_args(**ok, dout=_z(2, 5, 4, 64), attn_out=_z(2, 5, 4, 64),
                                                     mask_mode=4, attn_mask=M, win_left=-1, win_right=0),
                                      re.escape("win_left must be >= 0 when mask_mode is 4, but got -1."))
        x = make_inputs("BSND", 1, 3, 4, 2, 1, 256, 256, torch.float32)
        raises_same_in_eager_and_fake(BWD, _bwd_args(q=x["q"], k=x["k"], v=x["v"], dout=x["dout"], attn_out=x["dout"],
                                                     softmax_lse=_z(1, 2, 3)), re.escape(
            "D must be <= 192 on the device, but got 256."))
        x = make_inputs("BSND", 1, 3, 4, 2, 1, 96, 40, torch.float32)
        BWD(q=x["q"], k=x["k"], v=x["v"], dout=x["dout"], attn_out=x["dout"], softmax_lse=_z(1, 2, 3))  # fine
        big_grad = dict(big, cu_seqlens_q=cu, cu_seqlens_kv=cu, dout=_z(1, 4, 64), attn_out=_z(1, 4, 64),
                        softmax_lse=_z(4, 1))
        raises_same_in_eager_and_fake(BWD, _bwd_args(**big_grad), re.escape("B must be < 65536 on the device, but got 65536."))
        # the grad takes BNSD in / BSND out on the CPU only (so autograd pairs every forward call)
        x = make_inputs("BNSD", 1, 3, 4, 2, 1, 64, 64, torch.float32)
        bnsd = dict(q=x["q"], k=x["k"], v=x["v"], dout=_z(1, 3, 2, 64), attn_out=_z(1, 3, 2, 64),
                    softmax_lse=_z(1, 2, 3), layout_q="BNSD", layout_kv="BNSD", layout_out="BSND")
        raises_same_in_eager_and_fake(BWD, _bwd_args(**bnsd), re.escape(
            "layout_out must equal layout_q on the device, but got layout_q(BNSD), layout_out(BSND)."))
    BWD(*_bwd_args(**bnsd))
    FWD(*_fwd_args(**window_unbounded))  # the context manager restored the CPU limits
    op_plugin.set_strict(True)
    try:
        with pytest.raises(RuntimeError, match="sinks is currently not supported"):
            FWD(*_fwd_args(**ok, **sinks))
    finally:
        op_plugin.set_strict(False)
    FWD(*_fwd_args(**ok, **sinks))
