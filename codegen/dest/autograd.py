"""bindings/<op>_autograd.cpp: the C++ Autograd kernel of every forward with an 'autograd:' pairing.

Like torchgen's VariableType: a kernel per pairing, registered at the Autograd key, so no Python
runs on an op's eager path. The forward redispatches below autograd, saves what
the backward op and the formulas read in a torch::autograd::Node of its own (as torchgen's
generated Functions.h nodes do), and attaches the differentiable outputs to it; the node calls the
backward op through the dispatcher (so double backward meets its not-implemented kernel) and the
formulas of csrc/bindings/autograd_formulas.h. A Node, not a C++ torch::autograd::Function, so
torch.func transforms (grad, vjp, jacrev) work through the ops as through aten's.
"""
from __future__ import annotations

import ast
from typing import Any

from torchgen.api import cpp as torchgen_cpp

from codegen import expr as E
from codegen.api import cpp
from codegen.dest.bindings import env_of
from codegen.file_manager import FileManager
from codegen.model import BackwardInput, Let, OpEntry, Registry

# How a non-tensor value the backward reads is kept in the saved struct, by kind.
_SAVED_TYPES = {E.INT: "int64_t", E.FLOAT: "double", E.BOOL: "bool", E.STR: "std::string",
                E.STR + E.OPTIONAL: "std::optional<std::string>", E.INT + E.OPTIONAL: "std::optional<int64_t>",
                E.FLOAT + E.OPTIONAL: "std::optional<double>", E.INT_LIST: "std::vector<int64_t>",
                E.INT_LIST + E.OPTIONAL: "std::optional<std::vector<int64_t>>"}


def _outputs(op: OpEntry) -> list[str]:
    return [r.name or f"result{i}" for i, r in enumerate(op.func.returns)]


def _lets_for(op: OpEntry, exprs: list[E.Expr]) -> list[Let]:
    """The lets ``exprs`` read, directly or through other lets, in registry order."""
    lets = [r for r in op.rules if isinstance(r, Let)]
    wanted = set().union(*(e.names() for e in exprs))
    for let in reversed(lets):
        if let.name in wanted:
            wanted |= let.expr.names()
    return [let for let in lets if let.name in wanted]


def _cpp_literal(python_literal: str) -> str:
    value = ast.literal_eval(python_literal)
    if isinstance(value, bool):
        return "true" if value else "false"
    return cpp.cpp_string(value) if isinstance(value, str) else repr(value)


