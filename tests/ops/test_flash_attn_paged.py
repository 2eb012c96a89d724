"""flash_attn with a paged KV cache (block_table, layout_kv PA_BBND / PA_BNBD; SPEC §1.2).

tests/differential draws paged calls across the whole feature space (family flash_attn_paged:
every layout_q, masks, windows, sinks, GQA, shared prefix blocks, strided caches) and checks each
against the float64 reference and the dense call. Here: the registration (opcheck, fake mode,
torch.compile, torch.export, vmap, DTensor's heads split), a long decode through the split-key
path, thread counts, and the errors, in eager and fake mode alike.
"""
from __future__ import annotations

import pytest
import torch
from op_test_utils import assert_within_budget, num_threads, raises_same_in_eager_and_fake
from op_plugin.reference import flash_attn_reference, paged_cache
from op_plugin.testing import check_sharded_call, sharding_strategies

import op_plugin

FWD = torch.ops.op_plugin.flash_attn.default


def paged_decode(B=3, N1=8, N2=2, D=64, lens=(40, 1, 77), block_size=16, rows_q=1, layout_kv="PA_BBND",
                 dtype=torch.float32, seed=0):
    """A decode step: q [B, rows_q, N1, D] over each sequence's ``lens`` keys of a paged cache whose
    blocks are shuffled; rows no sequence owns are NaN, table entries past a sequence's blocks -1.
    Returns (paged call, the same call with dense [B, max(lens), N2, D] keys and values)."""
    g = torch.Generator().manual_seed(seed)
    S = max(lens)
    q = torch.randn(B, rows_q, N1, D, generator=g).to(dtype)
    k = torch.randn(B, S, N2, D, generator=g).to(dtype)
    v = torch.randn(B, S, N2, D, generator=g).to(dtype)
    cache_k, cache_v, table = paged_cache([k[b, :n] for b, n in enumerate(lens)], [v[b, :n] for b, n in enumerate(lens)],
                                          block_size, layout_kv, g, spare_blocks=1)
    used = torch.tensor(lens, dtype=torch.int32)
    common = dict(q=q, seqused_kv=used, softmax_scale=D ** -0.5, return_softmax_lse=True)
    return (dict(common, k=cache_k, v=cache_v, block_table=table, layout_kv=layout_kv),
            dict(common, k=k, v=v))


@pytest.mark.parametrize("layout_kv", ["PA_BBND", "PA_BNBD"])
def test_opcheck(layout_kv) -> None:
    paged, _ = paged_decode(layout_kv=layout_kv, rows_q=3)
    torch.library.opcheck(FWD, (), paged)


