"""An entry's ``autograd:`` pairing, parsed and resolved in one pass against its backward op.

Every name is resolved as it is read: a backward argument's source is a forward input, a forward
output or ``grad(output)``; a gradient is a backward output or a formula of
csrc/bindings/autograd_formulas.h over such sources. The pairing needs the backward's schema, so
it is parsed after every entry's schema (parse.py), and the AutogradPair is built once, complete.
"""
from __future__ import annotations

import ast
from typing import Any, Optional

from torchgen.model import FunctionSchema

from codegen import expr as E
from codegen.model import AutogradPair, BackwardInput, Formula, Location, outputs_shaped_by
from codegen.parse_common import Errors, keys_of, kind_or_empty, line_of, see

AUTOGRAD_KEYS = {"backward", "inputs", "grads", "non_differentiable", "forward_overrides"}


class _Forward:
    """What the pairing reads of its forward: argument kinds and output names and kinds."""

    def __init__(self, func: FunctionSchema) -> None:
        self.name = str(func.name)
        self.kinds = {a.name: kind_or_empty(a.type) for a in func.arguments.flat_all}
        self.outputs = [r.name or f"result{j}" for j, r in enumerate(func.returns)]
        self.output_kinds = {n: kind_or_empty(r.type) for n, r in zip(self.outputs, func.returns)}

    def source(self, name: str) -> Optional[BackwardInput]:
        """A plain name as a source: a forward input, else a forward output, else None."""
        if name in self.kinds:
            return BackwardInput("input", name)
        if name in self.outputs:
            return BackwardInput("output", name)
        return None

    def kind(self, src: BackwardInput) -> str:
        if src.source == "input":
            return self.kinds[src.name]
        return self.output_kinds[src.name] if src.source == "output" else E.TENSOR


def parse_autograd(entry: dict[str, Any], fields: dict[str, Any], funcs: dict[str, FunctionSchema],
                   path: str, errors: Errors) -> Optional[AutogradPair]:
    """The pairing of ``entry`` (its raw YAML; ``fields``: its parsed OpEntry fields), or None when
    it has none or it has errors (reported). ``funcs``: every op's schema, by name."""
    spec = entry.get("autograd")
    if spec is None:
        return None
    fwd = _Forward(fields["func"])
    op = fwd.name
    line = line_of(entry, "autograd")
    if not isinstance(spec, dict):
        errors.add(line, op, "'autograd:' must be a mapping")
        return None
    count = len(errors.items)
    for k in keys_of(spec):
        if k not in AUTOGRAD_KEYS:
            errors.add(line_of(spec, k), op, f"unknown autograd key {k!r}; known: {', '.join(sorted(AUTOGRAD_KEYS))}{see('autograd')}")
    backward = spec.get("backward")
    if not isinstance(backward, str):
        errors.add(line, op, "autograd needs 'backward: <op name>'")
        return None
    inputs_spec = spec.get("inputs", {}) or {}
    grads_spec = spec.get("grads", {}) or {}
    non_diff = spec.get("non_differentiable", []) or []
    overrides_spec = spec.get("forward_overrides", {}) or {}
    if not isinstance(inputs_spec, dict) or not isinstance(grads_spec, dict) or not isinstance(non_diff, list):
        errors.add(line, op, "autograd: inputs and grads are mappings, non_differentiable a list")
        return None
    if not isinstance(overrides_spec, dict):
        errors.add(line_of(spec, "forward_overrides", line), op, "autograd.forward_overrides must be a mapping")
        overrides_spec = {}
    bwd = funcs.get(backward)
    if bwd is None:
        errors.add(line_of(spec, "backward", line), op, f"autograd: backward op {backward!r} is not in the registry")
        return None

    def at(key: str, sub: Optional[str] = None) -> int:
        """The line of ``key`` (of ``key``'s entry ``sub``), else of the autograd: key."""
        if sub is not None and isinstance(spec.get(key), dict):
            return line_of(spec[key], sub, line_of(spec, key, line))
        return line_of(spec, key, line)

    inputs = _inputs(fwd, bwd, inputs_spec, at, op, errors)
    grads, formulas = _grads(fwd, bwd, grads_spec, at, op, errors)
    overrides = _overrides(fwd, overrides_spec, at, op, errors)
    non_differentiable = tuple(str(x) for x in non_diff)
    for out in non_differentiable:
        if out not in fwd.outputs:
            errors.add(at("non_differentiable"), op, f"autograd.non_differentiable: {out!r} is not an output of {op}")
    for out in outputs_shaped_by(fields["rules"], fields["outputs"], {name for name, _ in overrides}):
        if out not in non_differentiable:
            errors.add(at("forward_overrides"), op,
                       f"autograd.forward_overrides: output {out!r} depends on them, so it is returned "
                       "zero-filled to the caller; it must be listed under non_differentiable")
    if len(errors.items) > count:
        return None
    return AutogradPair(backward=backward, inputs=tuple(inputs), grads=tuple(grads),
                        non_differentiable=non_differentiable, loc=Location(path, line),
                        formulas=tuple(formulas), forward_overrides=tuple(overrides))


