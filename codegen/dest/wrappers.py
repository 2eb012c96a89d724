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


def _left_out_when(a: Any) -> str | None:
    """The Python test under which the wrapper passes keyword-only argument ``a`` (None: always).

    torch.ops parses every keyword it is given against the schema, and each one costs: a
    decode-size call of flash_attn_metadata with all 16 keyword arguments took 23 us against 13
    with the one it needed (Zen 1). So keyword-only arguments the op would take at their schema
    default are left out: optionals that are None, and str / bool arguments equal to their
    default (never symbolic, so the test adds no guard under torch.compile). Numbers are always
    passed: an int may be a SymInt, and comparing it would guard on it. Positional arguments are
    all passed by position, which costs less than any keyword (swa_forward: 32 us with its 21
    arguments by position, 36-38 with six numbers moved to keywords).
    """
    if a.default is None:
        return None
    if a.default == "None":
        return f"{a.name} is not None"
    if str(a.type) in ("str", "bool"):
        return f"{a.name} != {a.default}"
    return None


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
        # Positional arguments by position, keyword-only ones always or when given (_left_out_when).
        "call_args": [a.name for a in op.func.arguments.flat_positional] +
                     [f"{a.name}={a.name}" for a in op.func.arguments.flat_kwarg_only if _left_out_when(a) is None],
        "given_args": [{"name": a.name, "test": _left_out_when(a)} for a in op.func.arguments.flat_kwarg_only
                       if _left_out_when(a) is not None],
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
