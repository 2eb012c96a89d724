"""The generated eager-path test (op_plugin.testing.check_eager_path) catches Python on the call
path: here an op whose kernel and autograd formula are Python, as torch.library makes them."""
from __future__ import annotations

import pytest
import torch

from op_plugin import testing


@torch.library.custom_op("op_plugin_eager_path_test::py_scale", mutates_args=())
def py_scale(x: torch.Tensor, scale: float) -> torch.Tensor:
    return x * scale


@py_scale.register_fake
def _(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.empty_like(x)


def _py_scale_backward(ctx, grad: torch.Tensor):  # noqa: ANN001
    return grad * ctx.scale, None


def _py_scale_setup(ctx, inputs, output) -> None:  # noqa: ANN001
    ctx.scale = inputs[1]


def _spec(op: object, differentiable: bool) -> testing.OpSpec:
    return testing.OpSpec(
        name="py_scale", op=op, kinds={"x": "Tensor", "scale": "float"}, dtype_argument=None,
        dtypes=(torch.float32,), tensor_dtypes={}, outputs=["y"],
        samples=[{"x": [4, 3], "scale": 2.0}], bad_calls=[], checks=[],
        differentiable_inputs=["x"] if differentiable else [], differentiable_outputs=["y"] if differentiable else [])


def test_a_python_kernel_fails_the_forward_check() -> None:
    with pytest.raises(AssertionError, match="the eager forward ran Python: .*py_scale"):
        testing.check_eager_path(_spec(torch.ops.op_plugin_eager_path_test.py_scale.default, False))


def test_a_python_autograd_formula_fails_the_check() -> None:
    torch.library.register_autograd("op_plugin_eager_path_test::py_scale", _py_scale_backward,
                                    setup_context=_py_scale_setup)
    with pytest.raises(AssertionError, match="the eager forward ran Python"):
        testing.check_eager_path(_spec(torch.ops.op_plugin_eager_path_test.py_scale.default, True))


def test_a_native_op_passes() -> None:
    """torch's own C++ ops run no Python past OpOverload.__call__, forward or backward."""
    spec = testing.OpSpec(
        name="mul", op=torch.ops.aten.mul.Tensor, kinds={"self": "Tensor", "other": "Tensor"}, dtype_argument=None,
        dtypes=(torch.float32,), tensor_dtypes={}, outputs=["out"],
        samples=[{"self": [4, 3], "other": [4, 3]}], bad_calls=[], checks=[],
        differentiable_inputs=["self", "other"], differentiable_outputs=["out"])
    testing.check_eager_path(spec)
