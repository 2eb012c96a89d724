"""flash_attn_metadata (SPEC §1.7, Decision 7): the documented int32 zero tensor."""
from __future__ import annotations

import re

import pytest
import torch
from op_test_utils import fake_shapes, eager_shapes

import op_plugin

OP = torch.ops.op_plugin.flash_attn_metadata.default


def expected_length(batch: int, heads_kv: int) -> int:
    return -(-((36 + 72) * batch * heads_kv + 1) * 16 // 4096) * 4096


@pytest.mark.parametrize("source", ["seqused_q", "cu_seqlens_q", "batch_size"])
def test_length_and_contents(source: str) -> None:
    B = 3
    kwargs = {"seqused_q": dict(seqused_q=torch.tensor([4, 5, 6], dtype=torch.int32)),
              "cu_seqlens_q": dict(cu_seqlens_q=torch.tensor([0, 4, 9, 15], dtype=torch.int32)),
              "batch_size": dict(batch_size=B)}[source]
    out = op_plugin.flash_attn_metadata(8, 2, 128, **kwargs)
    assert out.dtype == torch.int32 and out.shape == (expected_length(B, 2),) == (12288,)
    assert torch.equal(out, torch.zeros_like(out))


def test_seqused_wins_over_cu_seqlens_and_batch_size() -> None:
    out = op_plugin.flash_attn_metadata(4, 4, 64, seqused_q=torch.zeros(5, dtype=torch.int32),
                                        cu_seqlens_q=torch.zeros(3, dtype=torch.int32), batch_size=1)
    assert out.shape == (expected_length(5, 4),)


def test_accepted_by_flash_attn() -> None:
    q = torch.randn(2, 16, 4, 64)
    k = torch.randn(2, 16, 2, 64)
    meta = op_plugin.flash_attn_metadata(4, 2, 64, batch_size=2, is_grad_enabled=True)
    out, _ = op_plugin.flash_attn(q, k, k, metadata=meta, softmax_scale=0.125)
    torch.testing.assert_close(out, op_plugin.flash_attn(q, k, k, softmax_scale=0.125)[0])


def test_errors_in_eager_and_fake() -> None:
    message = "flash_attn_metadata: When seqused_q and cu_seqlens_q are not provided, batch_size must be provided"
    with pytest.raises(RuntimeError, match=re.escape(message)):
        op_plugin.flash_attn_metadata(8, 2, 128)
    with torch._subclasses.fake_tensor.FakeTensorMode():
        with pytest.raises(RuntimeError, match=re.escape(message)):
            OP(8, 2, 128)
    with pytest.raises(RuntimeError, match=re.escape("num_heads_q (6) must be divisible by num_heads_kv (4)")):
        op_plugin.flash_attn_metadata(6, 4, 128, batch_size=1)


def test_fake_matches_eager_and_compile() -> None:
    cu = torch.tensor([0, 3, 7], dtype=torch.int32)
    assert fake_shapes(OP, 8, 2, 128, cu_seqlens_q=cu) == eager_shapes(OP(8, 2, 128, cu_seqlens_q=cu))
    # opcheck (every test_util) is generated from the registry's samples: tests/ops/test_generated.py.
    compiled = torch.compile(lambda: op_plugin.flash_attn_metadata(8, 2, 128, batch_size=4), fullgraph=True)
    assert torch.equal(compiled(), torch.zeros(expected_length(4, 2), dtype=torch.int32))
