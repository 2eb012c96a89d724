"""tests/test_<op>.py: the standard tests of every op with samples (docs/generated_tests.md).

The generated module is data (the op's samples, reference, checks and autograd pairing) plus one
short pytest function per check of op_plugin.testing, which does the work at test time. Each
check of the registry gets the mutations that may fire it, derived from its expression: a
``x.dtype`` can be wrong, a ``x.dim()`` off by one, a ``x.size(i)`` or ``x.shape`` mismatched,
``x.numel()`` zero, ``x is None`` toggled, a scalar moved past the constants it is compared with.
"""
from __future__ import annotations

import ast
import re
from typing import Any, Optional

from codegen import expr as E
from codegen.api import python as py
from codegen.file_manager import FileManager
from codegen.model import Check, Let, OpEntry, Registry
from codegen.samples import Reference

TENSOR_METHODS = {"dim": "dim", "size": "size", "numel": "empty"}


def _mutations(tree: ast.expr, kinds: dict[str, str], lets: dict[str, ast.expr], out: list[tuple[str, str]],
               seen_lets: set[str]) -> None:
    """Appends (kind, argument) mutations that may change ``tree``'s value, in reading order."""
    def add(kind: str, name: str) -> None:
        if (kind, name) not in out:
            out.append((kind, name))

    def is_tensor(node: ast.expr) -> bool:
        return isinstance(node, ast.Name) and E.base(kinds.get(node.id, "")) == E.TENSOR

    for node in _walk_in_order(tree):
        if isinstance(node, ast.Attribute) and is_tensor(node.value):
            add({"dtype": "dtype", "shape": "size"}.get(node.attr, "size"), node.value.id)  # type: ignore[attr-defined]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and is_tensor(node.func.value):
            add(TENSOR_METHODS.get(node.func.attr, "size"), node.func.value.id)  # type: ignore[attr-defined]
            if node.func.attr == "numel":
                add("size", node.func.value.id)  # type: ignore[attr-defined]
        elif isinstance(node, ast.Compare) and any(isinstance(o, (ast.Is, ast.IsNot)) for o in node.ops):
            if isinstance(node.left, ast.Name) and node.left.id in kinds:
                add("none", node.left.id)
        elif isinstance(node, ast.Name):
            if node.id in lets and node.id not in seen_lets:
                seen_lets.add(node.id)
                _mutations(lets[node.id], kinds, lets, out, seen_lets)
            elif is_tensor(node):
                add("dtype", node.id)
            elif node.id in kinds:
                add("value", node.id)


def _walk_in_order(tree: ast.AST) -> list[ast.AST]:
    """Nodes in source order (ast.walk is breadth-first)."""
    nodes = [tree]
    for child in ast.iter_child_nodes(tree):
        nodes += _walk_in_order(child)
    return nodes


def _constants(trees: list[ast.expr], lets: dict[str, ast.expr]) -> tuple[list[int], list[str]]:
    """The int and str constants a check compares with (its lets' too): the values worth trying."""
    ints: list[int] = []
    strs: list[str] = []
    todo, seen = list(trees), set()
    while todo:
        tree = todo.pop(0)
        negated: set[int] = set()  # the constants under a minus sign, counted once as negative
        for node in _walk_in_order(tree):
            if (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant)
                    and isinstance(node.operand.value, int)):
                negated.add(id(node.operand))
                if -node.operand.value not in ints:
                    ints.append(-node.operand.value)
            elif isinstance(node, ast.Constant) and id(node) not in negated:
                if isinstance(node.value, bool):
                    continue
                if isinstance(node.value, int) and node.value not in ints:
                    ints.append(node.value)
                elif isinstance(node.value, str) and node.value not in strs:
                    strs.append(node.value)
            elif isinstance(node, ast.Name) and node.id in lets and node.id not in seen:
                seen.add(node.id)
                todo.append(lets[node.id])
    return ints, strs


def _pattern(op: str, message: E.Message) -> str:
    """A regex of the message: its literal text, ``.*`` where a value is interpolated."""
    return re.escape(f"{op}: ") + "".join(re.escape(p) if isinstance(p, str) else ".*" for p in message.parts)


def _checks(op: OpEntry) -> list[dict[str, Any]]:
    kinds = {a.name: E.kind_of_type(a.type) for a in op.func.arguments.flat_all}
    lets: dict[str, ast.expr] = {}
    checks = []
    for rule in op.rules:
        if isinstance(rule, Let):
            lets[rule.name] = rule.expr.tree
            continue
        assert isinstance(rule, Check)
        mutations: list[tuple[str, str]] = []
        _mutations(rule.expr.tree, kinds, lets, mutations, set())
        trees = [rule.expr.tree]
        if rule.when is not None:  # a mutation may also make the check apply
            _mutations(rule.when.tree, kinds, lets, mutations, set())
            trees.append(rule.when.tree)
        ints, strs = _constants(trees, lets)
        checks.append({"line": rule.loc.line, "pattern": _pattern(op.name, rule.message),
                       "message": rule.message.source, "strict": rule.strict, "warn": rule.warn,
                       "mutations": mutations, "ints": ints, "strs": strs})
    return checks