def _pair_context(registry: Registry, op: OpEntry, backward: OpEntry) -> dict[str, Any]:
    pair = op.autograd
    assert pair is not None
    func = op.func
    args = cpp.binding_args(func)
    kinds = {a.name: a.kind for a in args}
    outputs = _outputs(op)
    int_outputs = [o.name for o in op.int_outputs]
    tensor_outputs = [n for n in outputs if n not in int_outputs]
    differentiable = [n for n in tensor_outputs if n not in pair.non_differentiable]
    kinds.update({n: E.INT for n in int_outputs})
    kinds.update({n: E.TENSOR for n in tensor_outputs})
    # Every tensor argument has an input edge of the node, None optionals included (an empty edge).
    tensor_args = [a.name for a in args if E.base(a.kind) == E.TENSOR]

    overrides = {name: _cpp_literal(value) for name, value in pair.forward_overrides}
    # The value the forward runs with: the caller's, or a forward_overrides literal held in a local.
    run = {a.name: f"{a.name}_run" if a.name in overrides else a.name for a in args}

    saved = list(dict.fromkeys(src.name for src in pair.saved_sources()))
    saved_tensors = [{"name": n, "optional": kinds[n] == E.TENSOR + E.OPTIONAL,
                      "output": n in tensor_outputs, "is_output": "true" if n in differentiable else "false"}
                     for n in saved if E.base(kinds[n]) == E.TENSOR]
    # An int output is kept as the c10::SymInt the forward returns (symbolic under torch.compile).
    saved_values = [{"name": n, "type": "c10::SymInt" if n in int_outputs else _SAVED_TYPES[kinds[n]],
                     "value": run.get(n, n), "output": n in int_outputs}
                    for n in saved if E.base(kinds[n]) != E.TENSOR]
    saved_tensor_names = {t["name"] for t in saved_tensors}
    grad_sources = list(pair.grad_sources())

    def value_of(src: BackwardInput) -> str:
        """The backward's view of a forward input, output or incoming gradient, inside apply()."""
        if src.source == "grad":
            return f"grad_{src.name}"
        if src.name in saved_tensor_names:
            return src.name
        return f"op_plugin::as_argument({src.name})"

    # Every backward argument, in order: its source, or its default (the typed call passes all).
    sources = dict(pair.inputs)
    bwd_args = cpp.binding_args(backward.func)
    by_name = {a.name: a for a in backward.func.arguments.flat_all}
    call_args = []
    # A backward argument fed by a forward int output is registered as SymInt (cpp.registered_func)
    # and passed as c10::SymInt: the dispatcher hands a fake kernel the symbol and the binding's
    # int64_t parameter its value, with no guard on the way.
    bwd_types = cpp.registered_arg_types(registry, backward)
    for b in bwd_args:
        if b.name in sources:
            value = value_of(sources[b.name])
            if kinds.get(sources[b.name].name, "") == E.TENSOR + E.OPTIONAL:
                value = f"op_plugin::as_optional({value})"
        else:
            a = by_name[b.name]
            value = torchgen_cpp.default_expr(a.default, a.type, symint=False)
        call_args.append({"name": b.name, "value": value})

    bwd_outputs = _outputs(backward)
    grads, formulas = dict(pair.grads), dict(pair.formulas)
    returns = []
    for a in args:
        if a.name in grads:
            value = "grads_in" if len(bwd_outputs) == 1 else f"std::get<{bwd_outputs.index(grads[a.name])}>(grads_in)"
            returns.append({"edge": tensor_args.index(a.name), "name": a.name, "value": value})
        elif a.name in formulas:
            f = formulas[a.name]
            call = f"op_plugin::formulas::{f.function}({', '.join(value_of(x) for x in f.args)})"
            returns.append({"edge": tensor_args.index(a.name), "name": a.name, "value": call})

    overridden = op.outputs_shaped_by(set(overrides))
    env = env_of(op)
    render = cpp.ExprRenderer(env, symbolic=True)
    caller_outputs = []
    for rule in (o for o in op.outputs if o.name in overridden):
        lets = _lets_for(op, [rule.shape, rule.dtype])
        caller_outputs.append({
            "name": rule.name,
            "lets": [{"name": let.name, "expr": render(let.expr)} for let in lets],
            "shape": render(rule.shape), "dtype": render(rule.dtype)})
    return {
        "forward": op.name,
        "backward": backward.name,
        "loc": pair.loc,
        "node": op.kernel + "Backward",
        "args": [{"name": a.name, "type": a.cpp_type, "run": run[a.name]} for a in args],
        "binding_params": ", ".join(f"{a.cpp_type} {a.name}" for a in args),
        "signature": f"{cpp.binding_returns(func)}({', '.join(a.cpp_type for a in args)})",
        "returns_type": cpp.binding_returns(func),
        "outputs": outputs,
        "differentiable": differentiable,
        "saved_tensors": saved_tensors,
        "saved_values": saved_values,
        "grad_sources": [{"name": n, "index": differentiable.index(n)} for n in grad_sources],
        "backward_signature": f"{cpp.binding_returns(backward.func)}({', '.join(bwd_types)})",
        "call_args": call_args,
        "returns": returns,
        "tensor_args": tensor_args,
        "uses_formulas": bool(formulas),
        "overrides": [{"name": n, "type": next(a.cpp_type for a in args if a.name == n), "value": v}
                      for n, v in overrides.items()],
        "caller_outputs": caller_outputs,
    }


def emit(registry: Registry, fm: FileManager) -> None:
    for op in registry.ops:
        if op.autograd is None:
            continue
        ctx = _pair_context(registry, op, registry.op(op.autograd.backward))
        fm.write(f"bindings/{op.name}_autograd.cpp", "autograd.cpp.j2", op.source, **ctx)
