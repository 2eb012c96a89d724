"""bindings/<op>_vmap.cpp: every op's batching rule for torch.vmap, in C++ at the FuncTorchBatched key.

Like torchgen's generated vmap plumbing (VmapGeneratedPlumbing.h), one function per op unwraps
each tensor argument at the current level and wraps the results; the batch rule between is
csrc/bindings/vmap_glue.h's, read from the registry's ``vmap:`` (fold into the op's batch) and
``random:`` keys. An op without ``vmap:`` is called once per sample, which also serves int returns
(torch's own fallback refuses them).
"""
from __future__ import annotations

from typing import Any

from codegen import expr as E
from codegen.api import cpp
from codegen.file_manager import FileManager
from codegen.model import Axis, OpEntry, Registry


def _axis(render: cpp.ExprRenderer, axis: Axis | None, optional_tensor: str = "") -> str:
    """The C++ std::optional<int64_t> of an axis rule; an absent optional tensor has none (its rule,
    which may read it, is not evaluated)."""
    if axis is None or axis.axis is None:
        return "std::nullopt"
    present = E.parse_expr(f"{optional_tensor} is not None", render.env) if optional_tensor else None
    with render.assuming(present):
        if axis.when is None:
            value = f"std::optional<int64_t>({render(axis.axis)})"
        else:
            with render.assuming(axis.when):
                given = f"std::optional<int64_t>({render(axis.axis)})"
            value = f"({render(axis.when)}) ? {given} : std::nullopt"
    return f"{optional_tensor}.has_value() ? ({value}) : std::nullopt" if optional_tensor else value


def _context(registry: Registry, op: OpEntry) -> dict[str, Any]:
    args = cpp.binding_args(op.func)
    types = cpp.registered_arg_types(registry, op)
    tensors = [a for a in args if E.base(a.kind) == E.TENSOR]
    returns = [r.name or f"result{i}" for i, r in enumerate(op.func.returns)]
    int_returns = {o.name for o in op.int_outputs}
    single = len(returns) == 1

    def result(i: int) -> str:
        return "out" if single else f"std::get<{i}>(out)"

    def call_args(tensor_arg: str) -> str:
        """The op's arguments, each tensor one given by ``tensor_arg`` (a format of name, index, optional)."""
        items = []
        for a in args:
            if E.base(a.kind) == E.TENSOR:
                i = tensors.index(a)
                items.append(tensor_arg.format(name=a.name, i=i, opt="_optional" if a.kind.endswith(E.OPTIONAL) else ""))
            else:
                items.append(a.name)
        return ", ".join(items)

    env = {a.name: a.kind for a in args}
    render = cpp.ExprRenderer(env)
    rule = op.vmap
    # The tensors the plan reads get sample 0's view; the others are passed as they came (unread).
    exprs = [op.random_when] if op.random_when is not None else []
    if rule is not None:
        exprs += [rule.when] if rule.when is not None else []
        exprs += [rule.replays[0]] if rule.replays is not None else []
        exprs += [e for _, a in rule.inputs + rule.outputs for e in (a.axis, a.when) if e is not None]
    read = set().union(*(e.names() for e in exprs)) if exprs else set()  # arguments, tensors or not

    def sample(a: cpp.BindingArg) -> str:
        if a.name not in read or E.base(a.kind) != E.TENSOR:
            return a.name
        return f"level.sample{'_optional' if a.kind.endswith(E.OPTIONAL) else ''}({a.name}_arg)"
    fold = None
    if rule is not None:
        inputs, outputs = dict(rule.inputs), dict(rule.outputs)
        fold = {"when": render(rule.when) if rule.when is not None else "",
                "inputs": [_axis(render, inputs.get(t.name), t.name if t.kind.endswith(E.OPTIONAL) else "")
                           for t in tensors],
                "outputs": [_axis(render, outputs.get(n)) for n in returns if n not in int_returns],
                "loc": rule.loc}
    outputs = []
    for i, n in enumerate(returns):
        outputs.append({"name": n, "int": n in int_returns, "result": result(i),
                        "fold_index": sum(1 for m in returns[:i] if m not in int_returns)})
    return {
        "name": op.name,
        "loc": op.loc,
        "signature": f"{cpp.binding_returns(op.func)}({', '.join(types)})",
        "returns_type": cpp.binding_returns(op.func),
        "params": ", ".join(f"{t} {a.name}" for t, a in zip(types, args)),
        "plan_params": ", ".join(f"[[maybe_unused]] {t} {a.name}" for t, a in zip(types, args)),
        "names": ", ".join(a.name for a in args),
        "tensors": [{"name": t.name} for t in tensors],
        "arg_list": ", ".join(f"&{t.name}_arg" for t in tensors),
        "sample_args": ", ".join(sample(a) for a in args),
        "fold_args": call_args("level.fold{opt}({name}_arg, fold.inputs[{i}])"),
        "select_args": call_args("level.select{opt}({name}_arg, i)"),
        "fold": fold,
        "draws": render(op.random_when) if op.random_when is not None else "",
        "replays": ({"when": render(rule.replays[0]), "of": rule.replays[1]}
                    if rule is not None and rule.replays is not None else None),
        "outputs": outputs,
    }


def emit(registry: Registry, fm: FileManager) -> None:
    for op in registry.ops:
        fm.write(f"bindings/{op.name}_vmap.cpp", "vmap.cpp.j2", op.source, **_context(registry, op))
