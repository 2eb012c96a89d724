"""The wheel installs into a fresh virtual environment and runs an op, away from the source tree."""
from __future__ import annotations

import glob
import os
import subprocess
import sys
import textwrap
import venv
import zipfile

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CALL = textwrap.dedent("""
    import os, torch, op_plugin
    assert os.path.realpath(op_plugin.__file__).startswith(os.path.realpath(os.environ["VENV"])), op_plugin.__file__
    x = [torch.randn(s, dtype=torch.float64, requires_grad=True) for s in [(4, 8), (4, 2, 8), (8,), (8,)]]
    out = op_plugin.block_attention_residuals(*x)
    out.sum().backward()
    assert all(t.grad is not None and t.grad.shape == t.shape for t in x)
    print("ok", op_plugin.isa_level())
""")


def test_wheel_in_fresh_venv(tmp_path) -> None:
    wheel_dir = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--quiet",
                    "--wheel-dir", str(wheel_dir), ROOT], check=True)
    wheels = glob.glob(str(wheel_dir / "op_plugin-*.whl"))
    assert len(wheels) == 1, wheels
    # The metadata pins the torch release the wheel was built against.
    with zipfile.ZipFile(wheels[0]) as wheel:
        metadata = wheel.read("op_plugin-0.1.0.dist-info/METADATA").decode()
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert f"torch=={torch.__version__.split('+')[0]}" in requires, requires

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # torch comes from the environment running the tests (no second multi-GB copy); it is put
    # after the venv's own site-packages, so the venv's op_plugin wins over any other install
    # (--ignore-installed: pip would otherwise see that other op_plugin through the .pth and skip).
    with open(os.path.join(site, "torch_from_host.pth"), "w") as f:
        f.write(os.path.dirname(os.path.dirname(torch.__file__)) + "\n")
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--ignore-installed", wheels[0]], check=True)
    result = subprocess.run([python, "-c", CALL], cwd=tmp_path, env={**os.environ, "VENV": str(env_dir)},
                            capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("ok"), result.stdout + result.stderr
