"""flash_attn on a paged KV cache (layout_kv PA_BBND with block_table) against what a PyTorch user
writes without a paged kernel: gather each sequence's blocks through the table (an index, which
copies), then SDPA with a key-length mask and enable_gqa.

- Decode: 8 sequences of 512 to 4,096 cached keys (18,432 in all), one query row each, N1=32 on
  N2=8 kv heads, D=128, blocks of 16 and of 128 keys. The row kernels read the cache in place
  through the table; the throughput is the cache bytes the call reads per second, against the
  machine's copy bandwidth measured in the same run (a copy reads and writes). A second row
  compares the paged call with the same call on a dense, contiguous cache (what the paging costs),
  a third with k and v the halves of one [blocks, 2, ...] allocation (strided views, not copied).
- Chunked prefill: 16 new query rows per sequence, causal, on the same cache: the tiles' dataflow,
  which gathers the cache into the workspace first; useful GFLOP/s.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

import op_plugin
from op_plugin.reference import paged_cache as paged_cache_of

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
LENGTHS = [512, 1024, 1536, 2048, 2560, 3072, 3584, 4096]
TEMPLATE = torch.triu(torch.ones(2048, 2048, dtype=torch.int8), 1)
N1, N2, D = 32, 8, 128


def paged_cache(lengths: list[int], block_size: int, dtype: torch.dtype):
    """(k cache, v cache, block_table, seqused_kv, dense k, dense v): the blocks shuffled, as an
    allocator that hands out free blocks leaves them; dense [B, max, N2, D] holds the same keys."""
    g = torch.Generator().manual_seed(block_size)
    k_dense = torch.zeros(len(lengths), max(lengths), N2, D, dtype=dtype)
    v_dense = torch.zeros_like(k_dense)
    for b, n in enumerate(lengths):
        k_dense[b, :n] = torch.randn(n, N2, D, generator=g).to(dtype)
        v_dense[b, :n] = torch.randn(n, N2, D, generator=g).to(dtype)
    k_cache, v_cache, table = paged_cache_of([k_dense[b, :n] for b, n in enumerate(lengths)],
                                             [v_dense[b, :n] for b, n in enumerate(lengths)], block_size, generator=g)
    return k_cache, v_cache, table, torch.tensor(lengths, dtype=torch.int32), k_dense, v_dense


def calls(lengths: list[int], block_size: int, rows_q: int, dtype: torch.dtype, halves: bool = False):
    """(paged op_plugin call, the same on the dense cache, gather + SDPA). ``halves``: k and v are
    the two halves of one [blocks, 2, block_size, N2, D] cache (a layout some servers use), strided
    views flash_attn reads in place (registry key strided:)."""
    k_cache, v_cache, table, used, k_dense, v_dense = paged_cache(lengths, block_size, dtype)
    if halves:
        both = torch.stack([k_cache, v_cache], 1)
        k_cache, v_cache = both[:, 0], both[:, 1]
    B, S = len(lengths), max(lengths)
    q = torch.randn(B, rows_q, N1, D, generator=torch.Generator().manual_seed(1)).to(dtype)
    causal = rows_q > 1
    kw = dict(seqused_kv=used, softmax_scale=D ** -0.5, mask_mode=3 if causal else 0,
              attn_mask=TEMPLATE if causal else None)
    # key j of sequence b is visible to row i when j < its length and, causal, j <= i + length - rows_q
    i = torch.arange(rows_q).view(1, 1, -1, 1)
    j = torch.arange(S).view(1, 1, 1, -1)
    n = used.view(-1, 1, 1, 1)
    mask = (j < n) & ((j <= i + n - rows_q) if causal else True)
    qt = q.transpose(1, 2)

    def paged():
        return op_plugin.flash_attn(q, k_cache, v_cache, block_table=table, layout_kv="PA_BBND", **kw)

    def dense():
        return op_plugin.flash_attn(q, k_dense, v_dense, **kw)

    def gather_sdpa():
        k = k_cache[table.long()].flatten(1, 2)[:, :S].transpose(1, 2)  # [B, N2, S, D]
        v = v_cache[table.long()].flatten(1, 2)[:, :S].transpose(1, 2)
        return F.scaled_dot_product_attention(qt, k, v, attn_mask=mask, enable_gqa=True, scale=D ** -0.5)

    return paged, dense, gather_sdpa


def run(quick: bool = False) -> list[dict[str, object]]:
    from common import gemm_peak_gflops, interleaved_medians, memcpy_bandwidth_gbs

    lengths = [n // 8 for n in LENGTHS] if quick else LENGTHS
    copy_gbs = memcpy_bandwidth_gbs()
    rows = []
    for name, dtype in DTYPES.items():
        cache_bytes = sum(lengths) * N2 * 2 * D * dtype.itemsize
        for block_size in (16, 128):
            paged, dense, peer = calls(lengths, block_size, 1, dtype)
            t_paged, t_dense, t_peer = interleaved_medians([paged, dense, peer], [21, 21, 11])
            work = f"B={len(lengths)} keys={sum(lengths)} N={N1}/{N2} D={D} block {block_size}"
            rows.append({"workload": f"flash_attn paged decode {work} vs gather+SDPA", "dtype": name,
                         "op_plugin_s": t_paged, "pytorch_s": t_peer, "speedup": t_peer / t_paged,
                         "throughput": f"cache read {cache_bytes / t_paged / 1e9:.1f} vs "
                                       f"{cache_bytes / t_peer / 1e9:.1f} GB/s (copy {copy_gbs:.1f})",
                         "peak_extra_mb": "-"})
            rows.append({"workload": "  the same on a dense cache (time dense / paged)", "dtype": name,
                         "op_plugin_s": t_paged, "pytorch_s": t_dense, "speedup": t_dense / t_paged,
                         "throughput": f"dense cache read {cache_bytes / t_dense / 1e9:.1f} GB/s",
                         "peak_extra_mb": "-"})
            halves = calls(lengths, block_size, 1, dtype, halves=True)[0]
            t_paged, t_halves = interleaved_medians([paged, halves], [15, 15])
            rows.append({"workload": "  k, v halves of one [blocks, 2, ...] cache (time halves / contiguous)",
                         "dtype": name, "op_plugin_s": t_paged, "pytorch_s": t_halves,
                         "speedup": t_halves / t_paged, "throughput": "strided views read in place",
                         "peak_extra_mb": "-"})
        peak = gemm_peak_gflops(dtype)
        paged, dense, peer = calls(lengths, 16, 16, dtype)
        t_paged, t_dense, t_peer = interleaved_medians([paged, dense, peer], [7, 7, 5])
        flops = 4.0 * N1 * D * sum(16 * n - 16 * 15 // 2 for n in lengths)
        rows.append({"workload": "flash_attn paged chunked prefill 16 rows causal, block 16 vs gather+SDPA",
                     "dtype": name, "op_plugin_s": t_paged, "pytorch_s": t_peer, "speedup": t_peer / t_paged,
                     "throughput": f"{flops / t_paged / 1e9:.0f} vs {flops / t_peer / 1e9:.0f} useful GFLOP/s "
                                   f"(GEMM peak {peak:.0f}); dense cache {t_dense / t_paged:.2f}x the paged time",
                     "peak_extra_mb": "-"})
    return rows
