"""torch.export + AOTInductor: an exported model calling the ops compiles to a .pt2 package that
runs in C++ (the ops through AOTInductor's proxy executor, which calls them by schema), at sizes
other than the exported ones. The per-op export and dynamic-shape checks are the generated
tests' (check_export, check_dynamic_compile); this compiles one model per case (about 20 s each)."""
from __future__ import annotations

import pytest
import torch

import op_plugin


class FlashAttention(torch.nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out, _ = op_plugin.flash_attn(q, k, v, softmax_scale=0.3)
        return out * 2 + 1


def _qkv(seq: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seq)
    return tuple(torch.randn(2, seq, 4, 32, generator=gen).to(dtype) for _ in range(3))


def test_flash_attn_aoti_package_runs_at_other_sequence_lengths(tmp_path) -> None:
    model = FlashAttention()
    seq = torch.export.Dim("seq", min=2, max=4096)
    exported = torch.export.export(model, _qkv(64), dynamic_shapes=({1: seq},) * 3)
    path = torch._inductor.aoti_compile_and_package(exported, package_path=str(tmp_path / "flash_attn.pt2"))
    loaded = torch._inductor.aoti_load_package(path)
    for n in (64, 100, 7):
        x = _qkv(n)
        torch.testing.assert_close(loaded(*x), model(*x), rtol=0, atol=0, msg=lambda m: f"S={n}: {m}")


def test_swa_forward_aoti_needs_symint_returns_in_inductor(tmp_path) -> None:
    """swa_forward's int outputs are registered as SymInt (docs/compile.md), which torch 2.13's
    AOTInductor cannot return from a custom op yet. This pins that limitation down, so that a
    torch that lifts it is noticed (then: test the package and update docs/compile.md)."""
    class Swa(torch.nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return torch.ops.op_plugin.swa_forward(q, k, v, 4, "BSND", scale=0.3)[0]

    exported = torch.export.export(Swa(), _qkv(64))
    with pytest.raises(Exception, match="Unsupported return type <class 'torch.SymIntType'>"):
        torch._inductor.aoti_compile_and_package(exported, package_path=str(tmp_path / "swa.pt2"))
