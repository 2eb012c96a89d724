"""Flash attention against its other peers (issue 3): FlexAttention on a sliding window,
varlen TND against padded SDPA, thread scaling, and peak memory at S=32768.

- Window S=8192, W=512, D=64, forward: flash_attn mask_mode 4 against FlexAttention compiled
  with a sliding-window block mask (the best CPU peer for windows; it has no CPU backward).
- TND: 8 causal sequences of mixed lengths summing to 8192, N=8, D=128, forward and
  forward+backward, against SDPA on the sequences padded to the longest with a boolean mask.
- Threads: the dense B=1 N=8 S=2048 D=128 float32 forward+backward on 2 threads against 1
  thread of the same op (the "PyTorch" column is op_plugin on 1 thread).
- Memory: peak extra RSS of one causal float32 forward+backward at N=8, D=128 for S=8192 and
  S=32768 (fresh processes): linear in S means about 4x, an S x S buffer would be 16x.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

import op_plugin

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
TEMPLATE = torch.triu(torch.ones(2048, 2048, dtype=torch.int8), 1)
TND_LENGTHS = [256, 512, 768, 1024, 1280, 1536, 1024, 1792]


def _rand(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(len(shape))).to(dtype)


def flex_window(S: int, W: int, D: int, dtype: torch.dtype):
    """(op_plugin call, FlexAttention call) on the same BNSD inputs, forward only."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    q, k, v = (_rand(1, 8, S, D, dtype=dtype) for _ in range(3))
    scale = D ** -0.5

    def sliding(b, h, i, j):
        return (j <= i) & (i - j < W)

    block_mask = create_block_mask(sliding, B=None, H=None, Q_LEN=S, KV_LEN=S, device="cpu")
    flex = torch.compile(flex_attention, fullgraph=True)
    kw = dict(layout_q="BNSD", layout_kv="BNSD", layout_out="BNSD", mask_mode=4, attn_mask=TEMPLATE,
              win_left=W - 1, win_right=0, softmax_scale=scale)
    return (lambda: op_plugin.flash_attn(q, k, v, **kw)), (lambda: flex(q, k, v, block_mask=block_mask, scale=scale))


def tnd_vs_padded(lengths: list[int], D: int, dtype: torch.dtype, backward: bool):
    N, T, S = 8, sum(lengths), max(lengths)
    q, k, v, dout = (_rand(T, N, D, dtype=dtype) for _ in range(4))
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    kw = dict(cu_seqlens_q=cu, cu_seqlens_kv=cu, layout_q="TND", layout_kv="TND", layout_out="TND",
              mask_mode=3, attn_mask=TEMPLATE, softmax_scale=D ** -0.5, max_seqlen_q=S, max_seqlen_kv=S)

    def ours():
        out, lse = op_plugin.flash_attn(q, k, v, return_softmax_lse=backward, **kw)
        if backward:
            op_plugin.flash_attn_grad(q, k, v, dout, out, lse, **kw)

    def pad(t: torch.Tensor) -> torch.Tensor:  # [T, N, D] -> [B, N, S, D], zeros past each length
        out = t.new_zeros(len(lengths), N, S, t.shape[-1])
        for b, (a, n) in enumerate(zip(cu[:-1].tolist(), lengths)):
            out[b, :, :n] = t[a:a + n].transpose(0, 1)
        return out

    qp, kp, vp, dp = (pad(t) for t in (q, k, v, dout))
    i = torch.arange(S).view(-1, 1)
    j = torch.arange(S).view(1, -1)
    n = torch.tensor(lengths).view(-1, 1, 1)
    # causal within each sequence; padded query rows attend to key 0 only (no NaN), then discarded
    mask = (((j <= i) & (j < n)) | ((i >= n) & (j == 0))).unsqueeze(1)

    def padded_sdpa():
        a, b, c = (t.detach().requires_grad_(backward) for t in (qp, kp, vp))
        out = F.scaled_dot_product_attention(a, b, c, attn_mask=mask)
        if backward:
            out.backward(dp)

    return ours, padded_sdpa


def dense_step(dtype: torch.dtype, S: int = 2048):
    q, k, v, dout = (_rand(1, 8, S, 128, dtype=dtype) for _ in range(4))
    kw = dict(layout_q="BNSD", layout_kv="BNSD", layout_out="BNSD", softmax_scale=128 ** -0.5)

    def step():
        out, lse = op_plugin.flash_attn(q, k, v, return_softmax_lse=True, **kw)
        op_plugin.flash_attn_grad(q, k, v, dout, out, lse, **kw)

    return step


