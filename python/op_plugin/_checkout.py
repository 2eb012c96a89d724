"""The one place that finds op_plugin's checkout (no torch, no extension: the command line's
registry commands use it before any build).

The generator itself is the ``codegen`` package, imported like any package: from a checkout (its
root on sys.path, as ``python -m`` from the root puts it) or from the installed wheel, which
carries it with the templates as package data. What a checkout adds is its registry, its
``csrc/`` and ``benchmarks/``; an installed wheel carries its registry as package data.
"""
from __future__ import annotations

import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def is_checkout(path: Path) -> bool:
    return (path / "op_plugin_functions.yaml").is_file() and (path / "codegen" / "generate.py").is_file()


def checkout_root() -> Path | None:
    """OP_PLUGIN_ROOT (which must be a checkout), else the checkout around the working directory,
    else the checkout this package lies in (python/op_plugin), else None (an installed wheel)."""
    if os.environ.get("OP_PLUGIN_ROOT"):
        root = Path(os.environ["OP_PLUGIN_ROOT"]).resolve()
        if not is_checkout(root):
            raise SystemExit(f"op-plugin: OP_PLUGIN_ROOT={root} is not an op_plugin checkout "
                             "(no op_plugin_functions.yaml and codegen/)")
        return root
    for candidate in (Path.cwd(), *Path.cwd().parents, PACKAGE.parent.parent):
        if is_checkout(candidate):
            return candidate
    return None


def registry_path() -> Path:
    """op_plugin's own registry: the checkout's, else the copy the wheel carries."""
    root = checkout_root()
    return root / "op_plugin_functions.yaml" if root else PACKAGE / "op_plugin_functions.yaml"