def _forward_of(registry: Registry, op: OpEntry) -> Optional[OpEntry]:
    return next((f for f in registry.ops if f.autograd is not None and f.autograd.backward == op.name), None)


def _reference_context(op: OpEntry, reference: Optional[Reference]) -> Optional[dict[str, Any]]:
    if reference is None:
        return None
    return {"module": reference.module, "call": reference.call, "returns": list(reference.returns),
            "params": ", ".join(py.wrapper_params(op.func))}


def _tensor_outputs(op: OpEntry) -> list[str]:
    return [o.name for o in op.outputs]


def _op_context(registry: Registry, op: OpEntry) -> Optional[dict[str, Any]]:
    forward = _forward_of(registry, op)
    if forward is not None and (forward.tests is None or forward.tests.samples == "None"):
        forward = None
    if (op.tests is None or op.tests.samples == "None") and forward is None:
        return None
    kinds = {a.name: E.kind_of_type(a.type) for a in op.func.arguments.flat_all}
    first = op.dtypes[0] if op.dtypes else None
    float_dtypes = [d for d in (first[1] if first else ()) if d.startswith(("float", "bfloat"))]
    context: dict[str, Any] = {
        "name": op.name,
        "source": op.source,
        "kinds": kinds,
        "dtype_argument": first[0] if first else None,
        # the dtypes the float tensors of the samples are tested in (float32 for an op without)
        "dtypes": [E.DTYPES[d][1] for d in float_dtypes] or ["torch.float32"],
        "tensor_dtypes": {arg: [E.DTYPES[d][1] for d in ds] for arg, ds in op.dtypes},
        "outputs": _tensor_outputs(op),
        "samples": op.tests.samples if op.tests else "None",
        "bad_calls": op.tests.bad_calls if op.tests else "[]",
        "reference": _reference_context(op, op.tests.reference if op.tests else None),
        "checks": _checks(op),
        "differentiable_inputs": [], "differentiable_outputs": [], "forward": None,
        "autocast": {"policy": op.autocast.policy, "inputs": list(op.autocast.inputs)} if op.autocast else None,
        "sharding": [s.name for s in op.sharding],
    }
    if op.autograd is not None:
        pair = op.autograd
        context["differentiable_inputs"] = [n for n, _ in pair.grads] + [n for n, _ in pair.formulas]
        context["differentiable_outputs"] = [o for o in _tensor_outputs(op) if o not in pair.non_differentiable]
    if forward is not None and (op.tests is None or op.tests.samples == "None"):
        pair = forward.autograd
        context["forward"] = {
            "name": forward.name,
            "kinds": {a.name: E.kind_of_type(a.type) for a in forward.func.arguments.flat_all},
            "outputs": [r.name or f"result{i}" for i, r in enumerate(forward.func.returns)],
            "samples": forward.tests.samples,
            "reference": _reference_context(forward, forward.tests.reference),
            "inputs": [(arg, src.source, src.name) for arg, src in pair.inputs],
            "grads": list(pair.grads),
            "overrides": {k: ast.literal_eval(v) for k, v in pair.forward_overrides},
            "defaults": "{" + ", ".join(f"{a.name!r}: {py.default(a)}" for a in forward.func.arguments.flat_all
                                        if a.default is not None) + "}",
        }
    return context


def emit(registry: Registry, fm: FileManager) -> list[str]:
    """Writes tests/test_<op>.py for every op with samples (its own or its forward's); returns the ops."""
    ops = []
    for op in registry.ops:
        context = _op_context(registry, op)
        if context is not None:
            fm.write(f"tests/test_{op.name}.py", "op_tests.py.j2", op.source, op=context)
            ops.append(op.name)
    return ops


def generate_tests(registry_path: str, out_dir: str, namespace: str = "op_plugin", display_path: str | None = None,
                   torch_version: str | None = None) -> tuple[FileManager, list[str]]:
    """Writes the generated tests of ``registry_path`` into ``out_dir``/tests (op-plugin test, tests/ops)."""
    import os

    from codegen.file_manager import jinja_environment
    from codegen.parse import load_registry

    registry = load_registry(registry_path, display_path or os.path.basename(registry_path), torch_version)
    fm = FileManager(out_dir, env=jinja_environment(namespace=namespace))
    fm.ops = len(registry.ops)
    ops = emit(registry, fm)
    return fm, ops
