"""bindings/<op>_autocast.cpp: the op's kernel for torch.autocast on the CPU (the AutocastCPU key),
for the ops whose entry has ``autocast:``.

Like the kernels torch registers for its own ops (aten/src/ATen/autocast_mode.cpp), it casts the
listed tensors by the entry's policy with ``at::autocast::cached_cast`` (float64 and non-floating
tensors stay as they are) and calls the op with autocast excluded. An op without ``autocast:``
keeps torch's fallthrough: autocast leaves its arguments alone.
"""
from __future__ import annotations

from typing import Any

from codegen import expr as E
from codegen.api import cpp
from codegen.file_manager import FileManager
from codegen.model import OpEntry, Registry

_SUMMARY = {
    "lower_precision_fp": "under torch.autocast, {inputs} in autocast's dtype",
    "fp32": "under torch.autocast, {inputs} in float32",
    "promote": "under torch.autocast, {inputs} in the widest floating dtype among them",
}


def _context(registry: Registry, op: OpEntry) -> dict[str, Any]:
    rule = op.autocast
    args = cpp.binding_args(op.func)
    types = cpp.registered_arg_types(registry, op)
    cast = [a for a in args if a.name in rule.inputs]
    return {
        "name": op.name,
        "loc": rule.loc,
        "summary": _SUMMARY[rule.policy].format(inputs=", ".join(rule.inputs)) +
                   " (float64 and non-floating tensors stay as they are)",
        "policy": rule.policy,
        "signature": f"{cpp.binding_returns(op.func)}({', '.join(types)})",
        "returns_type": cpp.binding_returns(op.func),
        "params": ", ".join(f"{t} {a.name}" for t, a in zip(types, args)),
        "promoted": [{"name": a.name, "optional": a.kind.endswith(E.OPTIONAL)} for a in cast]
                    if rule.policy == "promote" else [],
        "call_args": ", ".join(f"at::autocast::cached_cast(to, {a.name}, c10::DeviceType::CPU)"
                               if a.name in rule.inputs else a.name for a in args),
    }


def emit(registry: Registry, fm: FileManager) -> None:
    for op in registry.ops:
        if op.autocast is not None:
            fm.write(f"bindings/{op.name}_autocast.cpp", "autocast.cpp.j2", op.source, **_context(registry, op))
