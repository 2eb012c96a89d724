"""python/fakes.py: register_fake functions from the same rules as the C++ bindings."""
from __future__ import annotations

from typing import Any

from codegen import expr as E
from codegen.api import python as py
from codegen.dest.bindings import env_of
from codegen.file_manager import FileManager
from codegen.model import Check, OpEntry, Registry


def _op_context(op: OpEntry) -> dict[str, Any]:
    env = env_of(op)
    rules: list[dict[str, Any]] = []
    for rule in op.rules:
        if isinstance(rule, Check):
            guards = (["strict_mode()"] if rule.strict else []) + (
                [py.render(rule.when, env)] if rule.when is not None else [])
            rules.append({"let": False, "guard": " and ".join(guards), "expr": py.render(rule.expr, env),
                          "message": py.message(op.name, rule.message, env), "warn": rule.warn})
        else:
            rules.append({"let": True, "name": rule.name, "expr": py.render(rule.expr, env)})
    # Outputs are made like a required tensor input (so meta inputs give meta outputs); an op
    # with none makes them with torch.empty, which FakeTensorMode turns into fake tensors.
    like = next((f"{a.name}.new_empty" for a in op.func.arguments.flat_all if E.kind_of_type(a.type) == E.TENSOR),
                "torch.empty")
    tensors = [a.name for a in op.func.arguments.flat_all if E.base(E.kind_of_type(a.type)) == E.TENSOR]
    return {
        "name": op.name,
        "loc": op.loc,
        "tensors": tensors if len(tensors) > 1 else [],
        "params": ", ".join(py.wrapper_params(op.func)),
        "rules": rules,
        "like": like,
        "outputs": [{"shape": py.render(o.shape, env), "dtype": py.render(o.dtype, env)} for o in op.outputs],
        "int_outputs": [py.render(o.value, env) for o in op.int_outputs],
    }


def emit(registry: Registry, fm: FileManager) -> None:
    fm.write("python/fakes.py", "fakes.py.j2", registry.source,
             ops=[_op_context(op) for op in registry.ops])
