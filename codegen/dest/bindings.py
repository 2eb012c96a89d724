"""bindings/register_schema.cpp, bindings/<op>.cpp and bindings/helpers_module.cpp."""
from __future__ import annotations

from typing import Any

from codegen import expr as E
from codegen.api import cpp
from codegen.file_manager import FileManager
from codegen.model import Check, OpEntry, Registry

_TAGS = {"pt2_compliant_tag": "at::Tag::pt2_compliant_tag",
         "nondeterministic_seeded": "at::Tag::nondeterministic_seeded",
         "needs_fixed_stride_order": "at::Tag::needs_fixed_stride_order"}


def env_of(op: OpEntry) -> dict[str, str]:
    """Kinds of every name an op's rules may use: arguments, then lets."""
    env = {a.name: E.kind_of_type(a.type) for a in op.func.arguments.flat_all}
    for rule in op.rules:
        if not isinstance(rule, Check):
            env[rule.name] = rule.expr.kind
    return env


def _rules(op: OpEntry, render: cpp.ExprRenderer) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for rule in op.rules:
        if isinstance(rule, Check):
            out.append(cpp.render_check(render, op.name, rule, "op_plugin::strict_mode()"))
        else:
            out.append({"let": True, "name": rule.name, "type": cpp.let_type(rule.expr.kind),
                        "expr": render(rule.expr)})
    return out


def _kernel_arg(p: cpp.KernelParam) -> str:
    if p.is_output:
        return f"&call.{p.name}" if p.kind == E.INT else f"&{p.name}_desc"
    if p.kind == E.TENSOR:
        return f"&{p.name}_desc"
    if p.kind == E.TENSOR + E.OPTIONAL:
        return f"{p.name}.has_value() ? &{p.name}_desc : nullptr"
    if p.kind in (E.STR, E.STR + E.OPTIONAL):
        return f"{p.name}_str.get()"
    if p.kind in (E.INT_LIST, E.INT_LIST + E.OPTIONAL):
        return f"{p.name}_array.get()"
    if p.kind in (E.INT + E.OPTIONAL, E.FLOAT + E.OPTIONAL):
        return f"{p.name}.has_value() ? &*{p.name} : nullptr"
    return p.name


def _binding_context(op: OpEntry, symbolic_args: frozenset[str]) -> dict[str, Any]:
    func = op.func
    args = cpp.binding_args(func)
    params = cpp.kernel_params(func, [o.name for o in op.outputs], [o.name for o in op.int_outputs],
                               random=op.random_when is not None)
    # random_when runs in <op>_cpu, before plan_<op> checks the rules: it is rendered before them.
    render = cpp.ExprRenderer(env_of(op))
    random_when = render(op.random_when) if op.random_when is not None else ""
    # The outputs, after the rules, as in the kernel checks: they may read what the rules proved.
    rules = _rules(op, render)
    outputs = [{"name": o.name, "shape": render(o.shape), "dtype": render(o.dtype)} for o in op.outputs]
    rng = ", uint64_t rng_seed, uint64_t rng_offset" if op.random_when is not None else ""
    has_tensor_input = any(E.kind_of_type(a.type) == E.TENSOR for a in func.arguments.flat_all)
    return {
        "op": op,
        # The dispatcher picks a kernel from the tensor arguments; an op that may be called with
        # none (only optional tensors) is registered for every backend.
        "dispatch_key": "CPU" if has_tensor_input else "CompositeExplicitAutograd",
        # An op without an 'autograd:' pairing (a backward op, a metadata op) has no derivative:
        # torch's not-implemented Autograd kernel makes backward through it raise "derivative for
        # <op> is not implemented" instead of the deprecated silent fallthrough.
        "no_derivative": has_tensor_input and op.autograd is None,
        "rules": rules,
        "outputs": outputs,
        "int_outputs": [o.name for o in op.int_outputs],
        "random_when": random_when,
        "rng_params": rng,
        "rng_names": ", rng_seed, rng_offset" if rng else "",
        "params": params,
        "strided": set(op.strided),
        "kernel_args": ", ".join(_kernel_arg(p) for p in params),
        "binding_params": ", ".join(f"{b.cpp_type} {b.name}" for b in args),
        "binding_names": ", ".join(b.name for b in args),
        "returns_type": cpp.binding_returns(func),
        "schema_literal": cpp.cpp_string(str(cpp.registered_func(func, symbolic_args))),
        "tags": [_TAGS[t] for t in op.tags],
        "workspace_op": workspace_op_name(op),
        "workspace_schema_literal": cpp.cpp_string(f"{workspace_op_name(op)}({func.arguments}) -> int"),
    }


def workspace_op_name(op: OpEntry) -> str:
    """The torch op answering how much workspace a call of ``op`` would need (op_plugin.workspace_size)."""
    return f"_{op.name}_workspace_size"


def emit(registry: Registry, fm: FileManager) -> None:
    # The two files shared by every op name none, so that adding an op recompiles only its own binding.
    fm.write("bindings/register_schema.cpp", "register_schema.cpp.j2", registry.source)
    for op in registry.ops:
        fm.write(f"bindings/{op.name}.cpp", "op_binding.cpp.j2", op.source,
                 **_binding_context(op, cpp.symbolic_int_args(registry, op)))
    fm.write("bindings/helpers_module.cpp", "helpers_module.cpp.j2", registry.source)
