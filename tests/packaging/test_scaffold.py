"""`op-plugin new NAME` and `op-plugin new NAME --backward` scaffold ops that build and whose tests
pass as written: a plain op and a forward/backward pair, scaffolded into one temporary tree and
built together (one compile), then the registry's generated tests of all three ops run (the
scaffolded test files hold only the float64 references)."""
from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "op_plugin_scaffold"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _new(tree: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "op_plugin", "new", *args, "--dir", str(tree), "--namespace", NAMESPACE],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def _run_every_test(module) -> list[str]:
    """Calls each test_* function of ``module``, once per parameter of its parametrize mark."""
    ran = []
    for name, test in inspect.getmembers(module, inspect.isfunction):
        if not name.startswith("test_"):
            continue
        marks = [m for m in getattr(test, "pytestmark", []) if m.name == "parametrize"]
        assert all(m.name == "parametrize" for m in getattr(test, "pytestmark", [])), f"{name}: unexpected mark"
        values = [(v,) for v in marks[0].args[1]] if marks else [()]
        for args in values:
            test(*args)
            ran.append(name)
    return ran


def test_new_plain_op_and_pair_build_and_their_tests_pass(tmp_path: Path) -> None:
    import op_plugin  # noqa: F401  (the generated fakes use op_plugin's runtime helpers)

    tree = tmp_path / "my_ops"
    plain, pair = _new(tree, "scaffolded_scale"), _new(tree, "scaffolded_pair", "--backward")
    assert plain.returncode == 0, plain.stderr
    assert pair.returncode == 0, pair.stderr
    folder = tree / "csrc" / "kernels" / "scaffolded_pair"
    kernels = [tree / "csrc" / "kernels" / "scaffolded_scale" / "scaffolded_scale_kernel.cpp",
               folder / "scaffolded_pair_kernel.cpp", folder / "scaffolded_pair_backward_kernel.cpp"]
    assert all(k.is_file() and "TODO(scaffolded_" in k.read_text() for k in kernels)
    again = _new(tree, "scaffolded_pair")
    assert again.returncode == 1 and "exists already" in again.stderr

    # The pair: a derived backward schema and the autograd: block that pairs them.
    entries = {e["func"].split("(")[0]: e for e in yaml.safe_load((tree / "op_plugin_functions.yaml").read_text())}
    assert sorted(entries) == ["scaffolded_pair", "scaffolded_pair_backward", "scaffolded_scale"]
    assert entries["scaffolded_pair_backward"]["func"] == (
        "scaffolded_pair_backward(Tensor grad_y, Tensor x, Tensor y, float scale=1.0) -> Tensor grad_x")
    assert entries["scaffolded_pair"]["autograd"] == {"backward": "scaffolded_pair_backward",
                                                      "inputs": {"grad_y": "grad(y)"}, "grads": {"x": "grad_x"}}
    assert "autograd" not in entries["scaffolded_scale"]
    test_files = [tree / "tests" / "ops" / f"test_{n}.py" for n in ("scaffolded_scale", "scaffolded_pair")]
    assert all('if "op_plugin" == "op_plugin"' not in f.read_text() for f in test_files)

    build = _load(ROOT / "python" / "op_plugin" / "build.py", "op_plugin_build_scaffold")
    python_dir = build.build_op_package(str(tree / "op_plugin_functions.yaml"), [str(k) for k in kernels],
                                        str(tmp_path / "build"), namespace=NAMESPACE,
                                        extension="op_plugin_scaffold_ext")
    for name in ("fakes", "ops"):
        _load(Path(python_dir) / f"{name}.py", f"op_plugin_scaffold_{name}")
    # A scaffolded test file holds only the float64 reference; the tests are the registry's
    # generated ones (samples: and reference: of the forwards, the backward's derived from its forward's).
    for test_file in test_files:
        module = _load(test_file, f"scaffolded_{test_file.stem}")
        assert callable(module.reference) and not [n for n in vars(module) if n.startswith("test_")]
    sys.path.insert(0, str(tree))  # their references: tests.ops.test_<op>.reference
    sys.modules.setdefault(NAMESPACE, types.ModuleType(NAMESPACE))  # the ops are registered above
    from codegen.dest.tests import generate_tests

    _, generated = generate_tests(str(tree / "op_plugin_functions.yaml"), str(tmp_path / "generated"),
                                  namespace=NAMESPACE, display_path="op_plugin_functions.yaml")
    assert generated == ["scaffolded_scale", "scaffolded_pair", "scaffolded_pair_backward"]
    modules = {}
    for op in generated:
        modules[op] = _load(tmp_path / "generated" / "tests" / f"test_{op}.py", f"generated_{op}")
        ran = _run_every_test(modules[op])
        assert {f"test_{op}_reference", f"test_{op}_opcheck", f"test_{op}_vmap", f"test_{op}_error"} <= set(ran), ran
        # the forward entries' autocast: rule (a backward is called by autograd in the forward's dtypes)
        assert (f"test_{op}_autocast" in ran) == (not op.endswith("_backward")), ran
    assert "test_scaffolded_pair_gradcheck" in dir(modules["scaffolded_pair"])
    assert "test_scaffolded_scale_gradcheck" not in dir(modules["scaffolded_scale"])
    # Other math in the reference: the generated reference tests are not vacuous.
    modules["scaffolded_scale"].SPEC = dataclasses.replace(modules["scaffolded_scale"].SPEC,
                                                           reference=lambda x, scale: x)
    with pytest.raises(AssertionError):
        modules["scaffolded_scale"].test_scaffolded_scale_reference(torch.float64)