@pytest.mark.parametrize("layout_kv", ["PA_BBND", "PA_BNBD"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_long_decode_through_the_key_splits(layout_kv, dtype) -> None:
    """One query row over 5,000 keys takes the split-key decode path; still the dense call's bits."""
    paged, dense = paged_decode(B=2, lens=(5000, 2100), block_size=32, layout_kv=layout_kv, dtype=dtype)
    out, lse = FWD(**paged)
    want_out, want_lse = FWD(**dense)
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
    opts = dict(block_table=paged["block_table"], seqused_kv=paged["seqused_kv"], layout_kv=layout_kv,
                softmax_scale=paged["softmax_scale"])
    ref = flash_attn_reference(paged["q"].double(), paged["k"].double(), paged["v"].double(), **opts)[0]
    same = flash_attn_reference(paged["q"], paged["k"], paged["v"], use_sdpa=True, **opts)[0]
    assert_within_budget(out, same, ref, "attn_out")


def test_bitwise_identical_for_1_and_2_threads() -> None:
    paged, _ = paged_decode(lens=(300, 17, 1000), rows_q=5)
    with num_threads(1):
        one = FWD(**paged)
    with num_threads(2):
        two = FWD(**paged)
    assert all(torch.equal(a, b) for a, b in zip(one, two))


def test_torch_compile_fullgraph_decode_loop() -> None:
    """Decode steps: the lengths are a tensor, so one compiled graph serves every step."""
    paged, _ = paged_decode(lens=(40, 20, 60))
    torch._dynamo.reset()
    step = torch.compile(lambda q, used: FWD(**dict(paged, q=q, seqused_kv=used))[0], fullgraph=True)
    for step_back in range(3):  # the written rows only: past them the cache holds NaN
        used = paged["seqused_kv"] - 5 * step_back
        got = step(paged["q"], used)
        assert torch.equal(got, FWD(**dict(paged, seqused_kv=used))[0])


def test_torch_export_decode_step(tmp_path) -> None:
    """A serving stack's export of a decode step: the op is one node of the program, every
    dimension dynamic (the batch, the cache's block count, the table's width), saved and loaded,
    and the program computes eager's bits at other sizes too."""
    paged, _ = paged_decode()
    names = ["q", "k", "v", "block_table", "seqused_kv"]

    class Step(torch.nn.Module):
        def forward(self, q, k, v, block_table, seqused_kv):
            return FWD(q=q, k=k, v=v, block_table=block_table, seqused_kv=seqused_kv, layout_kv="PA_BBND",
                       softmax_scale=paged["softmax_scale"])[0]

    args = tuple(paged[n] for n in names)
    dims = tuple({d: torch.export.Dim.AUTO for d in range(t.dim())} for t in args)
    program = torch.export.export(Step(), args, dynamic_shapes=dims)
    assert sum(n.op == "call_function" and n.target == FWD for n in program.graph.nodes) == 1
    torch.export.save(program, tmp_path / "step.pt2")
    loaded = torch.export.load(tmp_path / "step.pt2").module()
    other, _ = paged_decode(B=2, lens=(300, 31), block_size=16, seed=3)
    for call in (paged, other):
        want = FWD(**dict(call, layout_kv="PA_BBND"))[0]
        assert torch.equal(loaded(*(call[n] for n in names)), want)


def test_vmap_over_queries_with_one_cache() -> None:
    """torch.vmap over a batch of query tensors sharing the cache calls the op per sample (a paged
    cache's blocks do not fold into the batch), and agrees with the calls made one by one."""
    paged, _ = paged_decode()
    qs = torch.stack([paged["q"], paged["q"] * 0.5])
    call = {k: v for k, v in paged.items() if k != "q"}
    got = torch.vmap(lambda q: FWD(q=q, **call)[0])(qs)
    for i in range(2):
        assert torch.equal(got[i], FWD(**dict(paged, q=qs[i]))[0])


def test_dtensor_heads_split_of_a_paged_cache() -> None:
    """DTensor's heads strategy splits the cache on its head axis (2 in PA_BBND, 1 in PA_BNBD), and
    the batch strategy does not apply (the blocks are shared by the batch)."""
    for layout_kv, axis in (("PA_BBND", 2), ("PA_BNBD", 1)):
        paged, _ = paged_decode(layout_kv=layout_kv)
        strategies = {name: (name, ins, outs) for name, ins, outs in sharding_strategies(FWD, paged)}
        assert set(strategies) == {"heads"}
        assert strategies["heads"][1]["k"] == axis and strategies["heads"][1]["v"] == axis
        check_sharded_call(FWD, paged, ["attn_out", "softmax_lse"], strategies["heads"], 2, f"paged {layout_kv}")


def test_backward_is_not_implemented() -> None:
    paged, _ = paged_decode()
    q = paged["q"].detach().requires_grad_(True)
    out = op_plugin.flash_attn(**dict(paged, q=q))[0]
    with pytest.raises(RuntimeError, match="the derivative of flash_attn with a paged KV cache"):
        out.sum().backward()


# ---- errors -------------------------------------------------------------------------------------

def _bad(change):
    paged, _ = paged_decode()
    return dict(paged, **change)


@pytest.mark.parametrize("change,message", [
    (dict(block_table=None), "block_table must be provided when layout_kv is PA_BBND"),
    (dict(layout_kv="BSND"), r"block_table must not be provided when layout_kv is BSND"),
    (dict(seqused_kv=None), r"seqused_kv must be provided with block_table"),
    (dict(layout_kv="PA_XYZ"), r"layout_kv\(PA_XYZ\).*must be the same"),
    (dict(block_table=torch.zeros(2, 9, dtype=torch.int32)), r"block_table must be 2D \(B = 3, max_num_blocks_per_seq\)"),
    (dict(block_table=torch.zeros(3, 9, dtype=torch.float32)), r"block_table must have dtype int32, int64"),
    (dict(k=torch.zeros(9, 16, 2, 32)), r"D dim of k must be the same as q \(64\)"),
    (dict(k=torch.zeros(9, 16, 64)), r"k must be 4D when layout is PA_BBND"),
    (dict(v=torch.zeros(9, 8, 2, 64)), r"v must match k except in D"),
    (dict(cu_seqlens_kv=torch.tensor([0, 40, 41, 118], dtype=torch.int32)), "cu_seqlens_kv must not be provided"),
])
def test_errors_in_eager_and_fake(change, message) -> None:
    call = _bad(change)
    names = list(call)
    raises_same_in_eager_and_fake(lambda *values: FWD(**dict(zip(names, values))), list(call.values()), message)


def test_tnd_queries_with_a_paged_cache_take_no_cu_seqlens_kv() -> None:
    paged, dense = paged_decode(rows_q=2)
    B, S, N1, D = paged["q"].shape
    tnd = dict(paged, q=paged["q"].reshape(B * S, N1, D), layout_q="TND", layout_out="TND",
               cu_seqlens_q=torch.arange(0, B * S + 1, S, dtype=torch.int32))
    out, lse = FWD(**tnd)
    want_out, want_lse = FWD(**dense)
    assert torch.equal(out, want_out.reshape(B * S, N1, D))
    assert torch.equal(lse, want_lse.permute(1, 0, 2).reshape(N1, B * S))


@pytest.mark.parametrize("change,message", [
    # only the blocks a sequence's seqused_kv reaches are read and checked
    (lambda c: c["block_table"].__setitem__((2, 4), 99), r"block_table\[2\]\[4\] = 99 must be within \[0, num_blocks = 10\)"),
    (lambda c: c["block_table"].__setitem__((0, 0), -1), r"block_table\[0\]\[0\] = -1 must be within"),
    (lambda c: c["seqused_kv"].__setitem__(1, 97), r"seqused_kv\[1\] = 97 must be within \[0, 96\]"),
])
def test_contents_errors(change, message) -> None:
    """The table's and the lengths' contents are checked in eager mode (fake tensors have none)."""
    paged, _ = paged_decode()
    change(paged)
    with pytest.raises(RuntimeError, match=message):
        FWD(**paged)


def test_unread_table_entries_may_be_anything() -> None:
    paged, dense = paged_decode()
    paged["block_table"][1, 1:] = 12345  # past sequence 1's one key
    assert torch.equal(FWD(**paged)[0], FWD(**dense)[0])
