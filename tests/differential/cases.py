"""Differential testing of valid calls (issue 15): hypothesis draws valid calls across each op
family's feature space, and each call's forward, its backward op called directly, and autograd
are compared with the float64 references of op_plugin.reference within the error budget
(at most 2x the error of the same computation in plain PyTorch in the input dtype, plus 4 ulps;
float64 to 1e-10).

FAMILIES maps a family to (strategy of cases, check of one case); a case is a plain dict, so a
failure prints what to rerun. Lengths are drawn around the kernels' tiles: multiples of 16 and
32 (the vector and bf16 pair widths, the AMX tiles), the flash engine's kBlockQ = 64 query rows
and kBlockKV = 96 keys (csrc/kernels/flash_attention/flash_attention_params.h), Floyd's 16 x 16
tiles and its key blocks (up to fast::kMaxKeyBlock = 512 keys in one block, more in several), each
-1, +0 or +1, and small lengths.

Long calls (``long=True``; run_long.py --long, and a few in the short run) draw lengths around the
blocks of the AMX dataflows as well (LONG_TILES: the backward's key blocks of 128 and 256 keys,
the float parts' forward tasks of 256 query rows, the forward's key blocks of 512 keys, windows a
task sees through in one block up to 1024 keys), production head dims and windows up to 1100
keys, so that online softmax rescales, lazy maxima, several key blocks and chunks of heads or
rows meet the features above.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from hypothesis import strategies as st
from op_test_utils import assert_within_budget, eager_shapes, fake_shapes
from op_plugin.reference import (UNBOUNDED, flash_attn_reference, floyd_reference, from_bnsd, swa_keep_mask,
                        swa_reference)

import op_plugin
from op_plugin import MaskMode
from op_plugin import reference as composite

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
TEMPLATE_I8 = torch.triu(torch.ones(2048, 2048, dtype=torch.int8), 1)
TEMPLATE_BOOL = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)
Case = dict[str, Any]


# ---- drawing -----------------------------------------------------------------------------------

TILES = (16, 32, 48, 64, 96, 128)
LONG_TILES = (1024, 512, 256, 128)  # largest first: hypothesis starts from the first


def lengths(low: int = 1, tiles: tuple[int, ...] = TILES, long: bool = False) -> st.SearchStrategy[int]:
    """A sequence length: around a tile edge (t - 1, t, t + 1) or small; ``long``: around one of
    LONG_TILES half of the time."""
    edge = st.builds(lambda t, d: t + d, st.sampled_from(tiles), st.sampled_from((-1, 0, 1)))
    drawn = st.one_of(edge, st.integers(low, 20))
    if long:
        far = st.builds(lambda t, d: t + d, st.sampled_from(LONG_TILES), st.sampled_from((-1, 0, 1)))
        drawn = st.one_of(far, drawn)
    return drawn.filter(lambda n: n >= low)


def head_dims(long: bool, short: list[int]) -> st.SearchStrategy[int]:
    """Small head dims at and between the pair / tile widths; ``long``: production ones, and one
    that pads to the next 32."""
    return st.sampled_from([64, 128, 80] if long else short)


def _generator(case: Case) -> torch.Generator:
    return torch.Generator().manual_seed(case["seed"])


def _randn(g: torch.Generator, shape, dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def _grads(fn: Callable[..., torch.Tensor], leaves: list, grad: torch.Tensor) -> tuple[torch.Tensor, list]:
    """fn's output and the gradients of ``leaves`` (None stays None) for the incoming ``grad``."""
    leaves = [None if t is None else t.detach().clone().requires_grad_(True) for t in leaves]
    out = fn(*leaves)
    out.backward(grad.to(out.dtype))
    return out.detach(), [None if t is None else t.grad for t in leaves]


def _same_in_fake(op, args: list, kwargs: dict, eager_out) -> None:
    """The fake function gives the eager call's output shapes, dtypes and ints (``op`` is a
    torch.ops overload, so a wrapper's conversions are not in between)."""
    assert fake_shapes(op, *args, **kwargs) == eager_shapes(eager_out), op


def _budget(names, ours, same, ref, dot: int, computed_in: torch.dtype, terms: float = 0.0,
            summed: int = 0) -> None:
    """Each gradient of a call within budget (assert_within_budget), its 4-ulp floor at the scale
    of the call's largest gradient or of ``terms``, the largest term a gradient is the difference
    of. A gradient that is exactly 0 by cancellation (a single key: P = 1, so dS = P (dP - D) = 0)
    is exact in the PyTorch computation, where dP and D are the same dot product, and off by
    rounding in ours, where they are summed in different orders: its floor is at the scale of
    those ``dot``-term dot products (sqrt(dot) times the largest gradient). A float32 gradient of
    low-precision inputs (dsink) has the ulps of the inputs' dtype; ``summed`` adds sqrt(summed)
    float32 ulps for gradients that are long sums of cancelling terms."""
    floor = max([1.0, terms] + [r.abs().max().item() for r in ref if r is not None and r.numel()])
    for name, o, s, r in zip(names, ours, same, ref):
        if r is None:
            assert o is None or o.numel() == 0, name
            continue
        assert o.shape == r.shape, f"{name}: shape {tuple(o.shape)} != {tuple(r.shape)}"
        cancelled = r.numel() > 0 and not r.any() and not s.any()
        assert_within_budget(o, s, r, name, scale_floor=floor * (dot ** 0.5 if cancelled else 1.0),
                             computed_in=computed_in, summed=summed)


# ---- flash_attn / flash_attn_grad / flash_attn_metadata ------------------------------------------

