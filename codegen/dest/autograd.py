"""python/autograd.py: the autograd kernel of every forward with an 'autograd:' pairing."""
from __future__ import annotations

import ast
from typing import Any

from codegen import expr as E
from codegen.file_manager import FileManager
from codegen.model import Let, OpEntry, Registry


def _outputs(op: OpEntry) -> list[str]:
    return [r.name or f"result{i}" for i, r in enumerate(op.func.returns)]


def _names(e: E.Expr) -> set[str]:
    return {n.id for n in ast.walk(e.tree) if isinstance(n, ast.Name)}


def _outputs_depending_on(op: OpEntry, args: set[str]) -> list[int]:
    """Indices of the outputs whose shape or dtype rule reads one of ``args`` (through lets)."""
    depends = set(args)
    for rule in op.rules:
        if isinstance(rule, Let) and _names(rule.expr) & depends:
            depends.add(rule.name)
    return [i for i, o in enumerate(op.outputs) if (_names(o.shape) | _names(o.dtype)) & depends]


def _pair_context(op: OpEntry, backward: OpEntry) -> dict[str, Any]:
    pair = op.autograd
    assert pair is not None
    args = [a.name for a in op.registered_func.arguments.flat_all]
    kinds = {a.name: E.kind_of_type(a.type) for a in op.registered_func.arguments.flat_all}
    kinds.update({name: E.kind_of_type(r.type) for name, r in zip(_outputs(op), op.func.returns)})
    saved = list(dict.fromkeys(src.name for src in pair.saved_sources()))
    saved_tensors = [n for n in saved if E.base(kinds[n]) == E.TENSOR]
    saved_values = [n for n in saved if E.base(kinds[n]) != E.TENSOR]

    def value_of(src: Any) -> str:
        if src.source == "grad":
            return f"grad_{src.name}"
        return src.name if src.name in saved_tensors else f"ctx.{src.name}"

    call_args = [(bwd_arg, value_of(src)) for bwd_arg, src in pair.inputs]
    bwd_outputs = _outputs(backward)
    grads, formulas = dict(pair.grads), dict(pair.formulas)
    returns = []
    for i, name in enumerate(args):
        if name in grads:  # None for an input that was None or needs no gradient (e.g. an optional pse)
            returns.append(f"(grads[{bwd_outputs.index(grads[name])}] if needs[{i}] else None)")
        elif name in formulas:
            f = formulas[name]
            returns.append(f"(_formulas.{f.function}({', '.join(value_of(a) for a in f.args)}) "
                           f"if needs[{i}] else None)")
        else:
            returns.append("None")
    kw_only = {a.name for a in op.registered_func.arguments.flat_kwarg_only}
    overrides = [(f"kwargs[{name!r}]" if name in kw_only else f"args[{args.index(name)}]", value)
                 for name, value in pair.forward_overrides]
    overridden = " or ".join(f"caller_{target} != {target}" for target, _ in overrides)
    return {
        "forward": op.name,
        "backward": backward.name,
        "loc": pair.loc,
        "input_names": args,
        "output_names": _outputs(op),
        "saved_tensors": saved_tensors,
        "saved_values": saved_values,
        "non_differentiable": list(pair.non_differentiable),
        "grad_params": [f"grad_{n}" for n in _outputs(op)],
        "grad_outputs": list(pair.grad_sources()),
        "call_args": call_args,
        "single_output": len(bwd_outputs) == 1,  # the op returns a Tensor, not a tuple
        "returns": "(" + ", ".join(returns) + ("," if len(returns) == 1 else "") + ")",
        "overrides": overrides,
        "overridden": overridden,  # the caller asked for something other than the overrides
        "overridden_outputs": _outputs_depending_on(op, {name for name, _ in pair.forward_overrides}),
        "n_inputs": len(args),
        "uses_formulas": bool(formulas),
    }


def emit(registry: Registry, fm: FileManager) -> None:
    pairs = [_pair_context(op, registry.op(op.autograd.backward)) for op in registry.ops if op.autograd]
    fm.write("python/autograd.py", "autograd.py.j2", registry.source, pairs=pairs,
             any_overrides=any(p["overrides"] for p in pairs), any_formulas=any(p["uses_formulas"] for p in pairs))
