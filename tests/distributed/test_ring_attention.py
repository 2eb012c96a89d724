"""ring_flash_attn over 2 and 3 gloo processes against single-process flash_attn on the full sequence.

One spawn per world size runs every case (process start-up dominates the time); the workers save
their shards and the tests here compare them, case by case, with flash_attn's autograd on the
whole sequence: float32 to summation order, bfloat16 within 2x the error of plain bfloat16
flash_attn against a float64 reference.
"""
from __future__ import annotations

import math
import os
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import op_plugin
from op_plugin.distributed import ring_flash_attn, shard_sequence, unshard_sequence
from spawn_util import init_rank, spawn_and_load

TEMPLATE = torch.triu(torch.ones(2048, 2048, dtype=torch.int8), 1)
SPAWN_TIMEOUT_S = 180  # a hung ring fails the test instead of blocking CI
COLLECTIVE_TIMEOUT = timedelta(seconds=60)

# name: (dtype, causal, partition, B, S, N1, N2, D, Dv, softmax_scale). S divisible by 2*3*2.
CASES = {
    "dense_f32": (torch.float32, False, "contiguous", 2, 24, 4, 2, 16, 16, None),
    "dense_zigzag_f32": (torch.float32, False, "zigzag", 1, 24, 2, 2, 16, 16, None),
    "causal_contiguous_f32": (torch.float32, True, "contiguous", 2, 24, 4, 2, 16, 16, None),
    "causal_zigzag_f32": (torch.float32, True, "zigzag", 2, 24, 4, 2, 16, 16, None),
    "causal_zigzag_mqa_dv_f32": (torch.float32, True, "zigzag", 1, 36, 3, 1, 16, 8, 0.3),
    "causal_zigzag_bf16": (torch.bfloat16, True, "zigzag", 1, 48, 4, 2, 32, 32, None),
}
# Also run under torch.autocast, with mixed input dtypes.
AUTOCAST_CASE = "causal_zigzag_bf16"
# Also run on process subgroups: world 3 on global ranks 1 and 2 (group ranks 0 and 1), world 2 on
# one group per rank (a ring of one).
SUBGROUP_CASE = "causal_zigzag_f32"


def full_inputs(name: str) -> list[torch.Tensor]:
    """q, k, v, dout of the whole sequence, in float64 (cast per case)."""
    _, _, _, B, S, N1, N2, D, Dv, _ = CASES[name]
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    shapes = [(B, S, N1, D), (B, S, N2, D), (B, S, N2, Dv), (B, S, N1, Dv)]
    return [torch.randn(*s, generator=g, dtype=torch.float64) for s in shapes]


# --------------------------------------------------------------------------------------------
# Workers (run in spawned processes)


def _run_case(name: str, rank: int, world: int, group: dist.ProcessGroup | None) -> dict[str, torch.Tensor]:
    dtype, causal, partition, *_, scale = CASES[name]
    q, k, v, dout = (shard_sequence(t.to(dtype), rank, world, partition=partition) for t in full_inputs(name))
    q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
    out, lse = ring_flash_attn(q, k, v, causal=causal, softmax_scale=scale, partition=partition, group=group,
                               return_softmax_lse=True)
    out.backward(dout)
    return {"out": out.detach(), "lse": lse, "dq": q.grad, "dk": k.grad, "dv": v.grad}


def _run_autocast(rank: int, world: int) -> dict[str, torch.Tensor]:
    """The bf16 case's inputs as a model under torch.autocast hands them over: q and k in float32
    (a float32 rotary embedding), v in bfloat16."""
    _, causal, partition, *_ = CASES[AUTOCAST_CASE]
    q, k, v, dout = (shard_sequence(t, rank, world, partition=partition) for t in full_inputs(AUTOCAST_CASE))
    q, k, v = (t.to(dt).requires_grad_(True) for t, dt in ((q, torch.float32), (k, torch.float32), (v, torch.bfloat16)))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, lse = ring_flash_attn(q, k, v, causal=causal, partition=partition, return_softmax_lse=True)
    out.backward(dout.to(out.dtype))
    return {"out": out.detach(), "lse": lse, "dq": q.grad, "dk": k.grad, "dv": v.grad}


