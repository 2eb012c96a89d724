"""The sources' Python call surfaces on the CPU, over op_plugin's registered ops.

Code written for the device libraries of the seed documents runs here unchanged (with its device
strings changed to "cpu"):

- ``op_plugin.compat.cann_ops_transformer``: CANN ops-transformer's torch extension (seed 000,
  seed 003): ``flash_attn_metadata``, ``flash_attn``, ``flash_attn_grad``,
  ``block_attention_residuals``, ``block_attention_residuals_backward`` and ``MaskMode``, also as
  ``cann_ops_transformer.ops.<op>`` and ``cann_ops_transformer.ops.attention.<op>.MaskMode``.
- ``op_plugin.compat.torch_npu``: torch_npu's ``npu_fusion_attention`` /
  ``npu_fusion_attention_grad`` (seed 004: sparse_mode 0 or 4) and their seed-004 names
  ``swa_forward`` / ``swa_backward``, ``npu_fused_floyd_attention`` /
  ``npu_fused_floyd_attention_backward`` (seed 001), and ``torch_npu.npu.set_device`` /
  ``synchronize``, which do nothing on the CPU.

Each op is an alias of ``op_plugin.<op>`` or a thin adapter around it: no second implementation.
``install()`` makes ``import cann_ops_transformer`` and ``import torch_npu`` resolve to them.
"""
from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
import warnings
from types import ModuleType

__all__ = ["SURFACES", "install"]

SURFACES = ("cann_ops_transformer", "torch_npu")


def install(*names: str) -> list[str]:
    """Makes ``import NAME`` (and ``from NAME.sub import x``) resolve to ``op_plugin.compat.NAME``
    for each of ``names`` (default: every surface in ``SURFACES``); returns the names installed.

    A name that is already imported, or that a real installed package provides, is left alone
    with a warning saying so: the real device library always wins. Installing ``torch_npu``
    makes ``importlib.util.find_spec("torch_npu")`` succeed, which libraries that probe for an
    NPU read as "torch_npu is installed"; install only ``cann_ops_transformer`` if that matters.
    """
    unknown = [n for n in names if n not in SURFACES]
    if unknown:
        raise ValueError(f"op_plugin.compat.install: unknown surface {unknown[0]!r}; known: {', '.join(SURFACES)}")
    installed = []
    for name in names or SURFACES:
        ours = importlib.import_module(f"{__name__}.{name}")
        current = sys.modules.get(name)
        if current is ours:
            installed.append(name)
            continue
        if current is not None:
            warnings.warn(f"op_plugin.compat.install: {name} is already imported (from "
                          f"{getattr(current, '__file__', None) or 'an unknown place'}); it is left alone",
                          stacklevel=2)
            continue
        real = importlib.util.find_spec(name)
        if real is not None:
            warnings.warn(f"op_plugin.compat.install: a real {name} is installed ({real.origin}); op_plugin.compat "
                          f"leaves it alone and `import {name}` gives the real one", stacklevel=2)
            continue
        for module in _with_submodules(ours):
            sys.modules[name + module.__name__[len(ours.__name__):]] = module
        installed.append(name)
    return installed


def _with_submodules(package: ModuleType) -> list[ModuleType]:
    """``package`` and every module under it, imported (a plain module: itself)."""
    modules = [package]
    for info in pkgutil.walk_packages(getattr(package, "__path__", []), prefix=package.__name__ + "."):
        modules.append(importlib.import_module(info.name))
    return modules
