"""torch.vmap over the ops: the registry's `vmap:` rules (bindings/<op>_vmap.cpp).

The generated tests (op_plugin.testing.check_vmap) compare every sample's vmapped call with
per-sample calls. Here: which calls fold into one kernel call and which loop, the
random-draw semantics of swa's dropout under vmap (with its backward's replay), nested vmap,
torch.compile of a vmapped call, and vmap against per-sample calls drawn across flash_attn's and
swa's feature space.
"""
from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.profiler import ProfilerActivity, profile

import op_plugin  # noqa: F401  (registers the ops)

OPS = torch.ops.op_plugin
V = 3


def kernel_calls(op: str, fn, *args) -> tuple[object, int]:
    """fn(*args) and how many calls of torch.ops.op_plugin.<op> the vmap rule made (the vmapped call
    itself is one more profiler event)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = fn(*args)
    events = [e.count for e in prof.key_averages() if e.key == f"op_plugin::{op}"]
    return out, (events[0] - 1 if events else 0)


def assert_per_sample(got: torch.Tensor, want: torch.Tensor) -> None:
    """A folded call against per-sample calls: equal up to rounding. A fold changes B, and a kernel's
    plan may depend on it (the backward's key chunks and GQA subgroups when B x N is small, the
    forward's split-K decode past a size), which reorders a sum: the last bits may differ."""
    torch.testing.assert_close(got, want, equal_nan=True)


def loop(fn, *stacked):
    """The per-sample calls vmap stands for, stacked."""
    per_sample = [fn(*[t[i] for t in stacked]) for i in range(stacked[0].shape[0])]
    if isinstance(per_sample[0], torch.Tensor):
        return torch.stack(per_sample)
    return tuple(torch.stack(o) for o in zip(*per_sample))


def _tnd(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(V, 8, 2, 16, generator=gen), torch.tensor([0, 3, 8], dtype=torch.int32)


def test_a_foldable_call_is_one_kernel_call_and_others_one_per_sample() -> None:
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(V, 2, 8, 2, 16, generator=gen)

    def dense(x):
        return OPS.flash_attn(x, x, x, return_softmax_lse=True)

    out, calls = kernel_calls("flash_attn", torch.vmap(dense), q)
    assert calls == 1
    for got, want in zip(out, loop(dense, q)):
        assert_per_sample(got, want)

    qt, cu = _tnd(gen)

    def tnd(x):
        return OPS.flash_attn(x, x, x, cu_seqlens_q=cu, cu_seqlens_kv=cu, layout_q="TND", layout_kv="TND",
                              layout_out="TND", return_softmax_lse=True)

    out, calls = kernel_calls("flash_attn", torch.vmap(tnd), qt)
    assert calls == V
    for got, want in zip(out, loop(tnd, qt)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)

    # Block AttnRes: tokens fold when the weights are shared; a batched weight calls per sample.
    pb, br = torch.randn(V, 5, 8, generator=gen), torch.randn(V, 5, 3, 8, generator=gen)
    w = torch.randn(V, 8, generator=gen)
    _, calls = kernel_calls("block_attention_residuals",
                            torch.vmap(lambda a, b: OPS.block_attention_residuals(a, b, w[0], w[1])[0]), pb, br)
    assert calls == 1
    out, calls = kernel_calls("block_attention_residuals",
                              torch.vmap(lambda a, b, p: OPS.block_attention_residuals(a, b, p, w[1])[0]), pb, br, w)
    assert calls == V
    torch.testing.assert_close(out, loop(lambda a, b, p: OPS.block_attention_residuals(a, b, p, w[1])[0], pb, br, w),
                               rtol=0, atol=0)


def test_a_fold_that_changes_the_kernels_plan_agrees_up_to_rounding() -> None:
    """B1 N2 is below the flash backward's 4 tasks, so each sample's backward splits its keys into
    chunks; the folded B3 does not: dQ is summed in another order."""
    gen = torch.Generator().manual_seed(9)
    q, ct = (torch.randn(V, 1, 512, 2, 64, generator=gen) for _ in range(2))

    def vjp(x, c):
        return torch.func.vjp(lambda y: OPS.flash_attn(y, y, y, softmax_scale=0.125)[0], x)[1](c)[0]

    out, calls = kernel_calls("flash_attn_grad", torch.vmap(vjp), q, ct)
    assert calls == 1
    assert_per_sample(out, loop(vjp, q, ct))


def test_the_readmes_per_sample_gradients() -> None:
    """README's example: vmap of grad makes one flash_attn_grad kernel call for the 16 samples."""
    xs = torch.randn(16, 1, 64, 8, 64)

    def loss(x):
        return op_plugin.flash_attn(x, x, x, softmax_scale=0.125)[0].square().sum()

    per_sample, calls = kernel_calls("flash_attn_grad", torch.vmap(torch.func.grad(loss)), xs)
    assert calls == 1
    assert_per_sample(per_sample, torch.stack([torch.func.grad(loss)(x) for x in xs]))


def test_no_fallback_warning_and_int_returns_work() -> None:
    """torch's BatchedFallback warns per op and refuses int returns (swa_forward's seed, offset and
    numels); each op has its own rule instead."""
    q = torch.randn(V, 1, 6, 2, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = torch.vmap(lambda x: OPS.swa_forward(x, x, x, 2, "BSND")[0])(q)
    assert_per_sample(out, loop(lambda x: OPS.swa_forward(x, x, x, 2, "BSND")[0], q))


def test_nested_vmap_folds_both_levels() -> None:
    gen = torch.Generator().manual_seed(1)
    shapes = [(1, 1, 16, 8, 4), (1, 1, 16, 5, 4), (1, 1, 16, 5, 4), (1, 1, 5, 8, 4), (1, 1, 5, 8, 4)]
    args = [torch.randn(2, V, *s, generator=gen) for s in shapes]

    def floyd(*a):
        return OPS.fused_floyd_attention(*a)[2]

    out, calls = kernel_calls("fused_floyd_attention", torch.vmap(torch.vmap(floyd)), *args)
    # The inner vmap's rule makes one call, still batched at the outer level, whose rule makes the
    # one kernel call: two calls after the vmapped one (per-sample calls at either level: 4 or more).
    assert calls == 2
    want = torch.stack([loop(floyd, *[a[i] for a in args]) for i in range(2)])
    assert_per_sample(out, want)


@pytest.mark.parametrize("layout", ["BSND", "TND"])
def test_autograd_through_a_vmapped_call(layout: str) -> None:
    """Plain autograd over vmap (the inputs require grad outside it): gradcheck through the fold
    (BSND) and through the per-sample calls (TND)."""
    gen = torch.Generator().manual_seed(6)
    cu = torch.tensor([0, 3, 5], dtype=torch.int32)
    shape = (V, 2, 3, 2, 4) if layout == "BSND" else (V, 5, 2, 4)
    q = torch.randn(*shape, generator=gen, dtype=torch.float64, requires_grad=True)
    kw = dict(cu_seqlens_q=cu, cu_seqlens_kv=cu, layout_q="TND", layout_kv="TND", layout_out="TND") if layout == "TND" else {}
    assert torch.autograd.gradcheck(torch.vmap(lambda x: OPS.flash_attn(x, x, x, softmax_scale=0.4, **kw)[0]), (q,))


@pytest.mark.parametrize("dynamic", [False, True])
def test_vmap_compiles_fullgraph(dynamic: bool) -> None:
    """A vmapped call under torch.compile, with a shared argument (the fold repeats it per sample);
    dynamic shapes: one graph for two sequence lengths."""
    def f(x, kv):
        return OPS.flash_attn(x, kv, kv, mask_mode=3, attn_mask=torch.zeros(2048, 2048, dtype=torch.int8))[0]

    vmapped = torch.vmap(f, in_dims=(0, None))
    compiled = torch.compile(vmapped, fullgraph=True, dynamic=dynamic, backend="aot_eager")
    for s in (8, 12) if dynamic else (8,):
        q, kv = torch.randn(V, 2, s, 2, 16), torch.randn(2, s, 2, 16)
        torch.testing.assert_close(compiled(q, kv), vmapped(q, kv), rtol=0, atol=0)


# ---- random draws: swa's dropout ----------------------------------------------------------------

def _swa(x, layout="BSND", keep_prob=0.5):
    return OPS.swa_forward(x, x, x, 2, layout, keep_prob=keep_prob)[0]


def test_dropout_under_vmap_follows_the_randomness_flag() -> None:
    q = torch.randn(V, 2, 6, 2, 8)
    with pytest.raises(RuntimeError, match="vmap: called random operation while in randomness error mode"):
        torch.vmap(_swa)(q)
    with pytest.raises(RuntimeError, match=r"swa_forward: random draws under torch.vmap\(randomness='same'\)"):
        torch.vmap(_swa, randomness="same")(q)
    # "different": one draw over the folded batch, so each sample has its own mask.
    torch.manual_seed(7)
    got = torch.vmap(_swa, randomness="different")(q)
    torch.manual_seed(7)
    folded = _swa(q.flatten(0, 1)).unflatten(0, (V, 2))
    torch.testing.assert_close(got, folded, rtol=0, atol=0)
    assert not torch.equal(got[0], got[1])
    # Dropout with keep_prob 1 draws nothing: every flag works.
    assert_per_sample(torch.vmap(lambda x: _swa(x, keep_prob=1.0))(q), loop(lambda x: _swa(x, keep_prob=1.0), q))


def test_dropout_over_a_closed_over_tensor_follows_the_flag_too() -> None:
    """No tensor of the call is batched (the vmapped function closes over it): torch's random ops
    still meet the flag (vmap's FuncTorchVmapMode key), and so does swa_forward."""
    q = torch.randn(2, 6, 2, 8)
    index = torch.arange(V)
    with pytest.raises(RuntimeError, match="vmap: called random operation while in randomness error mode"):
        torch.vmap(lambda i: _swa(q))(index)
    torch.manual_seed(8)
    same = torch.vmap(lambda i: _swa(q), randomness="same")(index)
    torch.manual_seed(8)
    torch.testing.assert_close(same, _swa(q).expand(V, *q.shape), rtol=0, atol=0)
    torch.manual_seed(8)
    different = torch.vmap(lambda i: _swa(q), randomness="different")(index)
    torch.manual_seed(8)
    torch.testing.assert_close(different, _swa(q.expand(V, *q.shape).flatten(0, 1)).unflatten(0, (V, 2)),
                               rtol=0, atol=0)
    assert not torch.equal(different[0], different[1])


def test_dropout_that_cannot_fold_raises() -> None:
    qt = torch.randn(V, 8, 2, 16)
    with pytest.raises(RuntimeError, match="swa_forward: random draws under torch.vmap need the call to fold"):
        torch.vmap(lambda x: OPS.swa_forward(x, x, x, 2, "TND", keep_prob=0.5, actual_seq_qlen=[3, 8],
                                             actual_seq_kvlen=[3, 8])[0], randomness="different")(qt)


@pytest.mark.parametrize("layout", ["BSND", "SBH"])
def test_per_sample_gradients_with_dropout_replay_the_folded_draws(layout: str) -> None:
    """vmap(grad) with dropout: the forward folds its draws and the backward (attention_in batched)
    folds too, regenerating the same masks: the gradient of the folded call."""
    gen = torch.Generator().manual_seed(3)
    shape = (V, 2, 6, 2, 8) if layout == "BSND" else (V, 6, 2, 16)
    q = torch.randn(*shape, generator=gen, dtype=torch.float64)
    ct = torch.randn(*shape, generator=gen, dtype=torch.float64)

    def vjp(x, c):
        return torch.func.vjp(lambda y: _swa(y, layout), x)[1](c)[0]

    torch.manual_seed(11)
    got = torch.vmap(vjp, randomness="different")(q, ct)
    torch.manual_seed(11)
    axis = 1 if layout == "SBH" else 0  # SBH's batch is axis 1: the vmapped dim goes ahead of it
    fold = (lambda t: t.movedim(0, axis).flatten(axis, axis + 1))
    unfold = (lambda t: t.unflatten(axis, (V, -1)).movedim(axis, 0))
    want = unfold(vjp(fold(q), fold(ct)))
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_jacrev_shape_with_dropout_replays_per_sample() -> None:
    """One forward with dropout, its vjp function vmapped over cotangents (as jacrev does): the
    backward (attention_in not batched) calls per sample with the forward's seed."""
    gen = torch.Generator().manual_seed(4)
    q = torch.randn(2, 6, 2, 8, generator=gen, dtype=torch.float64)
    cts = torch.randn(V, 2, 6, 2, 8, generator=gen, dtype=torch.float64)
    torch.manual_seed(5)
    _, vjp_fn = torch.func.vjp(_swa, q)
    got, calls = kernel_calls("swa_backward", torch.vmap(vjp_fn), cts)
    assert calls == V
    torch.testing.assert_close(got[0], torch.stack([vjp_fn(c)[0] for c in cts]), rtol=0, atol=0)


def test_a_replay_that_cannot_fold_raises() -> None:
    q = torch.randn(V, 1, 6, 2, 8, dtype=torch.float64)
    sink = torch.zeros(2, dtype=torch.float64)

    def vjp(x):
        return torch.func.vjp(lambda y: OPS.swa_forward(y, y, y, 2, "BSND", keep_prob=0.5, sink=sink)[0], x)[1](x)[0]

    with pytest.raises(RuntimeError, match="swa_backward: attention_in is batched, so its forward folded"):
        torch.vmap(vjp, randomness="different")(q)


# ---- vmap against per-sample calls across the feature space -------------------------------------

@settings(max_examples=40, deadline=None)
@given(layout=st.sampled_from(["BSND", "BNSD", "TND"]), mask_mode=st.sampled_from([0, 3, 4]),
       heads=st.sampled_from([(2, 2), (4, 2), (2, 1)]), seqs=st.tuples(st.integers(1, 7), st.integers(1, 7)),
       window=st.tuples(st.integers(0, 4), st.integers(0, 4)), lse=st.booleans(),
       batched=st.sampled_from(["q", "qkv", "kv", "seqused"]), in_dim=st.sampled_from([0, -1]), seed=st.integers(0, 99))
def test_flash_attn_vmap_matches_per_sample_calls(layout, mask_mode, heads, seqs, window, lse, batched, in_dim,
                                                   seed) -> None:
    gen = torch.Generator().manual_seed(seed)
    (n1, n2), (sq, skv), d = heads, seqs, 8
    kw = dict(mask_mode=mask_mode, layout_q=layout, layout_kv=layout, layout_out=layout, return_softmax_lse=lse,
              softmax_scale=0.3)
    if mask_mode:
        kw["attn_mask"] = torch.zeros(2048, 2048, dtype=torch.int8)
    if mask_mode == 4:
        kw.update(win_left=window[0], win_right=window[1])
    if layout == "TND":
        cu_q, cu_kv = torch.tensor([0, sq, sq + 2], dtype=torch.int32), torch.tensor([0, skv, skv + 3], dtype=torch.int32)
        kw.update(cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv)
        shapes = {"q": (sq + 2, n1, d), "k": (skv + 3, n2, d), "v": (skv + 3, n2, d)}
    else:
        def shape(n, s):
            return (2, s, n, d) if layout == "BSND" else (2, n, s, d)
        shapes = {"q": shape(n1, sq), "k": shape(n2, skv), "v": shape(n2, skv)}
    x = {k: torch.randn(V, *s, generator=gen) for k, s in shapes.items()}
    if batched == "seqused" and layout != "TND":
        x["seqused_kv"] = torch.randint(1, skv + 1, (V, 2), generator=gen)
    names = {"q": ["q"], "qkv": ["q", "k", "v"], "kv": ["k", "v"],
             "seqused": ["q", "seqused_kv"] if "seqused_kv" in x else ["q"]}[batched]

    def f(*tensors):
        call = {**{k: v[0] for k, v in x.items()}, **dict(zip(names, tensors))}
        return OPS.flash_attn(call.pop("q"), call.pop("k"), call.pop("v"), **call, **kw)

    stacked = [x[n] if in_dim == 0 else x[n].movedim(0, -1) for n in names]
    got = torch.vmap(f, in_dims=in_dim)(*stacked)
    for g, w in zip(got, loop(f, *[x[n] for n in names])):
        assert_per_sample(g, w)


@settings(max_examples=30, deadline=None)
@given(layout=st.sampled_from(["BSH", "SBH", "BSND", "BNSD"]), sparse_mode=st.sampled_from([0, 4]),
       pse=st.sampled_from([None, "per_batch", "shared"]), mask=st.sampled_from([None, "2d", "4d"]),
       batch=st.sampled_from([1, 2]), seed=st.integers(0, 99))
def test_swa_vmap_matches_per_sample_calls(layout, sparse_mode, pse, mask, batch, seed) -> None:
    gen = torch.Generator().manual_seed(seed)
    n, s, d = 2, 5, 8
    shape = {"BSH": (batch, s, n * d), "SBH": (s, batch, n * d), "BSND": (batch, s, n, d), "BNSD": (batch, n, s, d)}[layout]
    q = torch.randn(V, *shape, generator=gen, dtype=torch.float64)
    kw = dict(scale=0.4, sparse_mode=sparse_mode, pre_tockens=3, next_tockens=1)
    if pse is not None:
        kw["pse"] = torch.randn(batch if pse == "per_batch" else 1, n, s, s, generator=gen, dtype=torch.float64)
    if sparse_mode == 4:
        kw["atten_mask"] = torch.zeros(2048, 2048, dtype=torch.bool)
    elif mask is not None:
        kw["atten_mask"] = torch.rand(*((s, s) if mask == "2d" else (batch, 1, s, s)), generator=gen) < 0.2

    def f(x):
        out = OPS.swa_forward(x, x, x, n, layout, **kw)
        return out[0], out[1], out[2]

    got = torch.vmap(f)(q)
    for g, w in zip(got, loop(f, q)):
        assert_per_sample(g, w)
    # Per-sample gradients through swa_backward's fold (or its per-sample calls).
    ct = torch.randn_like(q)

    def vjp(x, c):
        return torch.func.vjp(lambda y: f(y)[0], x)[1](c)[0]

    assert_per_sample(torch.vmap(vjp)(q, ct), loop(vjp, q, ct))
