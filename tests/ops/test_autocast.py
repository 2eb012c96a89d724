"""torch.autocast through the ops (bindings/<op>_autocast.cpp, from the registry's autocast: key),
beyond the generated test_<op>_autocast: against SDPA under autocast, nesting, torch's promote
error, torch.export, and the kinds of mixed inputs a model hands them."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import op_plugin
from op_plugin import reference, testing


def _qkv(dtypes: tuple[torch.dtype, torch.dtype, torch.dtype], S: int = 24, N: int = 4, D: int = 16
         ) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(1, S, N, D, generator=g, dtype=torch.float64).to(dt) for dt in dtypes]


@pytest.mark.parametrize("to", [torch.bfloat16, torch.float16], ids=str)
def test_flash_attn_under_autocast_like_sdpa(to: torch.dtype) -> None:
    """A float32 query (rotary in float32) with autocast-dtype keys and values: SDPA under autocast
    runs it in autocast's dtype, and so does flash_attn (outside autocast the mix is refused), within
    the error budget of the same-dtype PyTorch computation against float64."""
    q, k, v = _qkv((torch.float32, to, to))
    with pytest.raises(RuntimeError, match="dtype of k must be the same as q"):
        op_plugin.flash_attn(q, k, v, softmax_scale=0.25)
    with torch.autocast("cpu", dtype=to):
        ours = op_plugin.flash_attn(q, k, v, softmax_scale=0.25)[0]
        theirs = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), scale=0.25
                                                ).transpose(1, 2)
    assert ours.dtype == theirs.dtype == to
    ref64 = reference.flash_attn_reference(*(t.double() for t in (q, k, v)), softmax_scale=0.25)[0]
    testing.assert_within_budget(ours, theirs, ref64, "flash_attn under autocast", computed_in=to)


def test_autocast_disabled_inside_leaves_the_op_alone() -> None:
    q, k, v = _qkv((torch.float32,) * 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with torch.autocast("cpu", enabled=False):
            out = op_plugin.flash_attn(q, k, v, softmax_scale=0.25)[0]
    torch.testing.assert_close(out, op_plugin.flash_attn(q, k, v, softmax_scale=0.25)[0], rtol=0, atol=0)


def test_promote_keeps_the_widest_and_refuses_what_torch_refuses() -> None:
    """block_attention_residuals (policy promote): a bf16 block output among float32 blocks runs in
    float32; float16 next to bfloat16 under bfloat16 autocast raises torch's own error, as torch.cat."""
    g = torch.Generator().manual_seed(1)
    partial, blocks = torch.randn(6, 32, generator=g), torch.randn(6, 3, 32, generator=g)
    w, nw = torch.randn(32, generator=g) * 0.1, torch.ones(32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        hidden = op_plugin.block_attention_residuals(partial.bfloat16(), blocks, w, nw)
        with pytest.raises(RuntimeError, match="Unexpected floating ScalarType"):
            op_plugin.block_attention_residuals(partial.half(), blocks.bfloat16(), w, nw)
        with pytest.raises(RuntimeError, match="Unexpected floating ScalarType"):
            torch.cat([partial.half(), partial.bfloat16()])
    assert hidden.dtype == torch.float32
    want = op_plugin.block_attention_residuals(partial.bfloat16().float(), blocks, w, nw)
    torch.testing.assert_close(hidden, want, rtol=0, atol=0)


def test_export_records_the_casts() -> None:
    """torch.export keeps autocast as a region; after run_decompositions the casts the autocast
    kernel made are explicit nodes before the op, and the program gives eager's result."""

    class Attention(torch.nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return op_plugin.flash_attn(q, k, v, softmax_scale=0.25)[0]

    q, k, v = _qkv((torch.float32, torch.bfloat16, torch.float32))
    program = torch.export.export(Attention(), (q, k, v)).run_decompositions()
    targets = [n.target for n in program.graph.nodes if n.op == "call_function"]
    casts = [t for t in targets if t == torch.ops.aten._to_copy.default]
    assert len(casts) == 2 and torch.ops.op_plugin.flash_attn.default in targets, targets
    out = program.module()(q, k, v)
    torch.testing.assert_close(out, Attention()(q, k, v), rtol=0, atol=0)
    assert out.dtype == torch.bfloat16


def test_vmap_under_autocast_and_autocast_under_vmap() -> None:
    """The vmap rule and the autocast kernel compose either way round: per-sample calls, folded."""
    g = torch.Generator().manual_seed(2)
    q, v = torch.randn(3, 1, 8, 2, 16, generator=g), torch.randn(3, 1, 8, 2, 16, generator=g)
    k = torch.randn(3, 1, 8, 2, 16, generator=g).bfloat16()

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return op_plugin.flash_attn(q, k, v, softmax_scale=0.25)[0]

    def attend_autocast(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return attend(q, k, v)

    want = torch.stack([attend_autocast(q[i], k[i], v[i]) for i in range(3)])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        outside = torch.vmap(attend)(q, k, v)
    inside = torch.vmap(attend_autocast)(q, k, v)
    assert want.dtype == torch.bfloat16
    torch.testing.assert_close(outside, want, rtol=0, atol=0)
    torch.testing.assert_close(inside, want, rtol=0, atol=0)
