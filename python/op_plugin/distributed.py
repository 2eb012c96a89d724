"""Context-parallel ring attention over torch.distributed, built on flash_attn and flash_attn_grad.

Each rank of a process group holds one shard of the sequence (q, k and v in BSND). The K/V
shards travel once around the ring of ranks; while one block is in flight, the rank runs
``flash_attn`` (with ``return_softmax_lse=True``) of its queries against the block it holds and
merges the partial outputs by their log-sum-exp. The backward runs ``flash_attn_grad`` per
block against the global out and the global lse, keeps dq, and sends the dk/dv of each block
on around the ring until it reaches the rank that owns that block.

Partitions for causal attention (see docs/distributed.md):

- ``"contiguous"``: rank r holds chunk r of W equal chunks. The diagonal block is causal, blocks
  of earlier ranks are dense, blocks of later ranks are skipped (rank W-1 does most of the work).
- ``"zigzag"``: the sequence is cut into 2W chunks and rank r holds chunks r and 2W-1-r, so
  every rank does the same amount of work. ``shard_sequence``/``unshard_sequence`` convert.

``import op_plugin`` does not load this module; ``import op_plugin.distributed`` does, and so does
the first use of the attribute ``op_plugin.distributed``.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

__all__ = ["ring_flash_attn", "shard_sequence", "unshard_sequence", "PARTITIONS"]

PARTITIONS = ("contiguous", "zigzag")
_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

# flash_attn's mask_mode 3 is causal aligned bottom-right; with equal query and key lengths that
# is the usual top-left causal mask. The op wants the device's 2048x2048 template (contents ignored).
_CAUSAL = 3
_DENSE = 0
_TEMPLATE: torch.Tensor | None = None

# Tags keep the K/V ring and the dK/dV ring apart: both flow from rank r-1 to rank r.
_TAG_KV = 0x5A0
_TAG_DKV = 0x5A1


def _template() -> torch.Tensor:
    global _TEMPLATE
    if _TEMPLATE is None:
        _TEMPLATE = torch.triu(torch.ones(2048, 2048, dtype=torch.int8), 1)
    return _TEMPLATE


# --------------------------------------------------------------------------------------------
# Sharding helpers


def _check_partition(partition: str) -> None:
    if partition not in PARTITIONS:
        raise ValueError(f"partition must be one of {PARTITIONS}, but got {partition!r}")


def shard_sequence(x: torch.Tensor, rank: int, world_size: int, *, partition: str = "contiguous",
                   dim: int = 1) -> torch.Tensor:
    """This rank's shard of a full sequence ``x`` (sequence along ``dim``, 1 for BSND).

    contiguous: chunk ``rank`` of ``world_size``; zigzag: chunks ``rank`` and
    ``2*world_size-1-rank`` of ``2*world_size``, concatenated in that order.
    """
    _check_partition(partition)
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size) with world_size >= 1, but got rank={rank}, "
                         f"world_size={world_size}")
    parts = world_size if partition == "contiguous" else 2 * world_size
    S = x.size(dim)
    if S % parts:
        raise ValueError(f"x.size({dim}) = {S} must be divisible by {parts} for a {partition} partition "
                         f"over {world_size} ranks")
    chunks = x.chunk(parts, dim)
    if partition == "contiguous":
        return chunks[rank]
    return torch.cat([chunks[rank], chunks[parts - 1 - rank]], dim)


def unshard_sequence(shards: Sequence[torch.Tensor], *, partition: str = "contiguous", dim: int = 1) -> torch.Tensor:
    """The full sequence from every rank's shard (``shards[r]`` from rank r); inverse of shard_sequence."""
    _check_partition(partition)
    W = len(shards)
    if W == 0:
        raise ValueError("shards must not be empty")
    if partition == "contiguous":
        return torch.cat(list(shards), dim)
    for r, s in enumerate(shards):
        if s.size(dim) % 2:
            raise ValueError(f"shards[{r}].size({dim}) = {s.size(dim)} must be even for a zigzag partition")
    heads = [s.chunk(2, dim)[0] for s in shards]
    tails = [s.chunk(2, dim)[1] for s in shards]
    return torch.cat(heads + tails[::-1], dim)


# --------------------------------------------------------------------------------------------
# Which part of a block each step computes


def _block_plan(rank: int, src: int, causal: bool, partition: str, S: int) -> tuple[slice, slice, int] | None:
    """(query rows, key rows, mask_mode) of this rank's queries against the K/V shard of ``src``,
    or None when no query may see any of those keys."""
    every = slice(0, S)
    if not causal:
        return every, every, _DENSE
    if src == rank:
        # Both zigzag chunks keep their order in the sequence, so causal on the shard is exact.
        return every, every, _CAUSAL
    if partition == "contiguous":
        return (every, every, _DENSE) if src < rank else None
    half = S // 2
    if src < rank:
        # Keys: chunks src (before both of ours) and 2W-1-src (after both of ours).
        return every, slice(0, half), _DENSE
    # src > rank: both of src's chunks lie after our first chunk and before our second.
    return slice(half, S), every, _DENSE


