"""The command line's registry commands work from a fresh checkout before any build: the
checkout's python/ on PYTHONPATH, no extension, no _build_info.py, nothing installed from it used."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
OPS = [e["func"].split("(")[0] for e in yaml.safe_load((ROOT / "op_plugin_functions.yaml").read_text())
       if isinstance(e, dict) and "func" in e]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tracked source of the generator and the package, as a fresh clone has them."""
    tree = tmp_path_factory.mktemp("fresh") / "op_plugin"
    built = shutil.ignore_patterns("__pycache__", "*.so", "_build_info.py", "_generated", "include", "lib", "share")
    for part in ("python", "codegen", "templates"):
        shutil.copytree(ROOT / part, tree / part, ignore=built)
    shutil.copy(ROOT / "op_plugin_functions.yaml", tree)
    return tree


def _run(tree: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "OP_PLUGIN_ROOT"}
    env["PYTHONPATH"] = str(tree / "python")
    return subprocess.run([sys.executable, *args], cwd=cwd or tree, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_copy_is_unbuilt(checkout: Path) -> None:
    r = _run(checkout, "-c", "import op_plugin, codegen; print(op_plugin.__file__); print(codegen.__file__)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(checkout / "python" / "op_plugin" / "__init__.py"),
                                str(checkout / "codegen" / "__init__.py")]
    assert not list((checkout / "python").rglob("_C*.so"))


@pytest.mark.parametrize("command", ["new", "check", "gen", "show", "list"])
def test_help(checkout: Path, command: str) -> None:
    r = _run(checkout, "-m", "op_plugin", command, "--help")
    assert r.returncode == 0 and r.stdout.startswith(f"usage: op-plugin {command}"), r.stderr


def test_registry_commands(checkout: Path) -> None:
    r = _run(checkout, "-m", "op_plugin", "list")
    assert r.returncode == 0 and [line.split()[0] for line in r.stdout.splitlines()] == OPS, r.stderr
    r = _run(checkout, "-m", "op_plugin", "check")
    assert r.returncode == 0 and r.stdout.strip() == f"op_plugin_functions.yaml: {len(OPS)} ops, no errors", r.stderr
    r = _run(checkout, "-m", "op_plugin", "show", "flash_attn")
    assert r.returncode == 0 and "# `flash_attn`" in r.stdout, r.stderr
    r = _run(checkout, "-m", "op_plugin", "gen", "--out", "build/generated")
    assert r.returncode == 0 and r.stdout.startswith(f"op-plugin gen: {len(OPS)} ops, "), r.stderr
    assert (checkout / "build" / "generated" / "bindings" / "flash_attn.cpp").is_file()
    # new adds to the checkout it runs in
    r = _run(checkout, "-m", "op_plugin", "new", "fresh_op")
    assert r.returncode == 0, r.stderr
    assert (checkout / "csrc" / "kernels" / "fresh_op" / "fresh_op_kernel.cpp").is_file()
    r = _run(checkout, "-m", "op_plugin", "list")
    assert r.returncode == 0 and r.stdout.splitlines()[-1].split()[0] == "fresh_op", r.stderr


def test_everything_else_says_it_needs_a_build(checkout: Path) -> None:
    for use in ("op_plugin.isa_level()", "op_plugin.flash_attn"):
        r = _run(checkout, "-c", f"import op_plugin; {use}")
        assert r.returncode == 1 and "is a source tree that is not built" in r.stderr, r.stderr
