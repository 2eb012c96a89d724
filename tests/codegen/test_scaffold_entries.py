"""The scaffold's registry entries (codegen/scaffold.py), without a build: the derived backward
of a forward entry, and the entries `op-plugin new` appends parse, paired, as written. (The
scaffold's build and tests: tests/packaging/test_scaffold.py.)"""
from __future__ import annotations

from pathlib import Path

import pytest

from codegen.file_manager import jinja_environment
from codegen.model import BackwardInput
from codegen.parse import load_registry
from codegen.scaffold import derive_backward, scaffold

ROOT = Path(__file__).resolve().parents[2]


def test_the_backward_of_an_rms_norm_takes_the_grads_and_the_saved_tensors() -> None:
    b = derive_backward({"func": "rms_norm(Tensor x, Tensor weight, float eps=1e-6) -> (Tensor y, Tensor rstd)",
                         "dtypes": {"x": ["float32", "bfloat16"]},
                         "outputs": {"y": {"like": "x"},
                                     "rstd": {"shape": "x.shape[:-1] + [1]", "dtype": "stats_dtype(x)"}}})
    assert b.func == ("rms_norm_backward(Tensor grad_y, Tensor grad_rstd, Tensor x, Tensor weight, Tensor y, "
                      "Tensor rstd, float eps=1e-6) -> (Tensor grad_x, Tensor grad_weight)")
    assert b.kernel == "RmsNormBackward"
    assert b.grads_in == [("grad_y", "y"), ("grad_rstd", "rstd")]
    assert b.grads_out == [("x", "grad_x"), ("weight", "grad_weight")]
    # The saved statistics are checked exactly, with the forward's own shape rule.
    assert {"expr": "rstd.shape == x.shape[:-1] + [1]",
            "error": "rstd must have shape {x.shape[:-1] + [1]}, but got {rstd.shape}"} in b.checks
    assert {"expr": "rstd.dtype == stats_dtype(x)",
            "error": "rstd must have dtype {stats_dtype(x)}, but got {rstd.dtype}"} in b.checks
    assert b.dtypes == ("grad_y", ["float32", "bfloat16"])


def test_scaffolded_entries_parse_and_pair(tmp_path: Path) -> None:
    env = jinja_environment(str(ROOT / "templates"), namespace="scaffold_test")
    scaffold("plain_op", tmp_path, env, "scaffold_test", backward=False)
    written = scaffold("paired_op", tmp_path, env, "scaffold_test", backward=True)
    assert [p.relative_to(tmp_path).as_posix() for p in written] == [
        "op_plugin_functions.yaml", "csrc/kernels/paired_op/paired_op_kernel.cpp",
        "csrc/kernels/paired_op/paired_op_backward_kernel.cpp", "tests/ops/test_paired_op.py"]
    registry = load_registry(str(tmp_path / "op_plugin_functions.yaml"))
    assert [op.name for op in registry.ops] == ["plain_op", "paired_op", "paired_op_backward"]
    assert registry.op("plain_op").autograd is None and registry.op("paired_op_backward").autograd is None
    pair = registry.op("paired_op").autograd
    assert pair is not None and pair.backward == "paired_op_backward"
    assert dict(pair.inputs) == {"grad_y": BackwardInput("grad", "y"), "x": BackwardInput("input", "x"),
                                 "y": BackwardInput("output", "y"), "scale": BackwardInput("input", "scale")}
    assert pair.grads == (("x", "grad_x"),)
    with pytest.raises(ValueError, match="paired_op exists already"):
        scaffold("paired_op", tmp_path, env, "scaffold_test", backward=False)
    with pytest.raises(ValueError, match="is not an op name"):
        scaffold("Bad-Name", tmp_path, env, "scaffold_test", backward=False)