def _mismatch_error(rank: int) -> str:
    """Each rank passes another local length: every rank must raise, none may hang or abort."""
    q = torch.zeros(1, 2 * (rank + 1), 2, 8)
    try:
        ring_flash_attn(q, q, q)
    except ValueError as e:
        return str(e)
    return "no error"


def _refused_error(rank: int) -> str:
    """Group rank 1 passes a 3D q: it raises its own error, and the others must raise, not wait."""
    q = torch.zeros(1, 4, 2, 8)
    try:
        ring_flash_attn(q[0] if rank == 1 else q, q, q)
    except ValueError as e:
        return str(e)
    return "no error"


def _worker(rank: int, world: int, store: str, out_dir: str) -> None:
    init_rank(rank, world, store, COLLECTIVE_TIMEOUT)
    try:
        results = {name: _run_case(name, rank, world, None) for name in CASES}
        if world == 3:
            sub = dist.new_group([1, 2])  # every rank must take part in creating it
            if rank in (1, 2):
                results["subgroup"] = _run_case(SUBGROUP_CASE, rank - 1, 2, sub)
        else:
            # A ring of one: each rank alone in its group holds the whole sequence.
            alone = [dist.new_group([r]) for r in range(world)][rank]
            results["alone"] = _run_case(SUBGROUP_CASE, 0, 1, alone)
        results["autocast"] = _run_autocast(rank, world)
        results["mismatch"] = _mismatch_error(rank)
        results["refused"] = _refused_error(rank)
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _spawn(world: int, tmp: Path) -> list[dict[str, dict[str, torch.Tensor]]]:
    return spawn_and_load(_worker, world, tmp, SPAWN_TIMEOUT_S, "ring attention")


@pytest.fixture(scope="module")
def ring_results(tmp_path_factory):
    """ring_results(world): every rank's results, from one spawn per world size."""
    cache: dict[int, list[dict[str, dict[str, torch.Tensor]]]] = {}

    def get(world: int) -> list[dict[str, dict[str, torch.Tensor]]]:
        if world not in cache:
            cache[world] = _spawn(world, tmp_path_factory.mktemp(f"ring{world}"))
        return cache[world]
    return get


# --------------------------------------------------------------------------------------------
# References