# --------------------------------------------------------------------------------------------
# The ring


class _Ring:
    """Neighbours in the group and the asynchronous exchange of one flat buffer."""

    def __init__(self, group: dist.ProcessGroup | None) -> None:
        self.group = group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.next = (self.rank + 1) % self.world
        self.prev = (self.rank - 1) % self.world

    def shift(self, send: torch.Tensor, recv: torch.Tensor, tag: int) -> list[dist.Work]:
        """Start sending ``send`` to the next rank and receiving the previous rank's into ``recv``."""
        ops = [dist.P2POp(dist.isend, send, group=self.group, group_peer=self.next, tag=tag),
               dist.P2POp(dist.irecv, recv, group=self.group, group_peer=self.prev, tag=tag)]
        return dist.batch_isend_irecv(ops)


def _wait(works: list[dist.Work]) -> None:
    for w in works:
        w.wait()


def _pack(*ts: torch.Tensor) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in ts])


def _unpack(buf: torch.Tensor, like: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    out, start = [], 0
    for t in like:
        out.append(buf[start:start + t.numel()].view(t.shape))
        start += t.numel()
    return out


def _lse_rows(lse: torch.Tensor, rows: slice) -> torch.Tensor:
    return lse[:, :, rows].contiguous()


def _merge(out: torch.Tensor, lse: torch.Tensor, rows: slice, blk_out: torch.Tensor, blk_lse: torch.Tensor) -> None:
    """out, lse (in place, accumulation dtype) <- softmax-weighted union of themselves and a block.

    With l = logaddexp(lse, blk_lse): out = out * exp(lse - l) + blk_out * exp(blk_lse - l).
    """
    old = lse[:, :, rows]
    new = torch.logaddexp(old, blk_lse)
    # lse is [B, N, S]; out is [B, S, N, D].
    w_old = torch.exp(old - new).transpose(1, 2).unsqueeze(-1)
    w_blk = torch.exp(blk_lse - new).transpose(1, 2).unsqueeze(-1)
    o = out[:, rows]
    o.mul_(w_old).add_(blk_out.to(out.dtype) * w_blk)
    lse[:, :, rows] = new


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, causal: bool, partition: str,
             ring: _Ring) -> tuple[torch.Tensor, torch.Tensor]:
    S = q.size(1)
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    buf = _pack(k, v)
    spare = torch.empty_like(buf) if ring.world > 1 else buf
    out = lse = None
    for step in range(ring.world):
        pending = ring.shift(buf, spare, _TAG_KV) if step + 1 < ring.world else []
        src = (ring.rank - step) % ring.world
        plan = _block_plan(ring.rank, src, causal, partition, S)
        if plan is not None:
            rows, keys, mask_mode = plan
            kb, vb = _unpack(buf, (k, v))
            blk_out, blk_lse = torch.ops.op_plugin.flash_attn(
                q[:, rows], kb[:, keys], vb[:, keys], attn_mask=_template() if mask_mode else None,
                softmax_scale=scale, mask_mode=mask_mode, return_softmax_lse=True)
            if out is None:
                # Step 0 is this rank's own block, which covers every query row.
                out, lse = blk_out.to(acc), blk_lse.to(acc)
            else:
                _merge(out, lse, rows, blk_out, blk_lse.to(acc))
        _wait(pending)
        buf, spare = spare, buf
    assert out is not None and lse is not None
    return out.to(q.dtype), lse