FLASH_LAYOUTS = ("BSND", "BNSD", "TND")
SWA_LAYOUTS = ("BSH", "SBH", "BSND", "BNSD", "TND")


def _mode(mask_mode) -> int:
    """A drawn mask_mode spelling (int, MaskMode or name) as the int the registered op takes."""
    return int(MaskMode[mask_mode.upper()]) if isinstance(mask_mode, str) else int(mask_mode)


def _value_dims(draw, d: int) -> int:
    """Dv <= D: half of D first (the examples hypothesis starts from have Dv < D), D, or 8."""
    return draw(st.sampled_from(list(dict.fromkeys([max(d // 2, 1), d, 8]))))


@st.composite
def flash_attn_cases(draw, layouts: tuple[str, ...] = FLASH_LAYOUTS,
                     dtypes: tuple[torch.dtype, ...] = DTYPES, long: bool = False) -> Case:
    layout = draw(st.sampled_from(layouts))
    n2 = draw(st.sampled_from([1, 2]))
    d = draw(head_dims(long, [8, 16, 24, 32, 40]))
    case: Case = dict(layout=layout, dtype=draw(st.sampled_from(dtypes)), n2=n2,
                      n1=n2 * draw(st.sampled_from([1, 2, 3])), d=d, dv=_value_dims(draw, d),
                      seed=draw(st.integers(0, 2**31 - 1)),
                      scale=draw(st.floats(0.05, 0.6)))
    if layout == "TND":  # empty sequences too, but some tokens on each side
        nb = draw(st.integers(1, 4))
        case["sq"] = draw(st.lists(st.one_of(st.just(0), lengths(long=long)), min_size=nb, max_size=nb).filter(sum))
        case["skv"] = draw(st.lists(st.one_of(st.just(0), lengths(long=long)), min_size=nb, max_size=nb).filter(sum))
    else:
        nb = draw(st.integers(1, 2))
        case["sq"], case["skv"] = [draw(lengths(long=long))] * nb, [draw(lengths(long=long))] * nb
        case["layout_out"] = draw(st.sampled_from(["BSND", "BNSD"])) if layout == "BNSD" else layout
    mode = draw(st.sampled_from([0, 3, 4]))
    case["mask_mode"] = draw(st.sampled_from([mode, MaskMode(mode), MaskMode(mode).name.lower()]))  # enum spellings
    window = st.one_of(st.just(-1), st.integers(0, 1100 if long else 70))
    case["win_left"], case["win_right"] = (draw(window), draw(window)) if mode == 4 else (-1, -1)
    for side, seqs in (("seqused_q", case["sq"]), ("seqused_kv", case["skv"])):
        if draw(st.booleans()):
            case[side] = [draw(st.integers(0, s)) for s in seqs]
    if draw(st.booleans()):
        case["sinks"] = draw(st.sampled_from([torch.float32, case["dtype"]]))
    case["metadata"] = draw(st.booleans())
    case["max_seqlen"] = draw(st.booleans())  # pass the true maxima instead of -1
    case["strided"] = draw(st.booleans())  # q, k, v as views with padded rows (flash_attn reads them in place)
    return case


def _padded_view(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a view into a tensor with 3 more elements in each row: every stride but the last
    differs from a contiguous tensor's."""
    whole = torch.full((*t.shape[:-1], t.shape[-1] + 3), float("nan"), dtype=t.dtype)
    whole[..., :t.shape[-1]] = t
    return whole[..., :t.shape[-1]]


def _flash_inputs(case: Case) -> tuple[dict, torch.Tensor]:
    g, dt, layout = _generator(case), case["dtype"], case["layout"]
    n1, n2, d, dv, sq, skv = case["n1"], case["n2"], case["d"], case["dv"], case["sq"], case["skv"]
    if layout == "TND":
        x = dict(q=_randn(g, (sum(sq), n1, d), dt), k=_randn(g, (sum(skv), n2, d), dt),
                 v=_randn(g, (sum(skv), n2, dv), dt),
                 cu_seqlens_q=torch.tensor([0, *torch.tensor(sq).cumsum(0).tolist()], dtype=torch.int32),
                 cu_seqlens_kv=torch.tensor([0, *torch.tensor(skv).cumsum(0).tolist()], dtype=torch.int64))
        dout = _randn(g, (sum(sq), n1, dv), dt)
    else:
        b = len(sq)
        shape = (lambda s, n, e: (b, s, n, e)) if layout == "BSND" else (lambda s, n, e: (b, n, s, e))
        x = dict(q=_randn(g, shape(sq[0], n1, d), dt), k=_randn(g, shape(skv[0], n2, d), dt),
                 v=_randn(g, shape(skv[0], n2, dv), dt))
        out_shape = (b, sq[0], n1, dv) if case["layout_out"] == "BSND" else (b, n1, sq[0], dv)
        dout = _randn(g, out_shape, dt)
    opts = dict(softmax_scale=case["scale"], mask_mode=case["mask_mode"], win_left=case["win_left"],
                win_right=case["win_right"], layout_q=layout, layout_kv=layout,
                layout_out=case.get("layout_out", layout))
    if _mode(case["mask_mode"]) != 0:
        opts["attn_mask"] = TEMPLATE_I8
    for side in ("seqused_q", "seqused_kv"):
        if side in case:
            opts[side] = torch.tensor(case[side], dtype=torch.int32)
    if "sinks" in case:
        opts["sinks"] = _randn(g, (n1,), case["sinks"])
    if case["metadata"]:
        opts["metadata"] = op_plugin.flash_attn_metadata(
            n1, n2, d, batch_size=len(sq), mask_mode=case["mask_mode"], is_grad_enabled=True,
            layout_q=layout, layout_kv=layout, layout_out=opts["layout_out"])
    if case["max_seqlen"]:
        opts.update(max_seqlen_q=max(sq), max_seqlen_kv=max(skv))
    if case.get("strided"):
        x.update({name: _padded_view(x[name]) for name in ("q", "k", "v")})
    return dict(x, **opts), dout


def check_flash_attn(case: Case) -> None:
    """flash_attn (forward, lse), flash_attn_grad and autograd (dq, dk, dv, dsinks) against the reference."""
    call, dout = _flash_inputs(case)
    dtype, ref_mode = case["dtype"], _mode(call["mask_mode"])
    ref_opts = {k: v for k, v in call.items() if k not in ("q", "k", "v", "sinks", "mask_mode")}
    ref_opts["mask_mode"] = ref_mode
    sinks = call.get("sinks")
    rest = {k: v for k, v in call.items() if k not in ("q", "k", "v", "sinks")}

    def ours(q, k, v, s):
        return op_plugin.flash_attn(q, k, v, sinks=s, **rest)[0]

    def ref(q, k, v, s, **extra):
        return flash_attn_reference(q, k, v, sinks=s, **ref_opts, **extra)[0]

    out, lse = op_plugin.flash_attn(**call, return_softmax_lse=True)
    out_without_lse, one = op_plugin.flash_attn(**call)
    assert torch.equal(out, out_without_lse) and one.shape == (1,) and not one.any()
    leaves = [call["q"], call["k"], call["v"], sinks]
    ref_out, ref_grads = _grads(ref, [None if t is None else t.double() for t in leaves], dout.double())
    same_out, same_grads = _grads(lambda *t: ref(*t, use_sdpa=True), leaves, dout)
    assert out.dtype == dtype
    assert_within_budget(out, same_out, ref_out, "attn_out")
    with torch.no_grad():  # lse: float32 (float64) statistics, budget of the float32 einsum
        lo = torch.float64 if dtype == torch.float64 else torch.float32
        ref_lse, same_lse = (flash_attn_reference(*[t.to(dt) for t in leaves[:3]], **ref_opts,
                                                  sinks=None if sinks is None else sinks.to(dt))[1]
                             for dt in (torch.float64, lo))
    inf = torch.isinf(ref_lse)
    assert torch.equal(torch.isinf(lse), inf) and bool((lse[inf] > 0).all()), "lse must be +inf exactly on empty rows"
    assert_within_budget(lse.masked_fill(inf, 0), same_lse.masked_fill(inf, 0), ref_lse.masked_fill(inf, 0),
                         "softmax_lse")
    grads = op_plugin.flash_attn_grad(call["q"], call["k"], call["v"], dout, out, lse, sinks=sinks, **rest)
    # dq_i = scale sum_j dS_ij k_j with sum_j dS_ij = 0: a sum of cancelling terms, one per key.
    # And every dS_ij = P_ij (dP_ij - D_i) with D_i = rowsum(dO_i * O_i), a Dv-term dot product of
    # the rounded output that PyTorch's softmax backward never forms (it sums P dP), as for Floyd:
    # its rounding reaches dq, dk and dv (without these terms, a float32 call with one query over
    # two keys, D=64 Dv=32, came out at 1.001 of the budget, and 80 other seeds of it at most 0.86).
    summed = max(case["skv"]) + case["dv"]
    _budget(("dq", "dk", "dv"), grads, same_grads[:3], ref_grads[:3], case["d"], dtype, summed=summed)
    registered = dict(call, mask_mode=ref_mode)  # the registered ops take the int
    _same_in_fake(torch.ops.op_plugin.flash_attn.default, [], dict(registered, return_softmax_lse=True), (out, lse))
    grad_kwargs = {k: v for k, v in registered.items() if k not in ("q", "k", "v")}
    _same_in_fake(torch.ops.op_plugin.flash_attn_grad.default, [call["q"], call["k"], call["v"], dout, out, lse],
                  grad_kwargs, grads)
    _, auto = _grads(ours, leaves, dout)
    _budget(("autograd dq", "autograd dk", "autograd dv", "autograd dsinks"), auto, same_grads, ref_grads,
            case["d"], dtype, summed=summed)


# ---- flash_attn with a paged KV cache ------------------------------------------------------------

PAGED_LAYOUTS = ("PA_BBND", "PA_BNBD")


@st.composite
def flash_attn_paged_cases(draw, layouts: tuple[str, ...] = FLASH_LAYOUTS,
                           dtypes: tuple[torch.dtype, ...] = DTYPES, long: bool = False) -> Case:
    """A flash_attn call (flash_attn_cases) whose keys and values sit in a paged cache: a block
    size that need not divide the lengths, blocks in random order, sometimes a first block that
    two sequences share (a cached prefix), a cache whose blocks are not adjacent in memory."""
    case = draw(flash_attn_cases(layouts=layouts, dtypes=dtypes, long=long))
    case["layout_kv"] = draw(st.sampled_from(PAGED_LAYOUTS))
    case["share_prefix"] = draw(st.booleans())
    case["block_size"] = draw(st.sampled_from([1, 5] if case["share_prefix"] else [1, 5, 16, 32, 64]))
    if case["share_prefix"]:  # two sequences of at least a block each
        if len(case["sq"]) == 1:
            for key in ("sq", "skv", "seqused_q", "seqused_kv"):
                if key in case:
                    case[key] = case[key] * 2
        bs = case["block_size"]
        if case["layout"] == "TND":
            case["skv"][:2] = [max(n, bs) for n in case["skv"][:2]]
        else:
            case["skv"] = [max(case["skv"][0], bs)] * len(case["skv"])
    case.setdefault("seqused_kv", list(case["skv"]))  # a paged call gives every sequence's length
    case["strided_cache"] = draw(st.booleans())
    return case


def _paged_inputs(case: Case) -> tuple[dict, dict]:
    """(the paged call, the same call with dense k and v)."""
    dense, _ = _flash_inputs(case)
    layout, bs = case["layout"], case["block_size"]
    seqs_k = composite.fa_segments(dense["k"], layout, dense.get("cu_seqlens_kv"))
    seqs_v = composite.fa_segments(dense["v"], layout, dense.get("cu_seqlens_kv"))
    shared = case["share_prefix"] and len(seqs_k) > 1 and min(len(seqs_k[0]), len(seqs_k[1])) >= bs
    if shared:  # a shared block holds the same keys in both sequences
        seqs_k[1][:bs] = seqs_k[0][:bs]
        seqs_v[1][:bs] = seqs_v[0][:bs]
    k, v, table = composite.paged_cache(seqs_k, seqs_v, bs, case["layout_kv"], _generator(case),
                                        shared_first_block=shared, spare_blocks=2, strided=case["strided_cache"])
    paged = {key: val for key, val in dense.items() if key != "cu_seqlens_kv"}
    paged.update(k=k, v=v, block_table=table, layout_kv=case["layout_kv"])
    return paged, dense


def check_flash_attn_paged(case: Case) -> None:
    """A paged flash_attn call: the dense call's bits, within budget of the float64 reference read
    through the block table, the same shapes in fake mode, and a backward that refuses."""
    paged, dense = _paged_inputs(case)
    out, lse = op_plugin.flash_attn(**paged, return_softmax_lse=True)
    dense_out, dense_lse = op_plugin.flash_attn(**dense, return_softmax_lse=True)
    assert torch.equal(out, dense_out) and torch.equal(lse, dense_lse), "a paged call must compute the dense call"
    ref_opts = {key: val for key, val in paged.items() if key not in ("q", "k", "v", "sinks", "mask_mode")}
    ref_opts["mask_mode"] = _mode(paged["mask_mode"])
    sinks = paged.get("sinks")
    ref_out, ref_lse = flash_attn_reference(paged["q"].double(), paged["k"].double(), paged["v"].double(),
                                            sinks=None if sinks is None else sinks.double(), **ref_opts)
    same_out = flash_attn_reference(paged["q"], paged["k"], paged["v"], sinks=sinks, use_sdpa=True, **ref_opts)[0]
    assert_within_budget(out, same_out, ref_out, "attn_out")
    inf = torch.isinf(ref_lse)
    assert torch.equal(torch.isinf(lse), inf), "lse must be +inf exactly on empty rows"
    registered = dict(paged, mask_mode=ref_opts["mask_mode"], return_softmax_lse=True)
    _same_in_fake(torch.ops.op_plugin.flash_attn.default, [], registered, (out, lse))
    if case["seed"] % 4 == 0:  # the derivative is not implemented, and says so when it is asked for
        q = paged["q"].detach().requires_grad_(True)
        attn = op_plugin.flash_attn(**dict(paged, q=q))[0]
        try:
            attn.sum().backward()
        except RuntimeError as e:
            assert "derivative of flash_attn with a paged KV cache" in str(e), e
        else:
            raise AssertionError("the backward of a paged call must refuse")


# ---- swa_forward / swa_backward -----------------------------------------------------------------

@st.composite
def swa_cases(draw, layouts: tuple[str, ...] = SWA_LAYOUTS, dtypes: tuple[torch.dtype, ...] = DTYPES,
              long: bool = False) -> Case:
    layout = draw(st.sampled_from(layouts))
    nkv = draw(st.sampled_from([1, 2]))
    d = draw(head_dims(long, [8, 16, 24, 32]))
    case: Case = dict(layout=layout, dtype=draw(st.sampled_from(dtypes)), nkv=nkv,
                      n=nkv * draw(st.sampled_from([1, 2, 3])), d=d, dv=_value_dims(draw, d),
                      seed=draw(st.integers(0, 2**31 - 1)),
                      scale=draw(st.floats(0.05, 0.6)))
    if layout == "TND":
        nb = draw(st.integers(1, 4))
        pairs = draw(st.lists(st.tuples(st.one_of(st.just(0), lengths(long=long)),
                                        st.one_of(st.just(0), lengths(long=long))),
                              min_size=nb, max_size=nb).filter(lambda p: sum(a for a, _ in p) and sum(b for _, b in p)))
        case["sq"], case["skv"] = [a for a, _ in pairs], [b for _, b in pairs]
        case["trailing_zeros"] = draw(st.integers(0, 2))  # [.., T, 0, 0]: batches dropped
        case["softmax_layout"] = draw(st.sampled_from(["", "TND"]))
    else:
        nb = draw(st.integers(1, 2))
        case["sq"], case["skv"] = [draw(lengths(long=long))] * nb, [draw(lengths(long=long))] * nb
    kind = draw(st.sampled_from([None, "full", "template"]))
    case["mask"] = kind
    case["sparse_mode"] = {None: draw(st.sampled_from([0, 4])), "full": 0, "template": 4}[kind]
    tokens = st.one_of(st.just(UNBOUNDED), st.integers(-20, 1100 if long else 80))
    pre, nxt = draw(tokens), draw(tokens)
    if pre + nxt < 0:  # a band that masks every key is refused; swap the signs
        pre, nxt = -pre, -nxt
    case["pre_tockens"], case["next_tockens"] = pre, nxt
    if kind == "full":
        case["mask_shape"] = "SS" if layout == "TND" else draw(st.sampled_from(["SS", "11SS", "B1SS", "BNSS"]))
        case["mask_dtype"] = draw(st.sampled_from(["bool", "uint8"]))
    if draw(st.booleans()):
        case["pse"] = (draw(st.sampled_from([1, "B"])), draw(st.sampled_from([1, "N"])),
                       1 if layout == "TND" else draw(st.sampled_from([1, "S"])))
    if draw(st.booleans()):
        case["sink"] = draw(st.sampled_from([torch.float32, case["dtype"]]))
    case["keep_prob"] = draw(st.sampled_from([1.0, 1.0, 0.9, 0.6]))
    case["strided"] = draw(st.booleans())  # query, key, value as views with padded rows, read in place
    return case


def _swa_inputs(case: Case) -> tuple[dict, torch.Tensor, list[int], list[int]]:
    g, dt, layout = _generator(case), case["dtype"], case["layout"]
    n, nkv, d, dv, sq, skv = case["n"], case["nkv"], case["d"], case["dv"], case["sq"], case["skv"]
    b = len(sq)
    if layout == "TND":
        x = dict(query=_randn(g, (sum(sq), n, d), dt), key=_randn(g, (sum(skv), nkv, d), dt),
                 value=_randn(g, (sum(skv), nkv, dv), dt))
        dy = _randn(g, (sum(sq), n, dv), dt)
        zeros = [0] * case["trailing_zeros"]
        x.update(actual_seq_qlen=torch.tensor(sq).cumsum(0).tolist() + zeros,
                 actual_seq_kvlen=torch.tensor(skv).cumsum(0).tolist() + zeros, softmax_layout=case["softmax_layout"])
    else:
        x = {name: from_bnsd(_randn(g, (b, heads, s, e), dt), layout) for name, heads, s, e in
             (("query", n, sq[0], d), ("key", nkv, skv[0], d), ("value", nkv, skv[0], dv))}
        dy = from_bnsd(_randn(g, (b, n, sq[0], dv), dt), layout)
    if case.get("strided"):
        x.update({name: _padded_view(x[name]) for name in ("query", "key", "value")})
    kind = case["mask"]
    if kind == "template":
        x["atten_mask"] = TEMPLATE_BOOL
    elif kind == "full":
        sizes = {"SS": (max(sq), max(skv)), "11SS": (1, 1, sq[0], skv[0]), "B1SS": (b, 1, sq[0], skv[0]),
                 "BNSS": (b, n, sq[0], skv[0])}[case["mask_shape"]]
        mask = torch.rand(sizes, generator=g) < 0.25
        x["atten_mask"] = mask if case["mask_dtype"] == "bool" else mask.to(torch.uint8)
    if "pse" in case:
        pb, pn, ps = case["pse"]
        shape = (b if pb == "B" else 1, n if pn == "N" else 1, max(sq) if layout == "TND" or ps == "S" else 1, max(skv))
        x["pse"] = _randn(g, shape, dt, 0.5)
    if "sink" in case:
        x["sink"] = _randn(g, (n,), case["sink"])
    x.update(scale=case["scale"], keep_prob=case["keep_prob"], pre_tockens=case["pre_tockens"],
             next_tockens=case["next_tockens"], sparse_mode=case["sparse_mode"])
    return x, dy, sq, skv


def check_swa(case: Case) -> None:
    """swa_forward (out, softmax_max/sum), swa_backward and autograd (dq, dk, dv, dpse, dsink)."""
    x, dy, sq, skv = _swa_inputs(case)
    n, layout, dtype = case["n"], case["layout"], case["dtype"]
    tensors = ("query", "key", "value", "pse", "sink")
    opts = {k: v for k, v in x.items() if k not in tensors}
    torch.manual_seed(case["seed"])
    out, smax, ssum, sout, seed, offset, numels = op_plugin.swa_forward(*[x.get(t) for t in tensors[:3]], n, layout,
                                                                       pse=x.get("pse"), sink=x.get("sink"), **opts)
    assert numels == n * sum(a * b for a, b in zip(sq, skv)) and sout.shape == (0,)
    keep = None
    if case["keep_prob"] < 1:
        keep = swa_keep_mask(seed, offset, case["keep_prob"], n, sq, skv)
    else:
        assert (seed, offset) == (0, 0)
    ref_opts = {k: v for k, v in opts.items() if k not in ("keep_prob", "softmax_layout")}
    if layout == "TND":  # the batches the trailing zeros drop are not there for the reference
        ref_opts.update(actual_seq_qlen=torch.tensor(sq).cumsum(0).tolist(),
                        actual_seq_kvlen=torch.tensor(skv).cumsum(0).tolist())

    def ref(q, k, v, p, s):
        return swa_reference(q, k, v, n, layout, pse=p, sink=s, keep_mask=keep, keep_prob=case["keep_prob"],
                             **ref_opts)[0]

    leaves = [x.get(t) for t in tensors]
    ref_out, ref_grads = _grads(ref, [None if t is None else t.double() for t in leaves], dy.double())
    same_out, same_grads = _grads(ref, leaves, dy)
    assert out.dtype == dtype
    assert_within_budget(out, same_out, ref_out, "attention_out")
    with torch.no_grad():
        _, ref_max, ref_sum = swa_reference(*[None if t is None else t.double() for t in leaves[:3]], n, layout,
                                            pse=None if leaves[3] is None else leaves[3].double(),
                                            sink=None if leaves[4] is None else leaves[4].double(), **ref_opts)
    stats = torch.float64 if dtype == torch.float64 else torch.float32
    assert smax.dtype == stats and torch.equal(smax, smax[..., :1].expand_as(smax)) and smax.shape[-1] == 8
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == torch.float64 else dict(rtol=3e-2, atol=3e-2)
    torch.testing.assert_close(smax[..., 0].double(), ref_max, **tol)
    torch.testing.assert_close(ssum[..., 0].double(), ref_sum, **tol)
    grads = op_plugin.swa_backward(*leaves[:3], dy, n, layout, pse=leaves[3], sink=leaves[4], softmax_max=smax,
                                   softmax_sum=ssum, attention_in=out, seed=seed, offset=offset, numels=numels,
                                   scale_value=opts["scale"], **{k: v for k, v in opts.items() if k != "scale"})
    summed = max(case["skv"]) + case["dv"]  # dq's cancelling terms and D's, as for flash_attn
    _budget(("dq", "dk", "dv", "dpse", "dsink"), grads, same_grads, ref_grads, case["d"], dtype, summed=summed)
    fwd_args = [*leaves[:3], n, layout]
    fwd_kwargs = dict(opts, pse=leaves[3], sink=leaves[4])
    if case["keep_prob"] == 1:  # with dropout the fake's seed and offset are unbacked SymInts
        _same_in_fake(torch.ops.op_plugin.swa_forward.default, fwd_args, fwd_kwargs,
                      (out, smax, ssum, sout, seed, offset, numels))
    bwd_kwargs = dict(pse=leaves[3], sink=leaves[4], softmax_max=smax, softmax_sum=ssum, attention_in=out, seed=seed,
                      offset=offset, numels=numels, scale_value=opts["scale"],
                      **{k: v for k, v in opts.items() if k != "scale"})
    _same_in_fake(torch.ops.op_plugin.swa_backward.default, [*leaves[:3], dy, n, layout], bwd_kwargs, grads)

    def ours(q, k, v, p, s):
        torch.manual_seed(case["seed"])  # the same dropout draw as above
        return op_plugin.swa_forward(q, k, v, n, layout, pse=p, sink=s, **opts)[0]

    _, auto = _grads(ours, leaves, dy)
    _budget(("autograd dq", "autograd dk", "autograd dv", "autograd dpse", "autograd dsink"), auto, same_grads,
            ref_grads, case["d"], dtype, summed=summed)


# ---- fused_floyd_attention / fused_floyd_attention_grad ------------------------------------------

@st.composite
def floyd_cases(draw, dtypes: tuple[torch.dtype, ...] = DTYPES, long: bool = False) -> Case:
    # long: n and m over several 16 x 16 blocks (the blocks of n are claimed by threads in turn),
    # k over several key blocks
    small = (16, 32, 64) if long else (16, 32)
    b, h = draw(st.sampled_from([(1, 1), (1, 2), (2, 1)]))
    return dict(b=b, h=h, n=draw(lengths(tiles=small)), m=draw(lengths(tiles=small)),
                k=draw(lengths(tiles=(16, 32, 64) if long else (16, 32, 64, 512), long=long)),
                d=draw(head_dims(long, [4, 8, 16, 17, 32])),
                dtype=draw(st.sampled_from(dtypes)), mask=draw(st.sampled_from(["full rows", "random", None])),
                mask_dtype=draw(st.sampled_from([torch.bool, torch.uint8])), scale=draw(st.floats(0.05, 0.5)),
                seed=draw(st.integers(0, 2**31 - 1)))


def check_floyd(case: Case) -> None:
    """fused_floyd_attention (out, softmax_max/sum), its grad op and autograd (dq, dk1, dv1, dk2, dv2)."""
    g, dt = _generator(case), case["dtype"]
    b, h, n, m, k, d = (case[c] for c in "bhnmkd")
    shapes = ((b, h, n, m, d), (b, h, n, k, d), (b, h, n, k, d), (b, h, k, m, d), (b, h, k, m, d))  # q, k1, v1, k2, v2
    xs = [_randn(g, s, dt) for s in shapes]
    grad = _randn(g, (b, h, n, m, d), dt)
    mask = None
    if case["mask"] is not None:
        mask = torch.rand(b, 1, n, 1, k, generator=g) < 0.3
        if case["mask"] == "full rows":
            mask[:, :, ::3] = True  # fully masked rows: uniform weights, finite statistics (the golden's)
        mask = mask.to(case["mask_dtype"])
    scale = case["scale"]
    mx, sm, out = op_plugin.fused_floyd_attention(*xs, atten_mask=mask, scale_value=scale)
    ref_out, ref_grads = _grads(lambda *t: floyd_reference(*t, mask, scale), [x.double() for x in xs], grad.double())
    same_out, same_grads = _grads(lambda *t: floyd_reference(*t, mask, scale), xs, grad)
    # The output sums 2k terms P (v1 + v2) in another order than PyTorch's einsum GEMMs (float32
    # at k = 511, d = 64: a median of 0.46 of the budget without these terms, a tail past 1.0 at
    # every level, the scalar baseline's too)
    assert_within_budget(out, same_out, ref_out, "attention_out", summed=2 * k)
    with torch.no_grad():
        s = scale * (torch.einsum("bhnmd,bhnkd->bhnmk", xs[0].double(), xs[1].double()) +
                     torch.einsum("bhnmd,bhkmd->bhnmk", xs[0].double(), xs[3].double()))
        if mask is not None:
            s = s.masked_fill(mask.bool().view(b, 1, n, 1, k), -4e9 * scale)
        ref_max = s.amax(-1)
        ref_sum = torch.exp(s - ref_max.unsqueeze(-1)).sum(-1)
    tol = dict(rtol=1e-10, atol=1e-10) if dt == torch.float64 else dict(rtol=3e-2, atol=3e-2)
    torch.testing.assert_close(mx[..., 0].double(), ref_max, **tol)
    torch.testing.assert_close(sm[..., 0].double(), ref_sum, **tol)
    names = ("dq", "dk1", "dv1", "dk2", "dv2")
    grads = op_plugin.fused_floyd_attention_grad(grad, *xs, out, mx, sm, atten_mask=mask, scale_value=scale)
    # Every gradient goes through dS = P (dP - D) with D = rowsum(dY * O), a d-term dot product of
    # the rounded forward output that PyTorch's composite does not form (it sums P dP): its
    # rounding reaches every term of a row alike (visible where P is uniform, a fully masked row).
    _budget(names, grads, same_grads, ref_grads, d, dt, summed=d)
    _same_in_fake(torch.ops.op_plugin.fused_floyd_attention.default, xs, dict(atten_mask=mask, scale_value=scale),
                  (mx, sm, out))
    _same_in_fake(torch.ops.op_plugin.fused_floyd_attention_grad.default, [grad, *xs, out, mx, sm],
                  dict(atten_mask=mask, scale_value=scale), grads)
    _, auto = _grads(lambda *t: op_plugin.fused_floyd_attention(*t, atten_mask=mask, scale_value=scale)[2], xs, grad)
    _budget([f"autograd {n}" for n in names], auto, same_grads, ref_grads, d, dt, summed=d)


# ---- block_attention_residuals / block_attention_residuals_grad ----------------------------------

@st.composite
def bar_cases(draw, dtypes: tuple[torch.dtype, ...] = DTYPES, long: bool = False) -> Case:
    # long: T over several of the plan's row chunks, H at production widths
    return dict(t=draw(st.integers(0, 300 if long else 40)), n=draw(st.integers(0, 9)),
                h=draw(lengths(tiles=(16, 32, 64, 128), long=long)),
                dtype=draw(st.sampled_from(dtypes)),
                proj_2d=draw(st.booleans()), valid_block_num=draw(st.sampled_from(["-1", "N"])),
                norm_eps=draw(st.sampled_from([1e-6, 1e-3, 0.25])), seed=draw(st.integers(0, 2**31 - 1)))


def check_bar(case: Case) -> None:
    """block_attention_residuals (hidden, inv_norm, probs), its grad op and autograd."""
    g, dt, t, n, h = _generator(case), case["dtype"], case["t"], case["n"], case["h"]
    xs = [_randn(g, (t, h), dt), _randn(g, (t, n, h), dt),
          _randn(g, (1, h) if case["proj_2d"] else (h,), dt, 4 / h ** 0.5),
          (1 + 0.1 * torch.randn(h, generator=g, dtype=torch.float64)).to(dt)]
    grad = _randn(g, (t, h), dt)
    vbn = -1 if case["valid_block_num"] == "-1" else n
    eps = case["norm_eps"]

    def ref(*x):
        return composite.block_attention_residuals(*x, norm_eps=eps)[0]

    hidden, inv_norm, probs = torch.ops.op_plugin.block_attention_residuals(*xs, vbn, eps)
    ref_out, ref_grads = _grads(ref, [x.double() for x in xs], grad.double())
    same_out, same_grads = _grads(ref, xs, grad)
    assert_within_budget(hidden, same_out, ref_out, "hidden_states")
    with torch.no_grad():
        x64 = [x.double() for x in xs]
        _, ref_inv, ref_probs = composite.block_attention_residuals(*x64, norm_eps=eps)
        # SPEC §4: gv = gH p + gk inv - ginv inv^3 v / H with gk = gs sw; the last two terms cancel
        # where a row's RMS is tiny next to eps^0.5 (H = 1: v / |v|), at the scale of gk inv. The
        # weight gradients sum T (N + 1) terms gs k, which cancel (sum_i gs = 0 in each row).
        v = torch.cat([x64[1], x64[0].unsqueeze(1)], 1)
        g = (grad.double().unsqueeze(1) * v).sum(-1)
        gs = ref_probs * (g - (ref_probs * g).sum(-1, keepdim=True))
        sw = (x64[3] * x64[2].reshape(-1)).abs()
        terms = (gs.abs().unsqueeze(-1) * sw * ref_inv.unsqueeze(-1)).max().item() if gs.numel() and h else 0.0
    tol = dict(rtol=1e-10, atol=1e-12) if dt == torch.float64 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(inv_norm.double(), ref_inv, **tol)
    torch.testing.assert_close(probs.double(), ref_probs, **tol)
    names = ("grad_partial_block", "grad_block_res", "grad_proj_weight", "grad_norm_weight")
    grads = op_plugin.block_attention_residuals_grad(*xs, grad, inv_norm, probs, valid_block_num=vbn)
    _budget(names, grads, same_grads, ref_grads, h, dt, terms, summed=t * (n + 1))
    _same_in_fake(torch.ops.op_plugin.block_attention_residuals.default, [*xs, vbn, eps], {}, (hidden, inv_norm, probs))
    _same_in_fake(torch.ops.op_plugin.block_attention_residuals_grad.default, [*xs, grad, inv_norm, probs],
                  dict(valid_block_num=vbn), grads)
    _, auto = _grads(lambda *x: op_plugin.block_attention_residuals(*x, valid_block_num=vbn, norm_eps=eps), xs, grad)
    _budget([f"autograd {name}" for name in names], auto, same_grads, ref_grads, h, dt, terms,
            summed=t * (n + 1))


# ---- the families ------------------------------------------------------------------------------

FAMILIES: dict[str, tuple[Callable[..., st.SearchStrategy[Case]], Callable[[Case], None]]] = {
    "flash_attn": (flash_attn_cases, check_flash_attn),
    "flash_attn_paged": (flash_attn_paged_cases, check_flash_attn_paged),
    "swa": (swa_cases, check_swa),
    "fused_floyd_attention": (floyd_cases, check_floyd),
    "block_attention_residuals": (bar_cases, check_bar),
}
# The short run draws each layout and dtype on its own (the long run draws them together), so
# every pair is covered, each with the features must_cover lists, or the short run fails.
VARIANTS = {"flash_attn": [dict(layouts=(layout,), dtypes=(dt,)) for layout in FLASH_LAYOUTS for dt in DTYPES],
            "flash_attn_paged": [dict(layouts=(layout,), dtypes=(dt,)) for layout in FLASH_LAYOUTS for dt in DTYPES],
            "swa": [dict(layouts=(layout,), dtypes=(dt,)) for layout in SWA_LAYOUTS for dt in DTYPES],
            "fused_floyd_attention": [dict(dtypes=(dt,)) for dt in DTYPES],
            "block_attention_residuals": [dict(dtypes=(dt,)) for dt in DTYPES]}


def must_cover(family: str, variant: dict) -> list[str]:
    """The features a short run of ``family`` (one ``variant``) must have drawn."""
    need = ["a length at a tile edge"]
    if family in ("flash_attn", "swa"):
        need.append("Dv < D")
        if variant["layouts"] == ("TND",):
            need += ["TND, Dv < D", "TND with an empty sequence"]
    if family == "flash_attn_paged":
        need += ["a block size that does not divide a length", "a shared prefix block"]
    if family == "fused_floyd_attention":
        need.append("mask full rows")
    if family == "block_attention_residuals":
        need += ["N = 0", "T = 0"]
    return need
# the ops each family's calls exercise (forward, backward op called directly, autograd)
OPS_OF = {"flash_attn": ("flash_attn_metadata", "flash_attn", "flash_attn_grad"),
          "flash_attn_paged": ("flash_attn",),
          "swa": ("swa_forward", "swa_backward"),
          "fused_floyd_attention": ("fused_floyd_attention", "fused_floyd_attention_grad"),
          "block_attention_residuals": ("block_attention_residuals", "block_attention_residuals_grad")}


def features(family: str, case: Case) -> list[str]:
    """The features a case exercises, for the long run's coverage counts."""
    dtype = str(case["dtype"]).removeprefix("torch.")
    edges = {t + e for t in TILES + LONG_TILES for e in (-1, 0, 1)}
    sizes = case.get("sq", []) + case.get("skv", []) + [case.get(c, 0) for c in "nmkht"]
    out = [f"dtype {dtype}"] + ["a length at a tile edge"] * any(s in edges for s in sizes)
    out += ["a length over 512"] * any(s > 512 for s in sizes)
    if family == "flash_attn_paged":
        bs, used = case["block_size"], case["seqused_kv"]
        out += [f"layout_kv {case['layout_kv']}"]
        out += ["a block size that does not divide a length"] * any(n % bs for n in used)
        out += ["a shared prefix block"] * (case["share_prefix"] and len(used) > 1 and min(case["skv"][:2]) >= bs)
        out += ["a strided cache"] * case["strided_cache"]
    if family in ("flash_attn", "flash_attn_paged"):
        mode = _mode(case["mask_mode"])
        out += [f"layout {case['layout']}", f"mask_mode {mode}",
                f"mask_mode given as {type(case['mask_mode']).__name__}"]
        out += ["GQA"] * (case["n1"] > case["n2"]) + ["Dv < D"] * (case["dv"] < case["d"])
        out += ["seqused"] * ("seqused_q" in case or "seqused_kv" in case) + ["sinks"] * ("sinks" in case)
        out += ["TND with an empty sequence"] * (case["layout"] == "TND" and 0 in case["sq"] + case["skv"])
        out += ["TND, Dv < D"] * (case["layout"] == "TND" and case["dv"] < case["d"])
        out += ["window with -1"] * (mode == 4 and -1 in (case["win_left"], case["win_right"]))
        out += ["strided q, k, v"] * bool(case.get("strided"))
    elif family == "swa":
        out += [f"layout {case['layout']}", f"sparse_mode {case['sparse_mode']}, mask {case['mask']}"]
        out += ["GQA"] * (case["n"] > case["nkv"]) + ["Dv < D"] * (case["dv"] < case["d"])
        out += ["pse"] * ("pse" in case) + ["sink"] * ("sink" in case) + ["dropout"] * (case["keep_prob"] < 1)
        out += ["TND with an empty sequence"] * (case["layout"] == "TND" and 0 in case["sq"] + case["skv"])
        out += ["TND, Dv < D"] * (case["layout"] == "TND" and case["dv"] < case["d"])
        out += ["TND, trailing zeros"] * (case.get("trailing_zeros", 0) > 0)
        out += ["negative pre or next"] * (min(case["pre_tockens"], case["next_tockens"]) < 0)
        out += ["strided query, key, value"] * bool(case.get("strided"))
    elif family == "fused_floyd_attention":
        out += [f"mask {case['mask']}"]
    else:
        out += ["N = 0"] * (case["n"] == 0) + ["T = 0"] * (case["t"] == 0) + ["proj_weight [1, H]"] * case["proj_2d"]
    return out
