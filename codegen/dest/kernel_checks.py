"""kernels/<op>_checks.cpp: <Kernel>CheckArguments, the registry's rules over the kernel API.

The third rendering of each rule (after the binding's and the fake's), so a C++ caller of
<Kernel>GetWorkspaceSize gets the binding's and the fake's errors, texts included. Stage 1 calls
it first; the kernel then checks only what the registry cannot say (contents of index tensors,
memory safety of what it reads).
"""
from __future__ import annotations

from typing import Any

from codegen import expr as E
from codegen.api import cpp, kernel
from codegen.dest.bindings import env_of
from codegen.file_manager import FileManager
from codegen.model import Check, OpEntry, Registry

_LET_TYPES = {E.INT: "const int64_t", E.FLOAT: "const double", E.BOOL: "const bool", E.DTYPE: "const opDataType",
              E.STR: "const std::string"}


def _context(op: OpEntry) -> dict[str, Any]:
    params = cpp.kernel_params(op.func, [o.name for o in op.outputs], [o.name for o in op.int_outputs],
                               random=op.random_when is not None)
    render = kernel.KernelExprRenderer(env_of(op))
    rules: list[dict[str, Any]] = []
    for rule in op.rules:
        if isinstance(rule, Check):
            rules.append(cpp.render_check(render, op.name, rule, "opGetStrictMode()"))
        else:
            rules.append({"let": True, "name": rule.name, "type": _LET_TYPES.get(rule.expr.kind, "const auto"),
                          "expr": render(rule.expr)})
    # Pointers a call must give (a null optional argument is None).
    required = [p.name for p in params if p.kind in (E.TENSOR, E.STR, E.INT_LIST) or (p.is_output and p.kind == E.INT)]
    descriptors = [{"name": p.name, "optional": p.kind == E.TENSOR + E.OPTIONAL, "strided": p.name in op.strided}
                   for p in params if E.base(p.kind) == E.TENSOR]
    outputs = [{"name": o.name, "shape": render(o.shape), "dtype": render(o.dtype)} for o in op.outputs]
    read = set().union(*(e.names() for e in _exprs(op)))
    return {
        "op": op,
        "signature": check_signature(op),
        "required": required,
        "descriptors": descriptors,
        "rules": rules,
        "outputs": outputs,
        "unused": [p.name for p in params if p.name not in read and p.name not in required
                   and E.base(p.kind) != E.TENSOR],
    }


def _exprs(op: OpEntry) -> list[E.Expr]:
    """Every expression the checks evaluate: rules, their guards and messages, the output rules."""
    exprs: list[E.Expr] = []
    for rule in op.rules:
        if isinstance(rule, Check):
            exprs += [rule.expr] + ([rule.when] if rule.when is not None else [])
            exprs += [part for part in rule.message.parts if not isinstance(part, str)]
        else:
            exprs.append(rule.expr)
    return exprs + [e for o in op.outputs for e in (o.shape, o.dtype)]


def check_signature(op: OpEntry) -> str:
    """``opStatus <Kernel>CheckArguments(<the stage-1 parameters but the last two>)``."""
    params = cpp.kernel_params(op.func, [o.name for o in op.outputs], [o.name for o in op.int_outputs],
                               random=op.random_when is not None)
    args = ", ".join(f"{p.c_type} {p.name}" for p in params)
    return f"opStatus {op.kernel}CheckArguments({args})"


def emit(registry: Registry, fm: FileManager) -> None:
    for op in registry.ops:
        fm.write(f"kernels/{op.name}_checks.cpp", "kernel_checks.cpp.j2", op.source, **_context(op))
