"""Adding an op is one registry entry plus one kernel: build a toy op and use it everywhere."""
from __future__ import annotations

import importlib.util
import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "toy_op")


def _load_build_helpers():
    spec = importlib.util.spec_from_file_location("op_plugin_build_src", os.path.join(ROOT, "python", "op_plugin", "build.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def toy_ops(tmp_path_factory):
    import op_plugin  # noqa: F401  (the generated fakes use op_plugin's runtime helpers)

    build_dir = str(tmp_path_factory.mktemp("toy_build"))
    python_dir = _load_build_helpers().build_op_package(
        os.path.join(FIXTURE, "op_plugin_functions.yaml"), [os.path.join(FIXTURE, "toy_square_scale_kernel.cpp")],
        build_dir, namespace="op_plugin_toy", extension="op_plugin_toy_ext", op_plugin_root=ROOT)
    modules = {}
    for name in ("fakes", "autograd", "ops"):
        spec = importlib.util.spec_from_file_location(f"op_plugin_toy_{name}", os.path.join(python_dir, f"{name}.py"))
        modules[name] = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = modules[name]
        spec.loader.exec_module(modules[name])
    return modules["ops"]


def test_toy_op_through_torch_ops_fake_autograd_and_compile(toy_ops) -> None:
    op = torch.ops.op_plugin_toy.toy_square_scale.default
    x = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(op(x, 3.0), 3.0 * x * x)
    torch.testing.assert_close(toy_ops.toy_square_scale(x), 2.0 * x * x)  # the wrapper's default
    assert torch.autograd.gradcheck(lambda t: toy_ops.toy_square_scale(t, alpha=0.5), (x,))
    torch.library.opcheck(op, (x.detach().float().requires_grad_(), 1.5))
    with pytest.raises(RuntimeError, match="toy_square_scale: alpha must not be 0, but got 0.0"):
        op(x, 0.0)
    compiled = torch.compile(lambda t: toy_ops.toy_square_scale(t).sum(), fullgraph=True)
    torch.testing.assert_close(compiled(x), (2.0 * x * x).sum())
    assert "y = alpha * x * x" in toy_ops.toy_square_scale.__doc__