def flash_attn_full(name: str, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Single-process flash_attn (autograd) on the whole sequence."""
    _, causal, _, *_, scale = CASES[name]
    q, k, v, dout = (t.to(dtype) for t in full_inputs(name))
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))
    kw = dict(mask_mode=3, attn_mask=TEMPLATE) if causal else {}
    out, lse = op_plugin.flash_attn(q, k, v, softmax_scale=q.size(3) ** -0.5 if scale is None else scale,
                                    return_softmax_lse=True, **kw)
    out.backward(dout.to(dtype))
    return {"out": out.detach(), "lse": lse, "dq": q.grad, "dk": k.grad, "dv": v.grad}


def math_full_float64(name: str) -> dict[str, torch.Tensor]:
    """softmax(q k^T * scale) v in float64 with plain torch ops, and its gradients."""
    _, causal, _, *_, scale = CASES[name]
    q, k, v, dout = (t.clone().requires_grad_(True) for t in full_inputs(name))
    S, N1, N2, D = q.size(1), q.size(2), k.size(2), q.size(3)
    kk, vv = (t.repeat_interleave(N1 // N2, dim=2) for t in (k, v))
    s = torch.einsum("bqnd,bknd->bnqk", q, kk) * (D ** -0.5 if scale is None else scale)
    if causal:
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), -math.inf)
    out = torch.einsum("bnqk,bknd->bqnd", s.softmax(-1), vv)
    out.backward(dout.detach())
    return {"out": out.detach(), "lse": s.logsumexp(-1).detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad}


def gathered(results: list[dict[str, dict[str, torch.Tensor]]], key: str, name: str) -> dict[str, torch.Tensor]:
    partition = CASES[name][2]
    shards = [r[key] for r in results if key in r]
    return {t: unshard_sequence([s[t] for s in shards], partition=partition, dim=2 if t == "lse" else 1)
            for t in ("out", "lse", "dq", "dk", "dv")}


# --------------------------------------------------------------------------------------------
# Tests

F32_CASES = [n for n in CASES if CASES[n][0] == torch.float32]


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("name", F32_CASES)
def test_float32_matches_flash_attn_on_the_full_sequence(ring_results, world, name) -> None:
    results = ring_results(world)
    ours, ref = gathered(results, name, name), flash_attn_full(name, torch.float32)
    for t in ("out", "lse", "dq", "dk", "dv"):
        assert ours[t].dtype == ref[t].dtype, t
        torch.testing.assert_close(ours[t], ref[t], rtol=1e-5, atol=1e-5,
                                   msg=lambda m, t=t: f"{name} world {world} {t}: {m}")


def test_subgroup_ring_uses_group_ranks(ring_results) -> None:
    results = ring_results(3)
    ours, ref = gathered(results, "subgroup", SUBGROUP_CASE), flash_attn_full(SUBGROUP_CASE, torch.float32)
    for t in ("out", "lse", "dq", "dk", "dv"):
        torch.testing.assert_close(ours[t], ref[t], rtol=1e-5, atol=1e-5, msg=lambda m, t=t: f"subgroup {t}: {m}")


def test_ring_of_one_is_flash_attn(ring_results) -> None:
    results = ring_results(2)
    ref = flash_attn_full(SUBGROUP_CASE, torch.float32)
    for rank, r in enumerate(results):
        for t in ("out", "lse", "dq", "dk", "dv"):
            torch.testing.assert_close(r["alone"][t], ref[t], rtol=1e-5, atol=1e-5,
                                       msg=lambda m, t=t: f"rank {rank} alone {t}: {m}")


@pytest.mark.parametrize("world", [2, 3])
def test_bfloat16_within_twice_the_error_of_plain_flash_attn(ring_results, world) -> None:
    results = ring_results(world)
    name = "causal_zigzag_bf16"
    ours, plain, ref = gathered(results, name, name), flash_attn_full(name, torch.bfloat16), math_full_float64(name)
    for t in ("out", "dq", "dk", "dv"):
        assert ours[t].dtype == torch.bfloat16, t
        our_err = (ours[t].double() - ref[t]).abs().max().item()
        plain_err = (plain[t].double() - ref[t]).abs().max().item()
        # No ulp floor (tests/ops has 4 ulps): here it would exceed the errors themselves. Each
        # block's output and gradient is rounded to bfloat16 once before the float32 merge, so
        # the ring may lose up to about twice what one flash_attn call loses.
        assert plain_err > 0, t
        assert our_err <= 2 * plain_err, (f"world {world} {t}: error {our_err:.3g} exceeds 2x plain "
                                          f"bfloat16 flash_attn's {plain_err:.3g}")
    torch.testing.assert_close(ours["lse"], ref["lse"].float(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("world", [2, 3])
def test_autocast_runs_the_ring_in_bfloat16(ring_results, world) -> None:
    """Under torch.autocast the ring casts q, k, v as flash_attn does: the output is bf16, each
    gradient reaches its input in the input's dtype, within 2x plain bf16 flash_attn's error."""
    results = ring_results(world)
    ours, ref = gathered(results, "autocast", AUTOCAST_CASE), math_full_float64(AUTOCAST_CASE)
    plain = flash_attn_full(AUTOCAST_CASE, torch.bfloat16)
    assert [ours[t].dtype for t in ("out", "dq", "dk", "dv")] == [torch.bfloat16, torch.float32, torch.float32,
                                                                   torch.bfloat16]
    for t in ("out", "dq", "dk", "dv"):
        our_err = (ours[t].double() - ref[t]).abs().max().item()
        plain_err = (plain[t].double() - ref[t]).abs().max().item()
        assert our_err <= 2 * plain_err, f"world {world} {t}: error {our_err:.3g}, plain bf16 {plain_err:.3g}"


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_with_different_shapes_all_raise_the_same_error(ring_results, world) -> None:
    errors = [r["mismatch"] for r in ring_results(world)]
    assert errors == [errors[0]] * world, errors
    assert "every rank of the group must call ring_flash_attn with the same shapes" in errors[0], errors[0]
    assert "group rank 0 passed q (1, 2, 2, 8)" in errors[0], errors[0]
    assert "group rank 1 passed q (1, 4, 2, 8)" in errors[0], errors[0]


@pytest.mark.parametrize("world", [2, 3])
def test_a_rank_refusing_its_arguments_makes_every_rank_raise(ring_results, world) -> None:
    errors = [r["refused"] for r in ring_results(world)]
    assert errors[1].startswith("q must be 4D (B, S_local, N, D), but got 3D"), errors[1]
    for rank in set(range(world)) - {1}:
        assert errors[rank] == ("group rank 1 refused its ring_flash_attn arguments (its own error says why); "
                                "every rank of the group must make a valid call"), (rank, errors[rank])


# --------------------------------------------------------------------------------------------
# In-process: sharding helpers and argument errors (no process group needed)


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("partition", ["contiguous", "zigzag"])
def test_shard_unshard_round_trip(world, partition) -> None:
    x = torch.arange(2 * 12 * 3, dtype=torch.float32).view(2, 12, 3)
    shards = [shard_sequence(x, r, world, partition=partition) for r in range(world)]
    assert all(s.shape == (2, 12 // world, 3) for s in shards)
    torch.testing.assert_close(unshard_sequence(shards, partition=partition), x, rtol=0, atol=0)


def test_zigzag_holds_chunks_r_and_2w_minus_1_minus_r() -> None:
    pos = torch.arange(12).view(1, 12)
    assert shard_sequence(pos, 0, 3, partition="zigzag").tolist() == [[0, 1, 10, 11]]
    assert shard_sequence(pos, 1, 3, partition="zigzag").tolist() == [[2, 3, 8, 9]]
    assert shard_sequence(pos, 2, 3, partition="zigzag").tolist() == [[4, 5, 6, 7]]


def _qkv(B=1, S=8, N1=4, N2=2, D=8, Dv=8, dtype=torch.float32):
    return (torch.randn(B, S, N1, D, dtype=dtype), torch.randn(B, S, N2, D, dtype=dtype),
            torch.randn(B, S, N2, Dv, dtype=dtype))


ERROR_CASES = {
    "q_3d": (lambda: (torch.randn(8, 4, 8), *_qkv()[1:]), {}, ValueError, r"q must be 4D"),
    "int_dtype": (lambda: tuple(t.to(torch.int32) for t in _qkv()), {}, TypeError, r"q must have dtype"),
    "kv_dtype": (lambda: (_qkv()[0], _qkv(dtype=torch.float64)[1], _qkv()[2]), {}, TypeError,
                 r"k and v must have q's dtype"),
    "batch": (lambda: (_qkv(B=2)[0], *_qkv()[1:]), {}, ValueError, r"k and v must have q's batch size 2"),
    "local_len": (lambda: (_qkv(S=6)[0], *_qkv()[1:]), {}, ValueError, r"local sequence length 6"),
    "heads": (lambda: _qkv(N1=4, N2=3), {}, ValueError, r"heads, dividing q's 4"),
    "head_dim": (lambda: (_qkv(D=16)[0], *_qkv()[1:]), {}, ValueError, r"k must have q's head dim 16"),
    "dv": (lambda: _qkv(D=8, Dv=16), {}, ValueError, r"v's head dim must not exceed q's 8"),
    "partition": (_qkv, dict(partition="striped"), ValueError, r"partition must be one of"),
    "zigzag_odd": (lambda: _qkv(S=7), dict(causal=True, partition="zigzag"), ValueError, r"must be even"),
    "scale_zero": (_qkv, dict(softmax_scale=0.0), ValueError, r"softmax_scale must not be 0.0"),
}


@pytest.mark.parametrize("case", ERROR_CASES)
def test_bad_arguments_name_the_argument(case) -> None:
    make, kw, exc, match = ERROR_CASES[case]
    with pytest.raises(exc, match=match):
        ring_flash_attn(*make(), **kw)


def test_needs_an_initialized_process_group(monkeypatch) -> None:
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    with pytest.raises(RuntimeError, match="needs torch.distributed initialized"):
        ring_flash_attn(*_qkv())


def test_shard_errors() -> None:
    with pytest.raises(ValueError, match="divisible by 6"):
        shard_sequence(torch.zeros(1, 8), 0, 3, partition="zigzag")
    with pytest.raises(ValueError, match="rank must be in"):
        shard_sequence(torch.zeros(1, 8), 2, 2)
    with pytest.raises(ValueError, match="partition must be one of"):
        unshard_sequence([torch.zeros(1, 8)], partition="ring")
