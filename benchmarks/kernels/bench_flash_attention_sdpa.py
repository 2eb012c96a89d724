"""PyTorch baselines for the flash attention kernel benchmark (bench_flash_attention.cpp).

Measures torch SDPA (CPU flash backend) and torch.mm GEMM peaks at the same shapes, medians
over repeats, all threads (torch default). Prints one line per case:
  name  median_ms  gflops
FLOPs count useful work only: fwd 4*B*N*Sq*Skv_eff*D, fwd+bwd 3.5x fwd (FA2 convention).
"""
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def median_ms(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def report(name, ms, flops):
    print(f"{name:40s} {ms:10.2f} ms {flops / ms / 1e6:8.1f} GFLOP/s", flush=True)


def gemm(dtype, reps):
    a = torch.randn(2048, 2048).to(dtype)
    b = torch.randn(2048, 2048).to(dtype)
    ms = median_ms(lambda: torch.mm(a, b), reps)
    report(f"mm2048 {str(dtype)[6:]}", ms, 2 * 2048**3)


def sdpa(dtype, causal, bwd, B=1, N=8, S=2048, D=128, reps=5):
    q = torch.randn(B, N, S, D).to(dtype).requires_grad_(bwd)
    k = torch.randn(B, N, S, D).to(dtype).requires_grad_(bwd)
    v = torch.randn(B, N, S, D).to(dtype).requires_grad_(bwd)
    do = torch.randn(B, N, S, D).to(dtype)

    def run():
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        if bwd:
            o.backward(do)

    ms = median_ms(run, reps)
    flops = 4 * B * N * S * S * D * (0.5 if causal else 1.0) * (3.5 if bwd else 1.0)
    report(f"sdpa {'causal' if causal else 'dense'} {str(dtype)[6:]} {'fwd+bwd' if bwd else 'fwd'}", ms, flops)


def sdpa_window(dtype, bwd, B=1, N=8, S=8192, D=64, W=512, reps=3):
    q = torch.randn(B, N, S, D).to(dtype).requires_grad_(bwd)
    k = torch.randn(B, N, S, D).to(dtype).requires_grad_(bwd)
    v = torch.randn(B, N, S, D).to(dtype).requires_grad_(bwd)
    do = torch.randn(B, N, S, D).to(dtype)
    i = torch.arange(S)[:, None]
    j = torch.arange(S)[None, :]
    keep = (j <= i) & (j >= i - (W - 1))  # win_left = W-1, win_right = 0

    def run():
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        if bwd:
            o.backward(do)

    ms = median_ms(run, reps)
    useful = W * S - W * (W - 1) / 2
    flops = 4 * B * N * useful * D * (3.5 if bwd else 1.0)
    report(f"sdpa window{W} S{S} D{D} {str(dtype)[6:]} {'fwd+bwd' if bwd else 'fwd'}", ms, flops)


TND_LENGTHS = [512, 1024, 1536, 256, 2048, 768, 1280, 768]  # sums to 8192, as bench_flash_attention.cpp


def sdpa_tnd_padded(dtype, bwd, N=8, D=128, reps=3):
    """8 sequences padded to the longest (2048), causal per sequence via an explicit mask."""
    B, S = len(TND_LENGTHS), max(TND_LENGTHS)
    q = torch.randn(B, N, S, D).to(dtype).requires_grad_(bwd)
    k = torch.randn(B, N, S, D).to(dtype).requires_grad_(bwd)
    v = torch.randn(B, N, S, D).to(dtype).requires_grad_(bwd)
    do = torch.randn(B, N, S, D).to(dtype)
    i = torch.arange(S)[:, None]
    j = torch.arange(S)[None, :]
    lens = torch.tensor(TND_LENGTHS)[:, None, None]
    keep = ((j <= i) & (j < lens) & (i < lens)) | ((i >= lens) & (j == 0))  # padding rows attend key 0
    keep = keep[:, None]

    def run():
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        if bwd:
            o.backward(do)

    ms = median_ms(run, reps)
    pairs = sum(L * (L + 1) / 2 for L in TND_LENGTHS)
    flops = 4 * N * pairs * D * (3.5 if bwd else 1.0)
    report(f"sdpa tnd8 padded causal {str(dtype)[6:]} {'fwd+bwd' if bwd else 'fwd'}", ms, flops)


if __name__ == "__main__":
    torch.manual_seed(0)
    which = sys.argv[1:] or ["gemm", "dense", "window", "tnd"]
    if "gemm" in which:
        for dt in (torch.float32, torch.bfloat16):
            gemm(dt, 10)
    if "dense" in which:
        for dt in (torch.float32, torch.bfloat16):
            for causal in (False, True):
                for bwd in (False, True):
                    sdpa(dt, causal, bwd)
    if "window" in which:
        for dt in (torch.float32, torch.bfloat16):
            sdpa_window(dt, True)
    if "tnd" in which:
        for dt in (torch.float32, torch.bfloat16):
            sdpa_tnd_padded(dt, False)
            sdpa_tnd_padded(dt, True)
