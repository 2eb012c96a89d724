"""An out-of-tree op package (tests/fixtures/toy_op): its own pyproject.toml, registry, kernel and
torch namespace, built with the build commands and C++ SDK of the installed op_plugin and
pip-installed into a temporary --target; a fresh interpreter imports it and runs its op forward,
backward, through opcheck and under torch.compile(fullgraph=True). A broken kernel fails the build
with the compiler's message."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "toy_op")

USE = textwrap.dedent("""
    import os, sys, torch, op_plugin, toy_op
    # the package from --target, the build helpers and runtime from the installed op_plugin
    assert toy_op.__file__.startswith(os.environ["TARGET"]), toy_op.__file__
    assert not op_plugin.__file__.startswith(os.path.join(os.environ["ROOT"], "python")), op_plugin.__file__
    op = torch.ops.op_plugin_toy.toy_square_scale.default
    x = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(op(x, 3.0), 3.0 * x * x)
    torch.testing.assert_close(toy_op.toy_square_scale(x), 2.0 * x * x)  # the wrapper's default
    assert torch.autograd.gradcheck(lambda t: toy_op.toy_square_scale(t, alpha=0.5), (x,))
    torch.library.opcheck(op, (x.detach().float().requires_grad_(), 1.5))
    try:
        op(x, 0.0)
        raise AssertionError("alpha=0 was accepted")
    except RuntimeError as e:
        assert "toy_square_scale: alpha must not be 0, but got 0.0" in str(e), e
    compiled = torch.compile(lambda t: toy_op.toy_square_scale(t).sum(), fullgraph=True)
    torch.testing.assert_close(compiled(x), (2.0 * x * x).sum())
    (g,) = torch.autograd.grad(compiled(x), x)
    torch.testing.assert_close(g, 4.0 * x)
    assert "y = alpha * x * x" in toy_op.toy_square_scale.__doc__
    print("ok")
""")


def test_out_of_tree_op_package(tmp_path) -> None:
    src = tmp_path / "toy_op"
    shutil.copytree(FIXTURE, src)
    target = tmp_path / "site"
    # Nothing points at the checkout: the build must find op_plugin's generator in the install.
    env = {k: v for k, v in os.environ.items() if k not in ("OP_PLUGIN_ROOT", "PYTHONPATH")}
    build = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index",
                            "--target", str(target), str(src)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    result = subprocess.run([sys.executable, "-c", USE], cwd=tmp_path, capture_output=True, text=True,
                            env={**env, "PYTHONPATH": str(target), "TARGET": str(target), "ROOT": ROOT})
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stdout + result.stderr
    # Built from the installed op_plugin's SDK: its kernel library (the runtime) is linked, not recompiled.
    ldd = subprocess.run(["ldd", *map(str, target.glob("toy_op/_C*.so"))], capture_output=True, text=True, check=True)
    sdk = subprocess.run([sys.executable, "-c", "import op_plugin.build as b; print(b.installed_sdk())"], env=env,
                         cwd=tmp_path, capture_output=True, text=True, check=True).stdout.strip()
    assert f"{sdk}/lib/libop_plugin_kernels.so" in ldd.stdout, ldd.stdout
    assert not list((src / "build" / "kernels").rglob("executor.cpp.o"))


def test_a_broken_kernel_fails_the_build_with_the_compilers_message(tmp_path) -> None:
    src = tmp_path / "toy_op"
    shutil.copytree(FIXTURE, src)
    kernel = src / "toy_square_scale_kernel.cpp"
    kernel.write_text(kernel.read_text() + "\nint broken() { return undeclared_name_in_the_kernel; }\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OP_PLUGIN_ROOT", "PYTHONPATH")}
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index",
                            "--wheel-dir", str(tmp_path / "dist"), str(src)], cwd=tmp_path, env=env,
                           capture_output=True, text=True)
    out = build.stdout + build.stderr
    assert build.returncode != 0
    # The metadata step passed (setup.py compiles nothing on import); the wheel build shows the compiler.
    assert "metadata-generation-failed" not in out and "Building wheel for toy-op (pyproject.toml)" in out, out[-3000:]
    # gcc quotes the name with ' or with ‘ ’, by locale
    assert re.search(r"toy_square_scale_kernel\.cpp:\d+:\d+: error: .undeclared_name_in_the_kernel. was not "
                     r"declared in this scope", out), out[-3000:]
