"""The C++ SDK of the installed wheel: headers, the shared kernel library and the CMake package.

csrc/examples/ (the seeds' aclnn call examples, ported to the kernel API) is configured with CMake
against ``op_plugin.cmake_prefix_path``, built, run, and its printed results compared with the
torch ops on the same inputs.
"""
from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import op_plugin

EXAMPLES = Path(__file__).resolve().parents[2] / "csrc" / "examples"


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cmake = shutil.which("cmake")
    assert cmake, "cmake is needed to build the SDK examples (ci/build.sh installs it)"
    build = tmp_path_factory.mktemp("examples")
    subprocess.run([cmake, "-S", str(EXAMPLES), "-B", str(build), f"-DCMAKE_PREFIX_PATH={op_plugin.cmake_prefix_path}",
                    "-DCMAKE_BUILD_TYPE=Release"], check=True, capture_output=True, text=True)
    subprocess.run([cmake, "--build", str(build), "-j2"], check=True, capture_output=True, text=True)
    return build


def _printed(out: str, name: str) -> torch.Tensor:
    return torch.tensor([float(v) for v in re.findall(rf"^{name} result\[\d+\] is: (\S+)$", out, re.M)])


def test_the_wheel_ships_the_sdk() -> None:
    root = Path(op_plugin.__file__).parent
    assert (Path(op_plugin.cmake_prefix_path) / "OpPlugin" / "OpPluginConfig.cmake").is_file()
    assert (root / "lib" / "libop_plugin_kernels.so").is_file()
    for header in ("op_api.h", "scalar_types.h", "checks.h", "ops/fused_floyd_attention_grad.h"):
        assert (root / "include" / "op_plugin" / header).is_file(), header


def test_fused_floyd_attention_grad_example(examples: Path) -> None:
    S1, S2, S3, D = 16, 32, 48, 16  # the seed's shapes are 256, 256, 256, 128: 8.4M printed lines
    out = subprocess.run([str(examples / "fused_floyd_attention_grad"), str(S1), str(S2), str(S3), str(D)],
                         check=True, capture_output=True, text=True).stdout
    h = torch.float16
    q, dy, o = (torch.ones(1, 1, S1, S2, D, dtype=h) for _ in range(3))
    k1, v1 = torch.ones(1, 1, S1, S3, D, dtype=h), torch.ones(1, 1, S1, S3, D, dtype=h)
    k2, v2 = torch.ones(1, 1, S3, S2, D, dtype=h), torch.ones(1, 1, S3, S2, D, dtype=h)
    stats = torch.full((1, 1, S1, S2, 8), 3.0)
    mask = torch.zeros(1, 1, S1, 1, S3, dtype=torch.uint8)
    dq = torch.ops.op_plugin.fused_floyd_attention_grad(dy, q, k1, v1, k2, v2, o, stats, stats, atten_mask=mask,
                                                        scale_value=1.0 / math.sqrt(D))[0]
    printed = _printed(out, "mean")
    assert printed.numel() == dq.numel()
    torch.testing.assert_close(printed, dq.float().flatten(), rtol=1e-5, atol=1e-6)  # printed with %f


def test_block_attention_residuals_grad_example(examples: Path) -> None:
    out = subprocess.run([str(examples / "block_attention_residuals_grad")], check=True, capture_output=True,
                         text=True).stdout
    T, N, H = 2, 4, 64
    h = torch.float16
    grads = torch.ops.op_plugin.block_attention_residuals_grad(
        torch.ones(T, H, dtype=h), torch.ones(T, N, H, dtype=h), torch.ones(1, H, dtype=h), torch.ones(H, dtype=h),
        torch.ones(T, H, dtype=h), torch.ones(T, N + 1), torch.ones(T, N + 1), valid_block_num=-1)
    names = ("gradPartialBlock", "gradBlockRes", "gradProjWeight", "gradNormWeight")
    for name, grad in zip(names, grads):
        torch.testing.assert_close(_printed(out, name), grad.float().flatten(), rtol=1e-5, atol=1e-6, msg=name)