def _backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
              dout: torch.Tensor, scale: float, causal: bool, partition: str,
              ring: _Ring) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    S = q.size(1)
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    dq = torch.zeros(q.shape, dtype=acc)
    buf = _pack(k, v)
    spare = torch.empty_like(buf) if ring.world > 1 else buf
    # dK/dV of the block held at step s travel with it: the accumulator arrives from the previous
    # rank (which held the block at step s-1), gets this rank's share added and moves on; after the
    # last step it reaches the block's owner.
    dkv = torch.zeros(k.numel() + v.numel(), dtype=acc)
    incoming: torch.Tensor | None = None
    dkv_works: list[dist.Work] = []
    for step in range(ring.world):
        pending = ring.shift(buf, spare, _TAG_KV) if step + 1 < ring.world else []
        src = (ring.rank - step) % ring.world
        plan = _block_plan(ring.rank, src, causal, partition, S)
        grads = None
        if plan is not None:
            rows, keys, mask_mode = plan
            kb, vb = _unpack(buf, (k, v))
            kb, vb = kb[:, keys], vb[:, keys]
            grads = torch.ops.op_plugin.flash_attn_grad(
                q[:, rows], kb, vb, dout[:, rows], out[:, rows], _lse_rows(lse, rows),
                attn_mask=_template() if mask_mode else None, softmax_scale=scale, mask_mode=mask_mode)
            dq[:, rows] += grads[0]
        if step > 0:
            # Both directions done: the accumulator has arrived and the one we sent last step is
            # free to be this step's landing place.
            _wait(dkv_works)
            assert incoming is not None
            dkv, incoming = incoming, dkv
        elif ring.world > 1:
            incoming = torch.empty_like(dkv)
        if grads is not None:
            dk, dv = _unpack(dkv, (k, v))
            dk[:, keys] += grads[1]
            dv[:, keys] += grads[2]
        if ring.world > 1:
            assert incoming is not None
            dkv_works = ring.shift(dkv, incoming, _TAG_DKV)
        _wait(pending)
        buf, spare = spare, buf
    if ring.world > 1:
        _wait(dkv_works)
        assert incoming is not None
        dkv = incoming
    dk, dv = _unpack(dkv, (k, v))
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class _RingFlashAttn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, causal, partition, ring):  # type: ignore[override]
        out, lse = _forward(q, k, v, scale, causal, partition, ring)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (scale, causal, partition, ring)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):  # type: ignore[override]
        q, k, v, out, lse = ctx.saved_tensors
        if dout is None:
            dout = torch.zeros_like(out)
        dq, dk, dv = _backward(q, k, v, out, lse, dout.contiguous(), *ctx.args)
        return dq, dk, dv, None, None, None, None


# --------------------------------------------------------------------------------------------
# Entry point


