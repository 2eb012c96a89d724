"""python/ops.py and ops.pyi: typed wrappers whose docstrings come from the registry."""
from __future__ import annotations

from typing import Any

from codegen.api import python as py
from codegen.file_manager import FileManager
from codegen.model import Check, EnumDef, OpEntry, Registry


def _docstring(op: OpEntry, registry: Registry) -> str:
    lines = [op.doc or op.name, "", "Schema::", "", f"    {op.func}"]
    for arg, enum in op.enums:
        lines += ["", f"{arg} takes a {enum} ({registry.enum(enum).listing()}), its int value or its name "
                  "in any case (the registered op takes the int)."]
    checks = [r for r in op.rules if isinstance(r, Check)]
    if checks:
        lines += ["", "Restrictions (the same in eager and fake mode; [strict]: device limits, enforced in",
                  "strict device-compat mode only)::", ""]
        for c in checks:
            prefix = "[strict] " if c.strict else ""
            when = f"when {c.when}: " if c.when is not None else ""
            lines.append(f"    {prefix}{when}{c.message.source}")
    lines += ["", f"Registry: {op.loc}"]
    return "\n".join(lines).replace('"""', "'''")


def _op_context(op: OpEntry, registry: Registry) -> dict[str, Any]:
    names = [r.name or f"result{i}" for i, r in enumerate(op.func.returns)]
    returned = list(op.python_returns)
    ints = {o.name for o in op.int_outputs}
    types = ["int" if name in ints else "Tensor" for name in returned]
    annotation = types[0] if len(returned) == 1 else f"tuple[{', '.join(types)}]"
    return {
        "name": op.name,
        "params": py.wrapper_params(op.func, dict(op.enums)),
        "enum_args": list(op.enums),
        "call_args": [a.name for a in op.func.arguments.flat_positional] +
                     [f"{a.name}={a.name}" for a in op.func.arguments.flat_kwarg_only],
        "result_names": names,
        "returned": ", ".join(returned) if len(returned) > 1 else returned[0],
        "return_annotation": annotation,
        "docstring": _docstring(op, registry),
    }


def _enum_context(e: EnumDef) -> dict[str, Any]:
    doc = (e.doc or e.name).replace('"""', "'''")
    return {"name": e.name, "members": list(e.members), "docstring": f"{doc}\n\nRegistry: {e.loc}"}


def emit(registry: Registry, fm: FileManager) -> None:
    ops = [_op_context(op, registry) for op in registry.ops]
    enums = [_enum_context(e) for e in registry.enums]
    fm.write("python/ops.py", "ops.py.j2", registry.source, ops=ops, enums=enums)
    fm.write("python/ops.pyi", "ops.pyi.j2", registry.source, ops=ops, enums=enums)
