"""Composite PyTorch implementations of the ops, shipped with the wheel: the references of the
generated tests (the registry's `reference:` entries; `op-plugin test` runs them from an installed
wheel) and of the hand-written, compat and differential tests, and the baselines of the demo and
benchmarks. Each is computed in its inputs' dtype: float64 inputs give the reference, low-precision
inputs the same-dtype computation whose error the budget allows twice.

block_attention_residuals (SPEC §4) and fused_floyd_attention are the composites as the sources
write them (Floyd's with the 5-D score tensor materialised: the benchmarks' baseline).

flash_attn_reference (SPEC §1) works per sequence: it cuts each batch out of the layout (BSND,
BNSD or the cu_seqlens ranges of TND), builds the explicit bottom-right boolean mask of the mode
over the actual lengths (seqused), and computes softmax attention with GQA by repeating the KV
heads. Rows with nothing to attend to are fixed by hand (out 0, lse +inf, no gradient). With
use_sdpa it runs torch SDPA on the same mask (the same-dtype baseline; einsum when sinks are
given, which SDPA cannot express).

swa_reference (SPEC §2) materialises the score matrix per sequence, for every layout, sparse_mode
0 (top-left band, full masks) and 4 (bottom-right band, template), pse, sink and a dropout
keep-mask; swa_keep_mask is that mask as csrc/kernels/common/counter_rng.h documents it.

floyd_reference (SPEC §3) is op-plugin's golden formulation of fused_floyd_attention.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor


def block_attention_residuals(partial_block: Tensor, block_res: Tensor, proj_weight: Tensor, norm_weight: Tensor,
                              norm_eps: float = 1e-6) -> tuple[Tensor, Tensor, Tensor]:
    """SPEC §4 forward, as the Attention Residuals README writes it; returns (hidden, inv_norm, probs).

    Computed in the inputs' dtype (the "same-dtype plain PyTorch computation").
    """
    v = torch.cat([block_res, partial_block.unsqueeze(1)], dim=1)  # [T, N+1, H], partial last
    inv = torch.rsqrt(v.pow(2).mean(-1) + norm_eps)  # [T, N+1]
    k = v * inv.unsqueeze(-1) * norm_weight
    logits = k @ proj_weight.reshape(-1)
    probs = logits.softmax(-1)
    hidden = (probs.unsqueeze(-1) * v).sum(1)
    return hidden, inv, probs


def fused_floyd_attention(query_ik: Tensor, key_ij: Tensor, value_ij: Tensor, key_jk: Tensor, value_jk: Tensor,
                          atten_mask: Tensor | None = None, scale_value: float = 1.0) -> Tensor:
    """SPEC §3 forward with the [B,H,N,M,K] score tensor materialised, as the golden writes it;
    a masked logit gets -FLT_MAX added (a fully masked row: uniform weights). Returns attention_out."""
    scores = scale_value * (torch.einsum("bhnmd,bhnkd->bhnmk", query_ik, key_ij) +
                            torch.einsum("bhnmd,bhkmd->bhnmk", query_ik, key_jk))
    if atten_mask is not None:
        b, _, n, _, k = atten_mask.shape
        scores = scores + atten_mask.view(b, 1, n, 1, k).to(scores.dtype) * torch.finfo(torch.float32).min
    probs = scores.softmax(-1)
    return torch.einsum("bhnmk,bhnkd->bhnmd", probs, value_ij) + torch.einsum("bhnmk,bhkmd->bhnmd", probs, value_jk)


UNBOUNDED = 2147483647
FLT_MAX = torch.finfo(torch.float32).max


# ---- flash_attn / flash_attn_grad ---------------------------------------------------------------

def fa_segments(t: torch.Tensor, layout: str, cu: torch.Tensor | None) -> list[torch.Tensor]:
    """Per-batch [rows, N, D] views of a layout tensor."""
    if layout == "TND":
        return [t[int(cu[b]):int(cu[b + 1])] for b in range(cu.numel() - 1)]
    if layout == "BSND":
        return list(t.unbind(0))
    return [x.transpose(0, 1) for x in t.unbind(0)]


def allowed_mask(rows_q: int, rows_kv: int, sq: int, skv: int, mask_mode: int, win_left: int,
                 win_right: int) -> torch.Tensor:
    """[rows_q, rows_kv] True = attend: bottom-right aligned to the actual lengths (sq, skv)."""
    i = torch.arange(rows_q).view(-1, 1)
    j = torch.arange(rows_kv).view(1, -1)
    ok = (i < sq) & (j < skv)
    o = skv - sq
    if mask_mode == 3:
        ok &= j <= i + o
    elif mask_mode == 4:
        if win_left >= 0:
            ok &= j >= i + o - win_left
        if win_right >= 0:
            ok &= j <= i + o + win_right
    return ok


def _attend(qb, kb, vb, ok, scale, sinks, use_sdpa):
    """One sequence: qb [Rq, N1, D], kb [Rk, N2, D], vb [Rk, N2, Dv] -> out [Rq, N1, Dv], lse [N1, Rq]."""
    N1, N2 = qb.shape[1], kb.shape[1]
    valid = ok.any(-1)  # rows with something to attend to
    ok = ok | ~valid.view(-1, 1)  # empty rows attend everywhere and are zeroed below: no NaN
    if use_sdpa and sinks is None:
        out = F.scaled_dot_product_attention(qb.transpose(0, 1), kb.transpose(0, 1), vb.transpose(0, 1),
                                             attn_mask=ok, scale=scale, enable_gqa=True).transpose(0, 1)
        lse = None
    else:
        kr = kb.repeat_interleave(N1 // N2, dim=1)
        vr = vb.repeat_interleave(N1 // N2, dim=1)
        s = scale * torch.einsum("ind,jnd->nij", qb, kr)
        s = s.masked_fill(~ok, float("-inf"))
        if sinks is not None:  # a per-head logit, not scaled, in the denominator only
            s = torch.cat([s, sinks.to(s.dtype).view(N1, 1, 1).expand(N1, s.shape[1], 1)], -1)
        lse = torch.logsumexp(s, -1)
        p = torch.exp(s - lse.unsqueeze(-1))[..., :kb.shape[0]]
        out = torch.einsum("nij,jnd->ind", p, vr)
        lse = torch.where(valid.view(1, -1), lse, torch.full_like(lse, float("inf")))
    return out * valid.view(-1, 1, 1).to(out.dtype), lse


def paged_sequences(cache: torch.Tensor, block_table: torch.Tensor, seqused_kv: torch.Tensor,
                    layout_kv: str) -> list[torch.Tensor]:
    """The [seqused_kv[b], N, D] keys (or values) of each sequence of a paged cache: key j of
    sequence b is row j % block_size of block block_table[b][j // block_size]."""
    rows = cache if layout_kv == "PA_BBND" else cache.transpose(1, 2)  # [blocks, block_size, N, D]
    block_size = rows.shape[1]
    out = []
    for b in range(block_table.shape[0]):
        j = torch.arange(int(seqused_kv[b]))
        out.append(rows[block_table[b].long()[j // block_size], j % block_size])
    return out


def paged_cache(seqs_k: list[torch.Tensor], seqs_v: list[torch.Tensor], block_size: int, layout_kv: str = "PA_BBND",
                generator: torch.Generator | None = None, shared_first_block: bool = False, spare_blocks: int = 0,
                strided: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(k cache, v cache, block_table) holding each sequence's [rows, N, D] keys and values, the
    inverse of paged_sequences: the blocks in a random order (as a block allocator leaves them),
    ``spare_blocks`` more that no sequence owns; rows no sequence owns are NaN and table entries
    past a sequence's blocks -1, so a call that reads either shows it. ``shared_first_block``:
    sequence 1 reuses sequence 0's first block (a cached prefix; both must hold the same keys
    there). ``strided``: k and v are the two halves of one [blocks, 2, ...] allocation."""
    own = [-(-len(s) // block_size) for s in seqs_k]
    shared = shared_first_block and len(seqs_k) > 1 and min(own[:2]) > 0
    order = torch.randperm(sum(own) - shared + spare_blocks, generator=generator).tolist()
    table = torch.full((len(seqs_k), max(own, default=0) + 1), -1, dtype=torch.int32)
    n, dk, dv = seqs_k[0].shape[1], seqs_k[0].shape[2], seqs_v[0].shape[2]
    whole = torch.full((len(order), 2, block_size, n, max(dk, dv)), float("nan"), dtype=seqs_k[0].dtype)
    k_cache, v_cache = whole[:, 0, ..., :dk], whole[:, 1, ..., :dv]
    for b, (sk, sv) in enumerate(zip(seqs_k, seqs_v)):
        for i in range(own[b]):
            table[b, i] = int(table[0, 0]) if shared and b == 1 and i == 0 else order.pop()
            rows = slice(i * block_size, min((i + 1) * block_size, len(sk)))
            k_cache[int(table[b, i]), : rows.stop - rows.start] = sk[rows]
            v_cache[int(table[b, i]), : rows.stop - rows.start] = sv[rows]
    if layout_kv == "PA_BNBD":  # the same blocks, heads before rows
        k_cache, v_cache = (c.transpose(1, 2) for c in (k_cache, v_cache))
    if not strided:
        k_cache, v_cache = k_cache.contiguous(), v_cache.contiguous()
    elif layout_kv == "PA_BNBD":
        k_cache, v_cache = (torch.stack([c.contiguous()] * 2, 1)[:, 0] for c in (k_cache, v_cache))
    return k_cache, v_cache, table


def flash_attn_reference(q, k, v, *, layout_q="BSND", layout_kv=None, layout_out=None, block_table=None,
              cu_seqlens_q=None, cu_seqlens_kv=None, seqused_q=None, seqused_kv=None, sinks=None,
              softmax_scale=1.0, mask_mode=0, win_left=-1, win_right=-1, use_sdpa=False, **_ignored):
    """out (in layout_out) and lse ((B, N1, S) or (N1, T)) of the op, differentiable in q, k, v.
    A paged cache (block_table, layout_kv PA_BBND / PA_BNBD) is read through paged_sequences."""
    layout_out = layout_out or layout_q
    qs = fa_segments(q, layout_q, cu_seqlens_q)
    if block_table is not None:
        ks = paged_sequences(k, block_table, seqused_kv, layout_kv)
        vs = paged_sequences(v, block_table, seqused_kv, layout_kv)
    else:
        ks = fa_segments(k, layout_q, cu_seqlens_kv)
        vs = fa_segments(v, layout_q, cu_seqlens_kv)
    outs, lses = [], []
    for b, (qb, kb, vb) in enumerate(zip(qs, ks, vs)):
        sq = qb.shape[0] if seqused_q is None else min(qb.shape[0], int(seqused_q[b]))
        skv = kb.shape[0] if seqused_kv is None else min(kb.shape[0], int(seqused_kv[b]))
        ok = allowed_mask(qb.shape[0], kb.shape[0], sq, skv, mask_mode, win_left, win_right)
        out, lse = _attend(qb, kb, vb, ok, softmax_scale, sinks, use_sdpa)
        outs.append(out)
        lses.append(lse)
    if layout_q == "TND":
        return torch.cat(outs, 0), (None if use_sdpa and sinks is None else torch.cat(lses, 1))
    out = torch.stack(outs, 0)  # [B, S, N, Dv]
    if layout_out == "BNSD":
        out = out.transpose(1, 2)
    return out, (None if use_sdpa and sinks is None else torch.stack(lses, 0))


# ---- swa_forward / swa_backward ------------------------------------------------------------------

def from_bnsd(t: torch.Tensor, layout: str) -> torch.Tensor:
    B, N, S, D = t.shape
    if layout == "BNSD":
        return t.contiguous()
    if layout == "BSND":
        return t.transpose(1, 2).contiguous()
    if layout == "BSH":
        return t.transpose(1, 2).reshape(B, S, N * D).contiguous()
    assert layout == "SBH"
    return t.permute(2, 0, 1, 3).reshape(S, B, N * D).contiguous()


def to_bnsd(t: torch.Tensor, layout: str, heads: int) -> torch.Tensor:
    if layout == "BNSD":
        return t
    if layout == "BSND":
        return t.transpose(1, 2)
    if layout == "BSH":
        B, S, H = t.shape
        return t.view(B, S, heads, H // heads).transpose(1, 2)
    S, B, H = t.shape
    return t.view(S, B, heads, H // heads).permute(1, 2, 0, 3)


def _swa_segments(t: torch.Tensor, layout: str, heads: int, cumulative) -> list[torch.Tensor]:
    """Per-sequence [N, S, D] views."""
    if layout == "TND":
        starts = [0, *cumulative[:-1]]
        return [t[a:b].transpose(0, 1) for a, b in zip(starts, cumulative)]
    return list(to_bnsd(t, layout, heads).unbind(0))


def swa_masked(sq: int, skv: int, sparse_mode: int, pre: int, nxt: int, mask_bnss) -> torch.Tensor:
    """[N or 1, sq, skv] True = masked, for one sequence (SPEC §2.4)."""
    i = torch.arange(sq).view(-1, 1)
    j = torch.arange(skv).view(1, -1)
    if mask_bnss is None:  # no atten_mask: sparse_mode and pre/next have no effect
        return torch.zeros(1, sq, skv, dtype=torch.bool)
    if sparse_mode == 0:  # the mask, and a band from the top-left corner
        return mask_bnss | ((j > i + nxt) | (j < i - pre)).unsqueeze(0)
    o = skv - sq  # sparse_mode 4: a band from the bottom-right corner; the template's contents are ignored
    return ((j > i + o + nxt) | (j < i + o - pre)).unsqueeze(0)


def swa_reference(query, key, value, head_num, layout, *, pse=None, atten_mask=None, scale=1.0, pre_tockens=UNBOUNDED,
              next_tockens=UNBOUNDED, actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0, sink=None,
              keep_mask=None, keep_prob=1.0, seed004_rule=True, **_ignored):
    """attention_out (in the layout), softmax_max and softmax_sum ([B, N, Sq] / [T, N]) of the op.

    keep_mask: the dropout keep-mask per sequence ([N, Sq, Skv] booleans), read from the op."""
    if seed004_rule and layout == "TND" and query.shape[0] > 16384:  # seed 004: forced sparse_mode 4
        sparse_mode = 4
    N = head_num
    qs = _swa_segments(query, layout, N, actual_seq_qlen)
    nkv = key.shape[1] if layout in ("TND", "BNSD") else (key.shape[2] if layout == "BSND" else None)
    D = query.shape[-1] if layout not in ("BSH", "SBH") else query.shape[2] // N
    nkv = nkv or key.shape[2] // D
    ks = _swa_segments(key, layout, nkv, actual_seq_kvlen)
    vs = _swa_segments(value, layout, nkv, actual_seq_kvlen)
    outs, maxes, sums = [], [], []
    for b, (qb, kb, vb) in enumerate(zip(qs, ks, vs)):
        sq, skv = qb.shape[1], kb.shape[1]
        kr, vr = kb.repeat_interleave(N // nkv, 0), vb.repeat_interleave(N // nkv, 0)
        logits = qb @ kr.transpose(1, 2)
        if pse is not None:
            pb = pse[b if pse.shape[0] > 1 else 0]
            logits = logits + (pb[:, :sq, :skv] if layout == "TND" else pb)
        logits = scale * logits
        mask_b = None
        if atten_mask is not None:
            m = atten_mask.bool()
            mask_b = m[:sq, :skv].unsqueeze(0) if m.dim() == 2 else m[b if m.shape[0] > 1 else 0]
        dead = swa_masked(sq, skv, sparse_mode, pre_tockens, next_tockens, mask_b).expand(N, sq, skv)
        logits = logits.masked_fill(dead, float("-inf"))
        # A row with no key to attend to is empty, sink or not (Decision 5, as flash_attn)
        empty = dead.all(-1) if skv else torch.ones(N, sq, dtype=torch.bool)
        if sink is not None:
            logits = torch.cat([logits, sink.to(logits.dtype).view(N, 1, 1).expand(N, sq, 1)], -1)
        if logits.shape[-1] == 0:
            logits = torch.zeros(N, sq, 1, dtype=logits.dtype)
        safe = logits.masked_fill(empty.unsqueeze(-1), 0.0)
        mx = safe.max(-1).values
        sm = torch.exp(safe - mx.unsqueeze(-1)).sum(-1)
        p = (torch.exp(safe - mx.unsqueeze(-1)) / sm.unsqueeze(-1))[..., :skv] if skv else safe[..., :0]
        if keep_mask is not None:
            p = p * keep_mask[b] / keep_prob
        out = (p @ vr).masked_fill(empty.unsqueeze(-1), 0.0)
        outs.append(out)
        maxes.append(torch.where(empty, -FLT_MAX, mx.double()))  # statistics compared in float64
        sums.append(torch.where(empty, FLT_MAX, sm.double()))
    if layout == "TND":
        return torch.cat([o.transpose(0, 1) for o in outs]), torch.cat([m.t() for m in maxes]), \
            torch.cat([s.t() for s in sums])
    return from_bnsd(torch.stack(outs), layout), torch.stack(maxes), torch.stack(sums)


_M32 = 0xFFFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _lowbias32(x: torch.Tensor) -> torch.Tensor:
    """C. Wellons' lowbias32 on int64 tensors holding uint32 values (products wrap in int64, but
    their low 32 bits, the only ones kept, are exact)."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _M32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _M32
    return x ^ (x >> 16)


def swa_keep_mask(seed: int, offset: int, keep_prob: float, heads: int, rows_q, rows_kv) -> list[torch.Tensor]:
    """The dropout keep-mask of swa_forward/swa_backward per sequence ([heads, Sq_b, Skv_b] bools),
    from its documented definition (counter_rng.h): element e, its index in row-major
    [B, N, Sq, Skv] order (batches concatenated for TND), is kept iff
    h(h(lo32(e) ^ k0) ^ hi32(e) ^ k1) >> 8 < ceil(keep_prob * 2^24), with
    (k0, k1) = splitmix64(seed ^ splitmix64(offset))."""
    key = _splitmix64((seed ^ _splitmix64(offset % 2**64)) & _M64)
    k0, k1 = key & _M32, key >> 32
    threshold = math.ceil(keep_prob * 16777216.0)
    masks, start = [], 0
    for sq, skv in zip(rows_q, rows_kv):
        e = start + torch.arange(heads * sq * skv, dtype=torch.int64)
        bits = _lowbias32(_lowbias32((e & _M32) ^ k0) ^ (e >> 32) ^ k1)
        masks.append(((bits >> 8) < threshold).view(heads, sq, skv))
        start += heads * sq * skv
    return masks


# ---- fused_floyd_attention ---------------------------------------------------------------------

FLOYD_MASKED = -4e9  # op-plugin's golden adds this to a masked raw score, before scaling


def floyd_masked_logit(scale: float, dtype: torch.dtype) -> float:
    """The logit of a masked key, as the golden gets it: in float32, raw - 4e9 rounds to -4e9 for
    |raw| < 128, so a masked logit is -4e9 * scale whatever the raw score. float16 cannot hold
    it; -3e4 stays finite there, which keeps the same-dtype computation free of inf - inf."""
    return -3e4 if dtype == torch.float16 else FLOYD_MASKED * scale


def floyd_reference(q, k1, v1, k2, v2, mask, scale):
    """The golden's formulas, in the inputs' dtype (float64 for the reference).

    A masked logit has the value floyd_masked_logit(scale): a fully masked row gets uniform weights.
    Its gradient flows through the logit as the golden backward computes it (dS is not zeroed
    where masked), as if -4e9 had been added: the straight-through form below.
    """
    s = scale * (torch.einsum("bhnmd,bhnkd->bhnmk", q, k1) + torch.einsum("bhnmd,bhkmd->bhnmk", q, k2))
    if mask is not None:
        m = mask.view(mask.shape[0], 1, mask.shape[2], 1, mask.shape[4]).to(s.dtype)
        s = s + m * (floyd_masked_logit(scale, s.dtype) - s).detach()
    p = s.softmax(-1)
    return torch.einsum("bhnmk,bhnkd->bhnmd", p, v1) + torch.einsum("bhnmk,bhkmd->bhnmd", p, v2)


# ---- the registry's reference: keys (docs/generated_tests.md): the op's arguments, the op's outputs ----

def flash_attn_op_reference(q, k, v, *, return_softmax_lse=False, **options):
    """flash_attn's (attn_out, softmax_lse) from flash_attn_reference; softmax_lse is the op's
    zero [1] without return_softmax_lse."""
    out, lse = flash_attn_reference(q, k, v, **options)
    return out, (lse if return_softmax_lse else torch.zeros(1, dtype=q.dtype))


def flash_attn_metadata_reference(num_heads_q, num_heads_kv, head_dim, *, cu_seqlens_q=None, seqused_q=None,
                                  batch_size=None, **_ignored):
    """The documented int32 zero schedule (SPEC §1.7): roundup(((36 + 72) * B * N2 + 1) * 16, 4096)."""
    B = seqused_q.numel() if seqused_q is not None else (
        cu_seqlens_q.numel() - 1 if cu_seqlens_q is not None else batch_size)
    return torch.zeros(math.ceil(((36 + 72) * B * num_heads_kv + 1) * 16 / 4096) * 4096, dtype=torch.int32)


def swa_forward_op_reference(query, key, value, head_num, input_layout, *, scale=1.0, **options):
    """swa_forward's (attention_out, softmax_max, softmax_sum): the statistics repeated 8 times."""
    out, mx, sm = swa_reference(query, key, value, head_num, input_layout.upper(), scale=scale, **options)
    return out, mx.unsqueeze(-1).expand(*mx.shape, 8), sm.unsqueeze(-1).expand(*sm.shape, 8)
