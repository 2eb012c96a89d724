"""An entry's ``autocast:`` key: what torch.autocast on the CPU casts before the op runs
(bindings/<op>_autocast.cpp, at the AutocastCPU key).

    autocast: {policy: lower_precision_fp, inputs: [q, k, v]}

The policies are torch's own (aten/src/ATen/autocast_mode.h), for the listed tensors only:
``lower_precision_fp`` casts them to autocast's dtype (``torch.get_autocast_dtype("cpu")``),
``fp32`` to float32, ``promote`` to the widest floating dtype among them. As in torch, float64
tensors and tensors that are not floating point are never cast. A tensor not listed is passed as
it came (a float32 sink, a bool mask)."""
from __future__ import annotations

from typing import Any, Optional

from codegen import expr as E
from codegen.model import AutocastRule, Location
from codegen.parse_common import Errors, known_keys_only, line_of, see

AUTOCAST_KEYS = {"policy", "inputs"}
POLICIES = ("lower_precision_fp", "fp32", "promote")
FLOATING = {"float16", "bfloat16", "float32", "float64"}


def parse_autocast(e: dict[str, Any], op: str, func: Any, path: str, errors: Errors) -> Optional[AutocastRule]:
    if "autocast" not in e:
        return None
    spec, line = e["autocast"], line_of(e, "autocast")
    if not isinstance(spec, dict):
        errors.add(line, op, f"'autocast:' takes {{policy: {' | '.join(POLICIES)}, inputs: [tensor arguments]}}"
                   f"{see('autocast')}")
        return None
    ok = known_keys_only(spec, AUTOCAST_KEYS, "autocast", "autocast", line, op, errors)
    policy = spec.get("policy")
    if policy not in POLICIES:
        errors.add(line_of(spec, "policy", line), op, f"autocast.policy must be one of {', '.join(POLICIES)}, "
                   f"but got {policy!r}")
        ok = False
    tensors = [a.name for a in func.arguments.flat_all if E.base(E.kind_of_type(a.type)) == E.TENSOR]
    inputs, i_line = spec.get("inputs"), line_of(spec, "inputs", line)
    if not isinstance(inputs, list) or not inputs:
        errors.add(i_line, op, f"autocast.inputs must list the tensor arguments autocast casts{see('autocast')}")
        return None
    dtypes = e.get("dtypes") if isinstance(e.get("dtypes"), dict) else {}
    for name in inputs:
        if name not in tensors:
            errors.add(i_line, op, f"autocast.inputs: {name!r} is not a tensor argument of {op} ({', '.join(tensors)})")
            ok = False
        elif isinstance(dtypes.get(name), list) and not FLOATING & set(dtypes[name]):
            errors.add(i_line, op, f"autocast.inputs: {name} takes no floating dtype ({', '.join(dtypes[name])}), "
                       "and autocast casts floating tensors only")
            ok = False
    if len(set(map(str, inputs))) != len(inputs):
        errors.add(i_line, op, "autocast.inputs names a tensor twice")
        ok = False
    return AutocastRule(policy, tuple(inputs), Location(path, line)) if ok else None
