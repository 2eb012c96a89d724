"""More than 2^31 elements (issue 7 item 6): 64-bit indexing throughout. Slow tests (several GB
each; run with `pytest -m slow tests/reliability/test_large_tensors.py`); a sample of rows, the
last ones among them, against a float64 reference."""
from __future__ import annotations

import pytest
import torch

import op_plugin


@pytest.mark.slow
def test_block_attention_residuals_over_2_pow_31_elements() -> None:
    # block_res with 2^31 + 2^20 elements (bfloat16, 4 GB)
    from op_plugin import reference

    T, N, H = (2 ** 31 + 2 ** 20) // 1024, 1, 1024
    g = torch.Generator().manual_seed(0)
    partial = torch.randn(T, H, generator=g, dtype=torch.bfloat16)
    blocks = torch.empty(T, N, H, dtype=torch.bfloat16).normal_(generator=g)
    assert blocks.numel() > 2 ** 31
    proj, norm = torch.randn(H, generator=g, dtype=torch.bfloat16) / 32, torch.ones(H, dtype=torch.bfloat16)
    hidden = op_plugin.block_attention_residuals(partial, blocks, proj, norm)
    rows = torch.tensor([0, 1, T // 2, 2 ** 21 + 7, T - 2, T - 1])
    expected = reference.block_attention_residuals(partial[rows].double(), blocks[rows].double(), proj.double(),
                                                   norm.double())[0]
    torch.testing.assert_close(hidden[rows].double(), expected, rtol=2e-2, atol=2e-2)


@pytest.mark.slow
def test_flash_attn_tnd_over_2_pow_31_elements() -> None:
    # q and attn_out of [T, 8, 128] bfloat16 with T = 2^21 + 64: 2^31 + 2^16 elements each (4 GB
    # each, about 8.5 GB in all); two sequences, the second starting at element 2^30 and ending past
    # 2^31, each attending (GQA, 8 query heads over 2 kv heads) to its own 64 keys. Element offsets
    # of the last rows overflow int32, so a 32-bit index anywhere in the q/out addressing or the
    # per-sequence bases would read or write the wrong rows.
    T, N, NKV, D, SKV = 2 ** 21 + 64, 8, 2, 128, 64
    g = torch.Generator().manual_seed(0)
    q = torch.empty(T, N, D, dtype=torch.bfloat16).normal_(generator=g)
    k, v = (torch.randn(2 * SKV, NKV, D, generator=g, dtype=torch.float64) for _ in range(2))
    assert q.numel() > 2 ** 31
    cu_q = torch.tensor([0, 2 ** 20, T], dtype=torch.int32)
    cu_kv = torch.tensor([0, SKV, 2 * SKV], dtype=torch.int32)
    scale = D ** -0.5
    out, lse = op_plugin.flash_attn(q, k.bfloat16(), v.bfloat16(), cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv,
                                    layout_q="TND", layout_kv="TND", layout_out="TND", softmax_scale=scale,
                                    return_softmax_lse=True)
    assert out.shape == (T, N, D) and lse.shape == (N, T)
    rows = torch.tensor([0, 1, 2 ** 20 - 1, 2 ** 20, 2 ** 21 - 3, T - 2, T - 1])
    for row in rows.tolist():
        seq = 0 if row < 2 ** 20 else 1
        kk = k[seq * SKV:(seq + 1) * SKV].bfloat16().double().repeat_interleave(N // NKV, dim=1)  # [SKV, N, D]
        vv = v[seq * SKV:(seq + 1) * SKV].bfloat16().double().repeat_interleave(N // NKV, dim=1)
        s = torch.einsum("nd,knd->nk", q[row].double(), kk) * scale
        expected = torch.einsum("nk,knd->nd", s.softmax(-1), vv)
        torch.testing.assert_close(out[row].double(), expected, rtol=2e-2, atol=2e-2, msg=lambda m: f"row {row}: {m}")
        torch.testing.assert_close(lse[:, row].double(), s.logsumexp(-1), rtol=1e-3, atol=1e-3)
