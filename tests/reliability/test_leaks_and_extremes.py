"""No memory growth over 10,000 calls; extreme values give finite results where the math is
finite, and NaN inputs propagate to the rows that read them (issue 7 items 5 and 7)."""
from __future__ import annotations

import gc

import pytest
import torch
from reliability_cases import CASES, TEMPLATE

import op_plugin


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def test_ten_thousand_calls_do_not_grow_memory() -> None:
    # 10,000 calls of every op (tiny shapes; the forward ops directly, their backward ops through
    # 1,000 autograd steps), after a warm-up that brings the allocators to a steady state. A leak
    # of a kilobyte per call would show as 10 MB.
    T, N, H = 4, 3, 16
    bar = [torch.randn(T, H), torch.randn(T, N, H), torch.randn(H), torch.ones(H)]
    floyd = [torch.randn(1, 1, 16, 16, 16) for _ in range(5)]
    q = torch.randn(1, 8, 2, 16)
    cu = torch.tensor([0, 3, 8], dtype=torch.int32)
    forward_calls = [
        lambda: op_plugin.block_attention_residuals(*bar),
        lambda: op_plugin.fused_floyd_attention(*floyd),
        lambda: op_plugin.flash_attn(q, q, q, mask_mode=3, attn_mask=TEMPLATE),
        lambda: op_plugin.flash_attn_metadata(2, 2, 16, cu_seqlens_q=cu, cu_seqlens_kv=cu),
        lambda: op_plugin.swa_forward(q, q, q, 2, "BSND", atten_mask=TEMPLATE, keep_prob=0.9, pre_tockens=3,
                                      next_tockens=0, sparse_mode=4),
    ]

    def calls(forward_rounds: int, autograd_rounds: int) -> None:
        with torch.no_grad():
            for _ in range(forward_rounds):
                for call in forward_calls:
                    call()
        for _ in range(autograd_rounds):
            for case in CASES.values():
                case(torch.float32)

    calls(1000, 50)
    gc.collect()
    before = _rss_mb()
    calls(10000, 200)  # and 200 rounds of the 5 autograd cases: 1,000 backward steps
    gc.collect()
    growth = _rss_mb() - before
    assert growth < 10, f"resident memory grew by {growth:.1f} MB over 10,000 calls of each op"


def test_huge_logits_and_fully_masked_rows_stay_finite() -> None:
    # logits of +-1e4 (scale 1e4 on unit vectors): the softmax is one-hot but finite; rows masked
    # entirely (causal with Sq > Skv, aligned bottom-right) give 0 with lse +inf and 0 gradients.
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 9, 2, 16, generator=g, dtype=torch.float64) for _ in range(3))
    q, k = (t / t.norm(dim=-1, keepdim=True) for t in (q, k))
    k = k[:, :5]
    v = v[:, :5]
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        leaves = [t.to(dtype).requires_grad_(True) for t in (q, k, v)]
        out, lse = op_plugin.flash_attn(*leaves, softmax_scale=1e4, mask_mode=3, attn_mask=TEMPLATE,
                                        return_softmax_lse=True)
        out.backward(torch.ones_like(out))
        assert bool(torch.isfinite(out).all()), dtype
        assert bool(torch.isposinf(lse[:, :, :4]).all()) and bool(torch.isfinite(lse[:, :, 4:]).all())
        assert bool((out[:, :4] == 0).all())  # rows 0..3 see no key (Sq 9 > Skv 5)
        for leaf in leaves:
            assert bool(torch.isfinite(leaf.grad).all()), dtype


def test_float16_values_near_overflow() -> None:
    # values near float16's maximum (6.5e4): the output of attention is a convex mix of v, so it
    # stays within v's range; the float32 accumulation must not overflow on the way.
    v = torch.full((1, 64, 2, 16), 6.0e4, dtype=torch.float16)
    v[:, ::2] = -6.0e4
    q = k = torch.zeros(1, 64, 2, 16, dtype=torch.float16)
    out, _ = op_plugin.flash_attn(q, k, v)
    assert bool(torch.isfinite(out).all())
    torch.testing.assert_close(out.float(), torch.zeros_like(out.float()), atol=0.0, rtol=0.0)  # mean of +-6e4
    hidden = op_plugin.block_attention_residuals(torch.full((4, 64), 6.0e4, dtype=torch.float16),
                                                 torch.full((4, 3, 64), -6.0e4, dtype=torch.float16),
                                                 torch.ones(64, dtype=torch.float16), torch.ones(64, dtype=torch.float16))
    assert bool(torch.isfinite(hidden).all())


@pytest.mark.parametrize("layout", ["BSND", "BNSD"])
def test_nan_input_propagates_to_the_rows_that_read_it(layout: str) -> None:
    # A NaN in key j reaches every query row that attends to j, and no other row.
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 8, 2, 16, generator=g) for _ in range(3))
    k[0, 5, 0, 3] = float("nan")  # head 0, key 5
    to = (lambda t: t.transpose(1, 2).contiguous()) if layout == "BNSD" else (lambda t: t)
    out, _ = op_plugin.flash_attn(to(q), to(k), to(v), mask_mode=3, attn_mask=TEMPLATE, layout_q=layout,
                                  layout_kv=layout, layout_out=layout)
    out = out.transpose(1, 2) if layout == "BNSD" else out
    nan_rows = torch.isnan(out).any(-1)[0]  # [S, N]
    expected = torch.zeros(8, 2, dtype=torch.bool)
    expected[5:, 0] = True  # causal: rows 5.. of head 0 see key 5
    assert torch.equal(nan_rows, expected)
    # swa_forward, same engine: the same rows, and their statistics are NaN too
    out, smax, ssum = op_plugin.swa_forward(to(q), to(k), to(v), 2, layout, atten_mask=TEMPLATE, pre_tockens=100,
                                            next_tockens=0, sparse_mode=4)[:3]
    out = out.transpose(1, 2) if layout == "BNSD" else out
    assert torch.equal(torch.isnan(out).any(-1)[0], expected)
    assert torch.equal(torch.isnan(ssum[0, :, :, 0]).T, expected)


def test_nan_propagates_in_block_attention_residuals_and_floyd() -> None:
    T, N, H = 4, 3, 16
    blocks = torch.randn(T, N, H)
    blocks[1, 2, 5] = float("nan")  # token 1 attends over its blocks: its output is NaN
    hidden = op_plugin.block_attention_residuals(torch.randn(T, H), blocks, torch.randn(H), torch.ones(H))
    assert torch.isnan(hidden).any(-1).tolist() == [False, True, False, False]
    x = [torch.randn(1, 1, 16, 16, 8, generator=torch.Generator().manual_seed(i)) for i in range(5)]
    x[1][0, 0, 3, 7, 2] = float("nan")  # key_ij[n=3, k=7] is read by every (n=3, m)
    out = op_plugin.fused_floyd_attention(*x)[2]
    nan_pairs = torch.isnan(out).any(-1)[0, 0]  # [n, m]
    expected = torch.zeros(16, 16, dtype=torch.bool)
    expected[3] = True
    assert torch.equal(nan_pairs, expected)
