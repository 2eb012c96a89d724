"""The ops on DTensors (torch.distributed.tensor) over 2 gloo processes, against the same calls on
whole tensors in one process: the registry's sharding: strategies (python/sharding.py), registered
with DTensor when it is imported, run each rank's call on its own shards, forward and backward.

One spawn runs every case; each rank saves its outputs' and gradients' placements and whole
tensors (full_tensor), and the tests compare them here. A call whose inputs are placed as a
strategy says keeps those placements, with no collective before the op (its outputs come out
sharded, or partial where the registry says so); a call no strategy fits is redistributed by
DTensor and still exact. tests/ops' generated test_<op>_sharding checks each strategy's arithmetic
on every sample without processes.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.distributed as dist
from spawn_util import init_rank, spawn_and_load

import op_plugin

SPAWN_TIMEOUT_S = 180
COLLECTIVE_TIMEOUT = timedelta(seconds=60)
TEMPLATE = torch.triu(torch.ones(2048, 2048, dtype=torch.int8), 1)


def _randn(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# Each case: (inputs: name -> (whole tensor, placement or None for Replicate, differentiable),
# the call on those inputs, the output it differentiates). Placements are spelled "S0" (Shard(0))
# or "R".
def _flash_gqa_heads() -> tuple[dict[str, Any], Callable[..., Any], int]:
    inputs = {"q": (_randn(1, 2, 6, 4, 16), "S2", True), "k": (_randn(2, 2, 7, 2, 16), "S2", True),
              "v": (_randn(3, 2, 7, 2, 16), "S2", True), "sinks": (_randn(4, 4), "S0", True),
              "attn_mask": (TEMPLATE, "R", False)}  # DTensor takes no plain tensor beside DTensors
    return inputs, lambda q, k, v, sinks, attn_mask: op_plugin.flash_attn(
        q, k, v, sinks=sinks, attn_mask=attn_mask, mask_mode=3, softmax_scale=0.25, return_softmax_lse=True), 0


def _flash_batch_bnsd() -> tuple[dict[str, Any], Callable[..., Any], int]:
    inputs = {"q": (_randn(5, 4, 2, 5, 8), "S0", True), "k": (_randn(6, 4, 2, 9, 8), "S0", True),
              "v": (_randn(7, 4, 2, 9, 8), "S0", True),
              "seqused_kv": (torch.tensor([9, 3, 1, 7], dtype=torch.int32), "S0", False)}
    return inputs, lambda q, k, v, seqused_kv: op_plugin.flash_attn(
        q, k, v, seqused_kv=seqused_kv, layout_q="BNSD", layout_kv="BNSD", layout_out="BSND", softmax_scale=0.3), 0


def _flash_tnd_heads() -> tuple[dict[str, Any], Callable[..., Any], int]:
    inputs = {"q": (_randn(8, 9, 4, 8), "S1", True), "k": (_randn(9, 11, 2, 8), "S1", True),
              "v": (_randn(10, 11, 2, 8), "S1", True),
              "cu_seqlens_q": (torch.tensor([0, 4, 9], dtype=torch.int32), "R", False),
              "cu_seqlens_kv": (torch.tensor([0, 5, 11], dtype=torch.int32), "R", False)}
    return inputs, lambda q, k, v, cu_seqlens_q, cu_seqlens_kv: op_plugin.flash_attn(
        q, k, v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_kv=cu_seqlens_kv, layout_q="TND", layout_kv="TND",
        layout_out="TND", softmax_scale=0.4, return_softmax_lse=True), 0


def _flash_mqa_heads_redistributed() -> tuple[dict[str, Any], Callable[..., Any], int]:
    # One key head cannot be split over 2 ranks: no strategy fits q's Shard(2), DTensor gathers.
    inputs = {"q": (_randn(11, 1, 5, 4, 8), "S2", True), "k": (_randn(12, 1, 6, 1, 8), "R", True),
              "v": (_randn(13, 1, 6, 1, 8), "R", True)}
    return inputs, lambda q, k, v: op_plugin.flash_attn(q, k, v, softmax_scale=0.3), 0


def _swa_batch_shared_pse_and_sink() -> tuple[dict[str, Any], Callable[..., Any], int]:
    inputs = {"query": (_randn(14, 2, 5, 4 * 8), "S0", True), "key": (_randn(15, 2, 7, 2 * 8), "S0", True),
              "value": (_randn(16, 2, 7, 2 * 8), "S0", True), "pse": (_randn(17, 1, 4, 5, 7), "R", True),
              "sink": (_randn(18, 4), "R", True), "atten_mask": (torch.ones(5, 7, dtype=torch.bool).triu(2), "R", False)}
    return inputs, lambda query, key, value, pse, sink, atten_mask: op_plugin.swa_forward(
        query, key, value, 4, "BSH", pse=pse, sink=sink, atten_mask=atten_mask, scale=0.35, pre_tockens=3,
        next_tockens=1), 0


def _floyd(split: str, mask: bool) -> Callable[[], tuple[dict[str, Any], Callable[..., Any], int]]:
    def case() -> tuple[dict[str, Any], Callable[..., Any], int]:
        b, h, n, m, k, d = 2, 2, 4, 6, 5, 8
        placements = {"rows": ("S2", "S2", "R"), "columns": ("S3", "R", "S3")}[split]
        inputs = {"query_ik": (_randn(19, b, h, n, m, d), placements[0], True),
                  "key_ij": (_randn(20, b, h, n, k, d), placements[1], True),
                  "value_ij": (_randn(21, b, h, n, k, d), placements[1], True),
                  "key_jk": (_randn(22, b, h, k, m, d), placements[2], True),
                  "value_jk": (_randn(23, b, h, k, m, d), placements[2], True)}
        if mask:
            inputs["atten_mask"] = (_randn(24, b, 1, n, 1, k) > 0.7, placements[1], False)
        return inputs, lambda **x: op_plugin.fused_floyd_attention(**x, scale_value=0.3), 2
    return case


def _block_attnres_tokens() -> tuple[dict[str, Any], Callable[..., Any], int]:
    inputs = {"partial_block": (_randn(25, 6, 16), "S0", True), "block_res": (_randn(26, 6, 3, 16), "S0", True),
              "proj_weight": (_randn(27, 16) * 0.3, "R", True), "norm_weight": (1 + 0.1 * _randn(28, 16), "R", True)}
    return inputs, lambda **x: op_plugin.block_attention_residuals(**x), 0


CASES = {
    "flash_attn GQA heads": _flash_gqa_heads,
    "flash_attn BNSD batch": _flash_batch_bnsd,
    "flash_attn TND heads": _flash_tnd_heads,
    "flash_attn MQA, q's heads split": _flash_mqa_heads_redistributed,
    "swa batch, shared pse and sink": _swa_batch_shared_pse_and_sink,
    "floyd rows": _floyd("rows", mask=True),
    "floyd rows without a mask": _floyd("rows", mask=False),
    "floyd columns": _floyd("columns", mask=True),
    "block_attention_residuals tokens": _block_attnres_tokens,
}


def _placement(text: str) -> Any:
    from torch.distributed.tensor import Replicate, Shard
    return Replicate() if text == "R" else Shard(int(text[1:]))


def _as_tuple(out: Any) -> tuple[Any, ...]:
    return out if isinstance(out, tuple) else (out,)


def _run(name: str, mesh: Any) -> dict[str, Any]:
    """The case on DTensors: each output's and gradient's placements and whole tensor."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    inputs, call, differentiated = CASES[name]()
    x = {n: distribute_tensor(t, mesh, [_placement(p)]).requires_grad_(grad) for n, (t, p, grad) in inputs.items()}
    outs = _as_tuple(call(**x))
    out = outs[differentiated]
    out.backward(distribute_tensor(_randn(99, *out.shape), mesh, out.placements))
    result: dict[str, Any] = {}
    for i, o in enumerate(outs):
        if isinstance(o, DTensor):
            result[f"out{i}"] = (str(o.placements), o.full_tensor().detach())
    for n, t in x.items():
        if t.grad is not None:
            result[f"grad {n}"] = (str(t.grad.placements), t.grad.full_tensor())
    return result