def _check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, partition: str,
                  softmax_scale: float | None) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a Tensor, but got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4D (B, S_local, N, D), but got {t.dim()}D with shape {tuple(t.shape)}")
        if t.device.type != "cpu":
            raise ValueError(f"{name} must be a CPU tensor (op_plugin's kernels run on the CPU), but got {t.device}")
    if q.dtype not in _DTYPES:
        raise TypeError(f"q must have dtype float16, bfloat16, float32 or float64, but got {q.dtype}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"k and v must have q's dtype {q.dtype}, but got {k.dtype} and {v.dtype}")
    (B, S, N1, D), (Bk, Sk, N2, Dk) = q.shape, k.shape
    if Bk != B or v.size(0) != B:
        raise ValueError(f"k and v must have q's batch size {B}, but got {Bk} and {v.size(0)}")
    if Sk != S or v.size(1) != S:
        raise ValueError(f"k and v must have q's local sequence length {S} (every rank holds the same "
                         f"positions of q, k and v), but got {Sk} and {v.size(1)}")
    if N2 < 1 or N1 % N2 or v.size(2) != N2:
        raise ValueError(f"k and v must have the same number of heads, dividing q's {N1}, but got "
                         f"{N2} and {v.size(2)}")
    if Dk != D:
        raise ValueError(f"k must have q's head dim {D}, but got {Dk}")
    if v.size(3) > D:
        raise ValueError(f"v's head dim must not exceed q's {D}, but got {v.size(3)}")
    if S == 0 or N1 == 0 or D == 0 or v.size(3) == 0 or B == 0:
        raise ValueError(f"q, k and v must not be empty, but got {tuple(q.shape)}, {tuple(k.shape)} and "
                         f"{tuple(v.shape)}")
    _check_partition(partition)
    if partition == "zigzag" and S % 2:
        raise ValueError(f"q's local sequence length must be even for a zigzag partition (two chunks per "
                         f"rank), but got {S}")
    if softmax_scale is not None and float(softmax_scale) == 0.0:
        # flash_attn_grad reads 0.0 as 1/sqrt(D), so forward and backward would disagree.
        raise ValueError("softmax_scale must not be 0.0 (flash_attn_grad reads 0.0 as 1/sqrt(D)); pass None "
                         "for 1/sqrt(D)")


def _call_signature(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, partition: str,
                    scale: float) -> torch.Tensor:
    """What every rank of the ring must agree on, as one float64 vector (each entry exact).

    Entry 0 is 1 for a call that passed its own checks; _REFUSED (all zeros) stands for one that did not.
    """
    return torch.tensor([1, *q.shape, *k.shape[2:], v.size(3), _DTYPES.index(q.dtype), causal,
                         PARTITIONS.index(partition), scale], dtype=torch.float64)


_REFUSED = torch.zeros(12, dtype=torch.float64)


def _describe(sig: list[float]) -> str:
    _, B, S, N1, D, N2, _, Dv, dtype, causal, partition, scale = sig
    return (f"q ({int(B)}, {int(S)}, {int(N1)}, {int(D)}), k ({int(B)}, {int(S)}, {int(N2)}, {int(D)}), "
            f"v ({int(B)}, {int(S)}, {int(N2)}, {int(Dv)}), {_DTYPES[int(dtype)]}, causal={bool(causal)}, "
            f"partition={PARTITIONS[int(partition)]!r}, softmax_scale={scale:g}")


def _check_ranks_agree(sig: torch.Tensor, ring: _Ring) -> None:
    """Raises on every rank when a rank refused its arguments or the ranks' calls differ.

    The ring exchanges fixed-size buffers, so a rank with other shapes would make its neighbour's
    receive fail inside gloo (an abort) or wait forever, and a rank that raised on its own
    arguments would leave the others waiting; one small all_gather per call turns both into errors
    that every rank raises. A rank passing _REFUSED raises its own error after this returns.
    """
    if ring.world == 1:
        return
    sigs = [torch.empty_like(sig) for _ in range(ring.world)]
    dist.all_gather(sigs, sig, group=ring.group)
    if sig is _REFUSED:
        return
    rows = [s.tolist() for s in sigs]
    refused = [r for r in range(ring.world) if rows[r][0] == 0]
    if refused:
        raise ValueError(f"group rank {refused[0]} refused its ring_flash_attn arguments (its own error says why); "
                         f"every rank of the group must make a valid call")
    differ = [r for r in range(ring.world) if rows[r] != rows[0]]
    if differ:
        raise ValueError(f"every rank of the group must call ring_flash_attn with the same shapes, dtype, causal, "
                         f"partition and softmax_scale, but group rank 0 passed {_describe(rows[0])} and group "
                         f"rank {differ[0]} passed {_describe(rows[differ[0]])}")


def ring_flash_attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                    softmax_scale: float | None = None, partition: str = "contiguous",
                    group: dist.ProcessGroup | None = None,
                    return_softmax_lse: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Attention of this rank's queries over the keys of every rank in ``group`` (a ring).

    q: [B, S_local, N1, D], k: [B, S_local, N2, D], v: [B, S_local, N2, Dv] (BSND, N1 % N2 == 0,
    Dv <= D), this rank's shard of the sequence as ``shard_sequence(x, rank, world, partition=...)``
    cuts it; every rank passes the same shapes. ``causal`` masks keys after the query's position in
    the full sequence; ``partition`` ("contiguous" or "zigzag") says which positions each rank holds
    (it matters only when causal). ``softmax_scale`` None means 1/sqrt(D). Returns this rank's
    rows of the output ([B, S_local, N1, Dv], q's dtype, or autocast's) and, with ``return_softmax_lse``, their
    global log-sum-exp ([B, N1, S_local], float32; float64 for float64 inputs; no gradient).
    Autograd works: dq, dk and dv are this rank's shards of the full gradients.

    Under ``torch.autocast("cpu")`` q, k and v are first cast to autocast's dtype, as flash_attn
    casts them. Every rank of the group must call it with the same shapes, dtype, causal, partition
    and softmax_scale (the ring steps are collective); a call where they differ, or where one rank's
    arguments are refused, raises ValueError on every rank (that rank raises its own error).
    """
    q, k, v = _autocast(q, k, v)
    if not dist.is_available() or not dist.is_initialized():
        _check_inputs(q, k, v, partition, softmax_scale)  # argument errors come first, as with a group
        raise RuntimeError("ring_flash_attn needs torch.distributed initialized (dist.init_process_group)")
    ring = _Ring(group)
    if ring.rank < 0:
        raise ValueError("group must contain this rank (dist.get_rank(group) is -1)")
    try:
        _check_inputs(q, k, v, partition, softmax_scale)
    except (TypeError, ValueError):
        _check_ranks_agree(_REFUSED, ring)  # the other ranks raise too instead of waiting in the ring
        raise
    scale = q.size(3) ** -0.5 if softmax_scale is None else float(softmax_scale)
    _check_ranks_agree(_call_signature(q, k, v, bool(causal), partition, scale), ring)
    with torch.autocast("cpu", enabled=False):  # the ring's own ops run in the dtype chosen above
        out, lse = _RingFlashAttn.apply(q, k, v, scale, bool(causal), partition, ring)
    return (out, lse) if return_softmax_lse else out


def _autocast(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Under torch.autocast on the CPU, q, k and v in autocast's dtype (float64 ones stay), as
    flash_attn's autocast rule casts them: the ring then runs forward and backward in that dtype,
    and the casts (outside the autograd Function) take the gradients back to the inputs' dtypes."""
    if not torch.is_autocast_enabled("cpu"):
        return q, k, v
    to = torch.get_autocast_dtype("cpu")
    return tuple(t.to(to) if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64
                 else t for t in (q, k, v))
