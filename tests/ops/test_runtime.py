"""The runtime facts op_plugin reports, and the switches it reads from the environment."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import op_plugin
from op_plugin import _C

ISA_LEVELS = ("baseline", "avx2", "avx512", "avx512_bf16", "avx512_amx")


def run_python(code: str, **env: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**os.environ, **env}, cwd="/")
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_helper_module_reports_version_isa_and_flags() -> None:
    assert _C.kernel_library_version() == "0.1.0"
    assert op_plugin.isa_level() in ISA_LEVELS
    assert "torch " + torch.__version__ in _C.build_flags()


def test_doctor_prints_the_facts() -> None:
    out = run_python("from op_plugin.__main__ import main; main(['doctor'])")
    for field in ("torch", "kernel library", "ISA level", "threads", "strict mode", "ops"):
        assert field in out
    assert "block_attention_residuals" in out


@pytest.mark.parametrize("level", ["baseline", "avx2"])
def test_every_isa_level_computes_the_same_result(level: str) -> None:
    """OP_PLUGIN_ISA caps the dispatch level; each level's kernels agree with the native ones."""
    code = (
        "import torch, op_plugin\n"
        "g = torch.Generator().manual_seed(0)\n"
        "x = [torch.randn(s, generator=g).to(torch.bfloat16).requires_grad_() for s in [(33, 70), (33, 3, 70), (70,), (70,)]]\n"
        "out = op_plugin.block_attention_residuals(*x)\n"
        "out.float().square().sum().backward()\n"
        "torch.save([out.detach()] + [t.grad for t in x], '{path}')\n"
        "print(op_plugin.isa_level())\n")
    native = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"op_plugin_isa_native_{os.getpid()}.pt")
    capped = native.replace("native", level)
    assert run_python(code.format(path=native)) == op_plugin.isa_level()
    assert run_python(code.format(path=capped), OP_PLUGIN_ISA=level) == level
    for a, b in zip(torch.load(native), torch.load(capped)):
        torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2)
    os.remove(native)
    os.remove(capped)


def test_strict_mode_from_environment() -> None:
    assert run_python("import op_plugin; print(op_plugin._C.strict_mode())", OP_PLUGIN_STRICT="1") == "True"
    assert run_python("import op_plugin; print(op_plugin._C.strict_mode())", OP_PLUGIN_STRICT="0") == "False"



def test_wrappers_pass_keyword_only_arguments_by_keyword() -> None:
    """op_plugin.<op> keeps the schema's keyword-only arguments and forwards them as keywords."""
    x = [torch.randn(s, dtype=torch.float64) for s in [(3, 4), (3, 2, 4), (4,), (4,)]]
    hidden, inv_norm, probs = torch.ops.op_plugin.block_attention_residuals(*x)
    grads = op_plugin.block_attention_residuals_grad(*x, torch.ones(3, 4, dtype=torch.float64), inv_norm, probs,
                                                     valid_block_num=2)
    assert [g.shape for g in grads] == [t.shape for t in x]
    q = [torch.randn(1, 1, 2, 3, 4) for _ in range(5)]
    q[3], q[4] = torch.randn(1, 1, 5, 3, 4), torch.randn(1, 1, 5, 3, 4)
    q[1], q[2] = torch.randn(1, 1, 2, 5, 4), torch.randn(1, 1, 2, 5, 4)
    mx, sm, out = op_plugin.fused_floyd_attention(*q, scale_value=0.5)
    dq, *_ = op_plugin.fused_floyd_attention_grad(out, *q, out, mx, sm, atten_mask=None, scale_value=0.5)
    assert dq.shape == q[0].shape


def test_the_thread_keeps_its_workspace_buffer_until_released() -> None:
    """Stage 2's workspace comes from a buffer the calling thread keeps (no page faults per call);
    release_workspace frees it, and the next call that needs one allocates it again. A call on the
    kept buffer (the previous call's data in it) computes what a call on a fresh one does."""
    q = torch.randn(1, 2, 24, 24, 16)
    k1, v1, k2, v2 = (torch.randn(1, 2, 24, 24, 16) for _ in range(4))
    need = op_plugin.workspace_size("fused_floyd_attention", q, k1, v1, k2, v2)
    assert need > 0
    op_plugin.release_workspace()
    fresh = op_plugin.fused_floyd_attention(q, k1, v1, k2, v2)[2]
    kept = op_plugin.fused_floyd_attention(q, k1, v1, k2, v2)[2]
    torch.testing.assert_close(kept, fresh, rtol=0, atol=0)
    assert op_plugin.release_workspace() >= need  # what the calls used, rounded up
    assert op_plugin.release_workspace() == 0
