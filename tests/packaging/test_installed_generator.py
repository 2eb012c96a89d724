"""The wheel carries the generator (op_plugin/_tree): the registry commands and the build helpers
work from the installed package, away from any checkout and with OP_PLUGIN_ROOT unset."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _installed_package() -> Path:
    spec = importlib.util.find_spec("op_plugin")
    assert spec is not None and spec.submodule_search_locations
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OP_PLUGIN_ROOT", "PYTHONPATH")}
    return subprocess.run([sys.executable, "-m", "op_plugin", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_the_wheel_carries_the_generator() -> None:
    package = _installed_package()
    # A venv inside the checkout (README's .venv) is an install too; the checkout's package is python/op_plugin.
    assert package != ROOT / "python" / "op_plugin", f"op_plugin is imported from the checkout ({package}), not an install"
    tree = package / "_tree"
    for part in ("codegen/generate.py", "codegen/torch_version.py", "templates/op_binding.cpp.j2",
                 "templates/scaffold/kernel.cpp.j2", "csrc/runtime/executor.cpp", "csrc/bindings/torch_glue.cpp",
                 "csrc/include/op_plugin/op_api.h", "op_plugin_functions.yaml"):
        assert (tree / part).is_file(), part


def test_registry_commands_from_the_installed_wheel(tmp_path: Path) -> None:
    r = _cli("check", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "op_plugin_functions.yaml: 9 ops, no errors", r.stderr
    r = _cli("show", "swa_backward", cwd=tmp_path)
    assert r.returncode == 0 and "# `swa_backward`" in r.stdout, r.stderr
    r = _cli("gen", "--out", "gen", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("op-plugin gen: 9 ops, 45 files written, 0 unchanged"), r.stderr
    assert (tmp_path / "gen" / "bindings" / "flash_attn.cpp").is_file()
    # new writes into the working directory, never into the installed package
    r = _cli("new", "my_op", "--namespace", "my_ns", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "csrc" / "kernels" / "my_op" / "my_op_kernel.cpp").is_file()
    r = _cli("check", "op_plugin_functions.yaml", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "op_plugin_functions.yaml: 1 ops, no errors", r.stderr
    assert not (_installed_package() / "_tree" / "csrc" / "kernels").exists()
    r = _cli("bench", "swa", cwd=tmp_path)
    assert r.returncode != 0 and "the benchmarks are not installed with the wheel" in r.stderr
