"""python/sharding.py: every op's DTensor sharding strategies, from the registry's ``sharding:``.

One function per op evaluates which of its strategies hold for a call's arguments and where each
of them splits the tensors; op_plugin._sharding registers them with DTensor (register_sharding),
with the strategy every op has: every tensor whole on each rank."""
from __future__ import annotations

from typing import Any

from codegen import expr as E
from codegen.api import python as py
from codegen.file_manager import FileManager
from codegen.model import Axis, OpEntry, Registry
from codegen.parse_sharding import PARTIAL


def _axis(axis: Axis, env: dict[str, str], optional_tensor: bool, name: str) -> str:
    """A Python int-or-None expression; an absent optional tensor is split nowhere (its rule, which
    may read it, is not evaluated)."""
    if axis.axis is None:
        return "None"
    value = py.render(axis.axis, env)
    if axis.when is not None:
        value = f"({value}) if {py.render(axis.when, env)} else None"
    return f"({value}) if {name} is not None else None" if optional_tensor else value


def _op_context(op: OpEntry) -> dict[str, Any]:
    env = {a.name: E.kind_of_type(a.type) for a in op.func.arguments.flat_all}
    optional = {n for n, k in env.items() if E.base(k) == E.TENSOR and k.endswith(E.OPTIONAL)}
    strategies = []
    for s in op.sharding:
        inputs = {n: _axis(a, env, n in optional, n) for n, a in s.inputs}
        outputs = {n: _axis(a, env, False, n) for n, a in s.outputs} | {n: f'"{PARTIAL}"' for n in s.partial}
        strategies.append({"name": s.name, "loc": s.loc, "when": py.render(s.when, env) if s.when is not None else "",
                           "inputs": inputs, "outputs": outputs})
    return {"name": op.name, "loc": op.loc, "params": ", ".join(py.wrapper_params(op.func)),
            "strategies": strategies}


def emit(registry: Registry, fm: FileManager) -> None:
    fm.write("python/sharding.py", "sharding.py.j2", registry.source,
             ops=[_op_context(op) for op in registry.ops])