def _run_compiled(mesh: Any) -> dict[str, Any]:
    """torch.compile(fullgraph=True) of a flash_attn call on head-split DTensors."""
    from torch.distributed.tensor import distribute_tensor

    inputs, call, _ = _flash_gqa_heads()
    x = {n: distribute_tensor(t, mesh, [_placement(p)]) for n, (t, p, _) in inputs.items()}
    out, lse = torch.compile(call, fullgraph=True)(**x)
    return {"out0": (str(out.placements), out.full_tensor()), "out1": (str(lse.placements), lse.full_tensor())}


def _worker(rank: int, world: int, store: str, out_dir: str) -> None:
    init_rank(rank, world, store, COLLECTIVE_TIMEOUT)
    try:
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cpu", (world,))
        results = {name: _run(name, mesh) for name in CASES}
        results["compiled"] = _run_compiled(mesh)
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def dtensor_results(tmp_path_factory) -> list[dict[str, Any]]:
    return spawn_and_load(_worker, 2, tmp_path_factory.mktemp("dtensor"), SPAWN_TIMEOUT_S, "DTensor")


def _whole(name: str) -> dict[str, torch.Tensor]:
    """The case on whole tensors in this process: outputs and gradients."""
    inputs, call, differentiated = CASES[name]()
    x = {n: t.clone().requires_grad_(grad) for n, (t, _, grad) in inputs.items()}
    outs = _as_tuple(call(**x))
    outs[differentiated].backward(_randn(99, *outs[differentiated].shape))
    result = {f"out{i}": o.detach() for i, o in enumerate(outs) if isinstance(o, torch.Tensor)}
    result.update({f"grad {n}": t.grad for n, t in x.items() if t.grad is not None})
    return result