def _inputs(fwd: _Forward, bwd: FunctionSchema, spec: dict[str, Any], at: Any, op: str,
            errors: Errors) -> list[tuple[str, BackwardInput]]:
    """The source of each backward argument, in backward order: named under ``inputs:``, else the
    forward input or output of its name; an argument with none keeps its default."""
    bwd_name = str(bwd.name)
    bwd_args = bwd.arguments.flat_all
    explicit = {str(k): str(spec[k]).strip() for k in keys_of(spec)}
    for name in explicit:
        if name not in {a.name for a in bwd_args}:
            errors.add(at("inputs", name), op, f"autograd.inputs: {name!r} is not an argument of {bwd_name}")
    resolved = []
    for a in bwd_args:
        line = at("inputs", a.name)
        text = explicit.get(a.name)
        if text is None:
            src = fwd.source(a.name)
            if src is None:
                if a.default is None:
                    errors.add(at("inputs"), op,  # the inputs: key, else the autograd: mapping
                               f"autograd: no source for {bwd_name} argument {a.name!r}; name it under autograd.inputs")
                continue  # the backward's default applies
        elif text.startswith("grad(") and text.endswith(")"):
            src = BackwardInput("grad", text[5:-1].strip())
            if src.name not in fwd.outputs:
                errors.add(line, op, f"autograd.inputs: grad({src.name}) names no output of {op}")
                continue
        else:
            src = fwd.source(text)
            if src is None:
                errors.add(line, op, f"autograd.inputs: {text!r} is neither an input nor an output of {op}")
                continue
        got, want = fwd.kind(src), kind_or_empty(a.type)
        if want and got and E.base(want) != E.base(got):
            what = f"grad({src.name})" if src.source == "grad" else f"{src.source} {src.name!r}"
            errors.add(line, op, f"autograd: {bwd_name} argument {a.name!r} is a {want}, but its source {what} is a {got}")
        resolved.append((a.name, src))
    return resolved


def _grads(fwd: _Forward, bwd: FunctionSchema, spec: dict[str, Any], at: Any, op: str,
           errors: Errors) -> tuple[list[tuple[str, str]], list[tuple[str, Formula]]]:
    """``grads:``: forward input -> a backward output, or a formula f(name, grad(output), ...)."""
    bwd_outputs = [r.name or f"result{j}" for j, r in enumerate(bwd.returns)]
    grads, formulas = [], []
    for k in keys_of(spec):
        fwd_in, value, line = str(k), str(spec[k]).strip(), at("grads", k)
        if "(" not in value:
            if fwd_in not in fwd.kinds:
                errors.add(line, op, f"autograd.grads: {fwd_in!r} is not an input of {op}")
            elif E.base(fwd.kinds[fwd_in]) != E.TENSOR:
                errors.add(line, op, f"autograd.grads: {fwd_in!r} is a {fwd.kinds[fwd_in]}, not a tensor input")
            if value not in bwd_outputs:
                errors.add(line, op, f"autograd.grads: {value!r} is not an output of {bwd.name}")
            grads.append((fwd_in, value))
            continue
        formula, problems = _formula(value, fwd, fwd_in, op)
        if formula is None:
            errors.add(line, op, f"autograd.grads: {k}: {value!r} is neither a backward "
                       "output nor a call f(name, grad(output), ...) of csrc/bindings/autograd_formulas.h")
            continue
        if fwd_in not in fwd.kinds or E.base(fwd.kinds[fwd_in]) != E.TENSOR:
            errors.add(line, op, f"autograd.grads: {fwd_in!r} is not a tensor input of {op}")
        for problem in problems:
            errors.add(line, op, problem)
        formulas.append((fwd_in, formula))
    return grads, formulas


def _formula(text: str, fwd: _Forward, fwd_in: str, op: str) -> tuple[Optional[Formula], list[str]]:
    """``f(a, grad(out), ...)`` with its names resolved and the problems of those names, or None
    when ``text`` is not such a call."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return None, []
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.keywords:
        return None, []
    args, problems = [], []
    for a in node.args:
        if isinstance(a, ast.Name):
            src = fwd.source(a.id)
            if src is None:
                problems.append(f"autograd.grads: {fwd_in}: {a.id!r} is neither an input nor an output of {op}")
                continue
        elif (isinstance(a, ast.Call) and isinstance(a.func, ast.Name) and a.func.id == "grad"
              and len(a.args) == 1 and isinstance(a.args[0], ast.Name) and not a.keywords):
            src = BackwardInput("grad", a.args[0].id)
            if src.name not in fwd.outputs:
                problems.append(f"autograd.grads: grad({src.name}) names no output of {op}")
        else:
            return None, []
        args.append(src)
    return Formula(node.func.id, tuple(args)), problems


def _overrides(fwd: _Forward, spec: dict[str, Any], at: Any, op: str, errors: Errors) -> list[tuple[str, str]]:
    """``forward_overrides:``: forward argument -> the literal the Autograd kernel runs it with."""
    overrides = []
    for k in keys_of(spec):
        name, value = str(k), spec[k]
        if not isinstance(value, (bool, int, float, str)):
            errors.add(at("forward_overrides", k), op,
                       f"autograd.forward_overrides: {k}: {value!r} must be a bool, int, float or str literal")
            continue
        kind = fwd.kinds.get(name)
        if kind is None:
            errors.add(at("forward_overrides"), op, f"autograd.forward_overrides: {name!r} is not an argument of {op}")
        elif E.base(kind) != {bool: E.BOOL, int: E.INT, float: E.FLOAT, str: E.STR}[type(value)]:
            errors.add(at("forward_overrides"), op, f"autograd.forward_overrides: {name!r} is a {kind}, "
                       f"but {value!r} is not")
        overrides.append((name, repr(value)))
    return overrides
