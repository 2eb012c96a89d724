"""torch_npu's calls of the seed documents on the CPU, over op_plugin's ops.

``npu_fusion_attention`` / ``npu_fusion_attention_grad`` are op-plugin 7.3.0's, restricted by
seed 004 to sparse_mode 0 and 4 ("The sparse_mode value should be 0 or 4, but got <m>"), which is
op_plugin's ``swa_forward`` / ``swa_backward``; the seed's own names are here too. They also take
``actual_seq_qlen`` / ``actual_seq_kvlen`` as 1D int tensors, as later torch_npu releases do.
``npu_fused_floyd_attention`` / ``npu_fused_floyd_attention_backward`` are op_plugin's
``fused_floyd_attention`` / ``fused_floyd_attention_grad``. ``npu.set_device`` and
``npu.synchronize`` do nothing: the CPU needs neither. ``op_plugin.compat.install()`` makes
``import torch_npu`` give this module.
"""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch

import op_plugin

__all__ = ["npu", "npu_fusion_attention", "npu_fusion_attention_grad", "npu_fused_floyd_attention",
           "npu_fused_floyd_attention_backward", "swa_backward", "swa_forward"]


def _lengths_as_tensors_too(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``fn`` under ``name``, taking actual_seq_qlen / actual_seq_kvlen as lists or 1D int tensors."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def adapter(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        for arg in ("actual_seq_qlen", "actual_seq_kvlen"):
            value = bound.arguments.get(arg)
            if isinstance(value, torch.Tensor):
                if value.dim() != 1 or value.dtype.is_floating_point or value.dtype.is_complex:
                    raise TypeError(f"{name}: {arg} must be a list of ints or a 1D int tensor, "
                                    f"but got a {value.dim()}D {value.dtype} tensor")
                bound.arguments[arg] = value.tolist()
        return fn(*bound.args, **bound.kwargs)

    adapter.__name__ = adapter.__qualname__ = name
    return adapter


npu_fusion_attention = _lengths_as_tensors_too(op_plugin.swa_forward, "npu_fusion_attention")
npu_fusion_attention_grad = _lengths_as_tensors_too(op_plugin.swa_backward, "npu_fusion_attention_grad")
swa_forward = _lengths_as_tensors_too(op_plugin.swa_forward, "swa_forward")
swa_backward = _lengths_as_tensors_too(op_plugin.swa_backward, "swa_backward")
npu_fused_floyd_attention = op_plugin.fused_floyd_attention
npu_fused_floyd_attention_backward = op_plugin.fused_floyd_attention_grad


def _set_device(device: object) -> None:
    """torch_npu.npu.set_device: the CPU has one device, so there is nothing to select."""


def _synchronize(device: object = None) -> None:
    """torch_npu.npu.synchronize: CPU ops have finished when they return."""


npu = SimpleNamespace(set_device=_set_device, synchronize=_synchronize)
