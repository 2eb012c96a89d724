"""The wheel carries the generator as a package (``codegen``, the templates its package data) and
the registry: the registry commands work from the installed package, away from any checkout and
with OP_PLUGIN_ROOT unset."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
OPS = [e["func"].split("(")[0] for e in yaml.safe_load((ROOT / "op_plugin_functions.yaml").read_text())
       if isinstance(e, dict) and "func" in e]


def _installed(package: str, cwd: Path) -> Path:
    """Where a fresh interpreter away from the checkout imports ``package`` from."""
    env = {k: v for k, v in os.environ.items() if k not in ("OP_PLUGIN_ROOT", "PYTHONPATH")}
    code = f"import importlib.util; print(importlib.util.find_spec({package!r}).origin)"
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, check=True)
    return Path(out.stdout.strip()).resolve().parent


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OP_PLUGIN_ROOT", "PYTHONPATH")}
    return subprocess.run([sys.executable, "-m", "op_plugin", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_the_wheel_carries_the_generator_as_a_package(tmp_path: Path) -> None:
    package, generator = _installed("op_plugin", tmp_path), _installed("codegen", tmp_path)
    # A venv inside the checkout (README's .venv) is an install too; the checkout's packages are
    # python/op_plugin and codegen/.
    assert package != ROOT / "python" / "op_plugin" and generator != ROOT / "codegen", (package, generator)
    assert generator.parent == package.parent  # both in site-packages
    for part in ("generate.py", "torch_version.py", "api/cpp.py", "dest/bindings.py", "templates/op_binding.cpp.j2",
                 "templates/scaffold/kernel.cpp.j2"):
        assert (generator / part).is_file(), part
    assert (package / "op_plugin_functions.yaml").read_text() == (ROOT / "op_plugin_functions.yaml").read_text()
    for part in ("share/op_plugin/bindings/torch_glue.cpp", "share/op_plugin/bindings/torch_glue.h",
                 "include/op_plugin/op_api.h", "lib/libop_plugin_kernels.so"):
        assert (package / part).is_file(), part
    assert not (package / "_tree").exists()  # no copied source tree


def test_registry_commands_from_the_installed_wheel(tmp_path: Path) -> None:
    r = _cli("check", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == f"op_plugin_functions.yaml: {len(OPS)} ops, no errors", r.stderr
    r = _cli("show", "swa_backward", cwd=tmp_path)
    assert r.returncode == 0 and "# `swa_backward`" in r.stdout, r.stderr
    r = _cli("gen", "--out", "gen", cwd=tmp_path)
    files = len([p for p in (tmp_path / "gen").rglob("*") if p.is_file() and p.name != "manifest.txt"])
    assert r.returncode == 0 and r.stdout.startswith(f"op-plugin gen: {len(OPS)} ops, {files} files written, "
                                                     "0 unchanged"), r.stderr
    assert (tmp_path / "gen" / "bindings" / "flash_attn.cpp").is_file()
    # new writes into the working directory, never into the installed package
    r = _cli("new", "my_op", "--namespace", "my_ns", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "csrc" / "kernels" / "my_op" / "my_op_kernel.cpp").is_file()
    r = _cli("check", "op_plugin_functions.yaml", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "op_plugin_functions.yaml: 1 ops, no errors", r.stderr
    assert not (_installed("op_plugin", tmp_path) / "csrc").exists()
    r = _cli("bench", "swa", cwd=tmp_path)
    assert r.returncode != 0 and "the benchmarks are not installed with the wheel" in r.stderr
