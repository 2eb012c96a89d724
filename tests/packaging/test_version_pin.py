"""op_plugin refuses to load under a torch release other than the one it was built against."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

IMPORT_UNDER = """
import torch
torch.__version__ = {version!r}  # what another installed torch would report
import op_plugin
print("imported", op_plugin._build_info.TORCH_VERSION)
"""


def _import_under(version: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", IMPORT_UNDER.format(version=version)], capture_output=True,
                          text=True, cwd="/", timeout=120)


@pytest.mark.parametrize("version", ["2.99.0", "2.12.1+cpu"])
def test_another_torch_release_is_refused(version: str) -> None:
    from op_plugin import _build_info

    built = _build_info.TORCH_VERSION
    r = _import_under(version)
    assert r.returncode != 0
    assert (f"ImportError: op_plugin was built against torch {built} but torch {version} is installed; "
            f"install torch=={built.split('+')[0]} or rebuild op_plugin") in r.stderr, r.stderr


def test_another_build_of_the_same_release_loads() -> None:
    public = torch.__version__.split("+")[0]
    r = _import_under(public + "+cu130")
    assert r.returncode == 0 and r.stdout.startswith("imported "), r.stderr
