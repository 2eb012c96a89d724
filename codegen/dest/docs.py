"""docs/ops/<op>.md, docs/ops/index.md and docs/ops/limits.md: the reference pages of every op.

Written by ``python -m codegen --docs docs/ops`` (and checked for staleness by the tests), from
the same registry entries as the code, so a page cannot disagree with the op it documents.
"""
from __future__ import annotations

import ast
from typing import Any

from codegen import expr as E
from codegen.api import cpp
from codegen.file_manager import FileManager
from codegen.model import Check, EnumDef, Let, OpEntry, Registry, ShardingStrategy


def _names(e: E.Expr) -> set[str]:
    return {n.id for n in ast.walk(e.tree) if isinstance(n, ast.Name)}


def _rule_text(c: Check) -> str:
    when = f"when `{c.when}`: " if c.when is not None else ""
    return f"{when}`{c.expr}` — {c.message.source}"


def op_context(op: OpEntry, registry: Registry) -> dict[str, Any]:
    """What a page (and ``op-plugin show``) says about one op."""
    enums = dict(op.enums)
    checks = [r for r in op.rules if isinstance(r, Check)]
    lets = {r.name: r.expr for r in op.rules if isinstance(r, Let)}
    args = []
    for a in op.func.arguments.flat_all:
        mentions = [c for c in checks if a.name in _names(c.expr) | (_names(c.when) if c.when is not None else set())
                    and not c.strict and not c.warn]
        args.append({"name": a.name, "type": str(a.type), "enum": enums.get(a.name, ""),
                     "default": "" if a.default is None else a.default,
                     "keyword_only": a in op.func.arguments.flat_kwarg_only, "rules": len(mentions)})
    outputs = [{"name": o.name, "shape": str(o.shape), "dtype": str(o.dtype)} for o in op.outputs]
    outputs += [{"name": o.name, "shape": "int", "dtype": f"fake value `{o.value}`"} for o in op.int_outputs]
    pair = op.autograd
    autograd = None
    if pair is not None:
        autograd = {"backward": pair.backward,
                    "grads": [(i, o) for i, o in pair.grads] + [(i, f"{f.function}(...)") for i, f in pair.formulas],
                    "non_differentiable": list(pair.non_differentiable),
                    "overrides": list(pair.forward_overrides)}
    registered = str(cpp.registered_func(op.func, cpp.symbolic_int_args(registry, op)))
    return {
        "name": op.name,
        "schema": str(op.func),
        "strided": list(op.strided),
        "registered_schema": registered if registered != str(op.func) else "",
        "doc": op.doc,
        "kernel": op.kernel,
        "loc": op.loc,
        "args": args,
        "lets": [(name, str(e)) for name, e in lets.items()],
        "checks": [_rule_text(c) for c in checks if not c.strict and not c.warn],
        "warnings": [_rule_text(c) for c in checks if c.warn],
        "strict": [_rule_text(c) for c in checks if c.strict],
        "outputs": outputs,
        "python_returns": list(op.python_returns),
        "autograd": autograd,
        "backward_of": [],
        "random": str(op.random_when) if op.random_when is not None else "",
        "vmap": _vmap_context(op),
        "autocast": {"policy": op.autocast.policy, "inputs": list(op.autocast.inputs)} if op.autocast else None,
        "sharding": [_sharding_context(s) for s in op.sharding],
        "enums": [{"arg": arg, **enum_context(registry.enum(name))} for arg, name in op.enums],
    }


def _axis_text(axis: Any) -> str:
    if axis is None or axis.axis is None:
        return "none"
    return f"`{axis.axis}` when `{axis.when}`, else none" if axis.when is not None else f"`{axis.axis}`"


def _vmap_context(op: OpEntry) -> dict[str, Any] | None:
    rule = op.vmap
    if rule is None:
        return None
    inputs = dict(rule.inputs)
    tensors = [a.name for a in op.func.arguments.flat_all if E.base(E.kind_of_type(a.type)) == E.TENSOR]
    return {"when": str(rule.when) if rule.when is not None else "",
            "inputs": [(t, _axis_text(inputs.get(t))) for t in tensors],
            "outputs": [(n, _axis_text(a)) for n, a in rule.outputs],
            "replays": {"when": str(rule.replays[0]), "of": rule.replays[1]} if rule.replays else None}


def _sharding_context(s: ShardingStrategy) -> dict[str, Any]:
    return {"name": s.name, "when": str(s.when) if s.when is not None else "",
            "inputs": [(n, _axis_text(a)) for n, a in s.inputs],
            "outputs": [(n, _axis_text(a)) for n, a in s.outputs] + [(n, "partial sum") for n in s.partial]}


def enum_context(e: EnumDef) -> dict[str, Any]:
    return {"name": e.name, "members": list(e.members), "doc": e.doc, "loc": e.loc}


def contexts(registry: Registry) -> list[dict[str, Any]]:
    ops = [op_context(op, registry) for op in registry.ops]
    by_name = {c["name"]: c for c in ops}
    for c in ops:
        if c["autograd"]:
            by_name[c["autograd"]["backward"]]["backward_of"].append(c["name"])
    return ops


def emit(registry: Registry, fm: FileManager) -> None:
    ops = contexts(registry)
    for op in ops:
        fm.write(f"{op['name']}.md", "op_doc.md.j2", registry.op(op["name"]).source, op=op)
    fm.write("index.md", "ops_index.md.j2", registry.source, ops=ops,
             enums=[enum_context(e) for e in registry.enums])
    fm.write("limits.md", "ops_limits.md.j2", registry.source, ops=ops)
