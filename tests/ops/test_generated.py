"""The registry's generated tests: every op with samples: gets the standard checks of
op_plugin.testing (reference in every dtype, fake shapes, opcheck, gradcheck, torch.compile, one
failing call per check; docs/generated_tests.md). They are generated here from the checkout's
registry into build/generated/tests/ and collected as this module's tests; `op-plugin test OP`
runs one op's."""
from __future__ import annotations

import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)  # the generator (codegen/)

from codegen.dest.tests import generate_tests  # noqa: E402

OUT = os.path.join(ROOT, "build", "generated")
_, OPS = generate_tests(os.path.join(ROOT, "op_plugin_functions.yaml"), OUT)


def _load(op: str) -> dict[str, object]:
    path = os.path.join(OUT, "tests", f"test_{op}.py")
    spec = importlib.util.spec_from_file_location(f"generated_tests_{op}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {name: value for name, value in vars(module).items() if name.startswith("test_")}


for _op in OPS:
    globals().update(_load(_op))


def test_every_op_has_generated_tests() -> None:
    """Every in-tree op has samples (its own, or its forward's for a backward op)."""
    from codegen.parse import load_registry

    registry = load_registry(os.path.join(ROOT, "op_plugin_functions.yaml"), "op_plugin_functions.yaml")
    assert OPS == [op.name for op in registry.ops]


def test_op_plugin_test_runs_one_ops_tests() -> None:
    import subprocess

    run = subprocess.run([sys.executable, "-m", "op_plugin", "test", "flash_attn_metadata", "-k", "reference or fake"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "2 passed" in run.stdout, run.stdout + run.stderr
    run = subprocess.run([sys.executable, "-m", "op_plugin", "test", "no_such_op"], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 1 and "no generated tests for no_such_op" in run.stderr, run.stderr


def test_op_plugin_test_runs_outside_a_checkout(tmp_path) -> None:
    """From an installed wheel, away from any checkout, the registry's references import (they ship in
    op_plugin.reference): every op's reference test runs."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "OP_PLUGIN_ROOT"}
    run = subprocess.run([sys.executable, "-m", "op_plugin", "test", "-k", "reference"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0 and " passed" in run.stdout and "error" not in run.stdout, run.stdout + run.stderr