# What the strategies leave where (the ranks' outputs before any collective): a case's first
# output and, for the partial ones, a gradient.
PLACEMENTS = {
    ("flash_attn GQA heads", "out0"): "(Shard(dim=2),)",
    ("flash_attn GQA heads", "out1"): "(Shard(dim=1),)",  # softmax_lse [B, N1, S]
    ("flash_attn GQA heads", "grad sinks"): "(Shard(dim=0),)",
    ("flash_attn BNSD batch", "out0"): "(Shard(dim=0),)",
    ("flash_attn BNSD batch", "out1"): "(Replicate(),)",  # the zero [1] softmax_lse not asked for
    ("flash_attn TND heads", "out0"): "(Shard(dim=1),)",
    ("flash_attn TND heads", "out1"): "(Shard(dim=0),)",  # softmax_lse [N1, T]
    ("swa batch, shared pse and sink", "out0"): "(Shard(dim=0),)",
    ("swa batch, shared pse and sink", "grad pse"): "(Partial(sum),)",
    ("swa batch, shared pse and sink", "grad sink"): "(Partial(sum),)",
    ("floyd rows", "out2"): "(Shard(dim=2),)",
    ("floyd rows", "grad key_jk"): "(Partial(sum),)",
    ("floyd rows without a mask", "out2"): "(Shard(dim=2),)",
    ("floyd columns", "out2"): "(Shard(dim=3),)",
    ("floyd columns", "grad key_ij"): "(Partial(sum),)",
    ("block_attention_residuals tokens", "out0"): "(Shard(dim=0),)",
    ("block_attention_residuals tokens", "grad proj_weight"): "(Partial(sum),)",
    ("block_attention_residuals tokens", "grad norm_weight"): "(Partial(sum),)",
    ("compiled", "out0"): "(Shard(dim=2),)",
}


@pytest.mark.parametrize("name", list(CASES))
def test_dtensor_call_equals_the_whole_call(dtensor_results, name) -> None:
    want = _whole(name)
    for rank, results in enumerate(dtensor_results):
        got = results[name]
        assert set(got) == set(want), f"{name}, rank {rank}: {sorted(got)} vs {sorted(want)}"
        for key, (_, tensor) in got.items():
            torch.testing.assert_close(tensor, want[key], msg=lambda m: f"{name}, rank {rank}, {key}: {m}")


@pytest.mark.parametrize("name,key", list(PLACEMENTS))
def test_placements_follow_the_registrys_strategies(dtensor_results, name, key) -> None:
    for rank, results in enumerate(dtensor_results):
        assert results[name][key][0] == PLACEMENTS[name, key], f"{name}, rank {rank}, {key}"


def test_compiled_dtensor_call_equals_eager(dtensor_results) -> None:
    want = _whole("flash_attn GQA heads")
    for results in dtensor_results:
        for key in ("out0", "out1"):
            torch.testing.assert_close(results["compiled"][key][1], want[key])