def measure_peak(S: int) -> float:
    """In a fresh process: peak RSS growth of one causal fp32 fwd+bwd step, N=8, D=128 (MB)."""
    import gc

    from common import peak_rss_mb, reset_peak_rss, rss_mb

    q, k, v, dout = (_rand(1, 8, S, 128, dtype=torch.float32) for _ in range(4))
    kw = dict(layout_q="BNSD", layout_kv="BNSD", layout_out="BNSD", softmax_scale=128 ** -0.5, mask_mode=3,
              attn_mask=TEMPLATE)
    gc.collect()
    base = rss_mb()
    reset_peak_rss()
    out, lse = op_plugin.flash_attn(q, k, v, return_softmax_lse=True, **kw)
    op_plugin.flash_attn_grad(q, k, v, dout, out, lse, **kw)
    return max(peak_rss_mb() - base, 0.0)


def useful_window_flops(S: int, W: int, D: int) -> float:
    return 4.0 * 8 * sum(min(i + 1, W) for i in range(S)) * D


def run(quick: bool = False) -> list[dict[str, object]]:
    from common import gemm_peak_gflops, interleaved_medians, median_seconds, peak_extra_memory_mb

    rows = []
    S, W, D = (1024, 128, 64) if quick else (8192, 512, 64)
    lengths = [x // 8 for x in TND_LENGTHS] if quick else TND_LENGTHS
    for name, dtype in DTYPES.items():
        peak = gemm_peak_gflops(dtype)
        ours, flex = flex_window(S, W, D, dtype)
        flex()  # compile outside the timing
        t_ours, t_flex = interleaved_medians([ours, flex], [7, 7])
        flops = useful_window_flops(S, W, D)
        rows.append({"workload": f"flash_attn fwd window W={W} B=1 N=8 S={S} D={D} vs FlexAttention (compiled)",
                     "dtype": name, "op_plugin_s": t_ours, "pytorch_s": t_flex, "speedup": t_flex / t_ours,
                     "throughput": f"{flops / t_ours / 1e9:.0f} vs {flops / t_flex / 1e9:.0f} useful GFLOP/s "
                                   f"(GEMM peak {peak:.0f})", "peak_extra_mb": "-"})
        for backward in (False, True):
            ours, padded = tnd_vs_padded(lengths, 128, dtype, backward)
            t_ours, t_pad = interleaved_medians([ours, padded], [5, 3])
            pairs = sum(n * (n + 1) // 2 for n in lengths)
            flops = 4.0 * 8 * pairs * 128 * (3.5 if backward else 1.0)
            rows.append({"workload": f"flash_attn {'fwd+bwd' if backward else 'fwd'} TND causal 8 seqs T={sum(lengths)} "
                                     f"N=8 D=128 vs padded SDPA+mask",
                         "dtype": name, "op_plugin_s": t_ours, "pytorch_s": t_pad, "speedup": t_pad / t_ours,
                         "throughput": f"{flops / t_ours / 1e9:.0f} vs {flops / t_pad / 1e9:.0f} useful GFLOP/s",
                         "peak_extra_mb": "-"})
    step = dense_step(torch.float32, 512 if quick else 2048)
    threads = torch.get_num_threads()
    t_many = median_seconds(step, repeat=5)
    torch.set_num_threads(1)
    try:
        t_one = median_seconds(step, repeat=5)
    finally:
        torch.set_num_threads(threads)
    rows.append({"workload": f"flash_attn fwd+bwd dense S={512 if quick else 2048}: {threads} threads vs 1 thread",
                 "dtype": "float32", "op_plugin_s": t_many, "pytorch_s": t_one, "speedup": t_one / t_many,
                 "throughput": f"scaling {t_one / t_many:.2f}x on {threads} threads", "peak_extra_mb": "-"})
    small, large = (1024, 4096) if quick else (8192, 32768)
    mem_small = peak_extra_memory_mb("bench_flash_attn_peers", "measure_peak", small)
    mem_large = peak_extra_memory_mb("bench_flash_attn_peers", "measure_peak", large)
    rows.append({"workload": f"flash_attn fwd+bwd causal N=8 D=128 peak extra memory S={large} vs S={small}",
                 "dtype": "float32", "op_plugin_s": float("nan"), "pytorch_s": float("nan"), "speedup": float("nan"),
                 "throughput": f"growth {mem_large / max(mem_small, 1e-9):.1f}x for {large // small}x S "
                               f"(inputs+outputs grow {large // small}x; S x S would be {(large // small) ** 2}x)",
                 "peak_extra_mb": f"{mem_large:.0f} vs {mem_small:.0f}"})
    return rows
