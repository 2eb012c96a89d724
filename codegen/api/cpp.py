"""Translations into C++: expressions, binding signatures, and the kernel's C prototypes."""
from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence

import ast
import contextlib
import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from torchgen.api import dispatcher
from torchgen.model import BaseTy, BaseType, FunctionSchema, Type

from codegen import expr as E
from codegen.expr import Expr, Message
from codegen.model import Check, OpEntry, Registry

_CMP = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_BIN = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "/", ast.Mod: "%"}


def cpp_string(s: str) -> str:
    """A C++ string literal (JSON escaping is a subset of C++'s)."""
    return json.dumps(s)


def _none_tests(node: ast.expr, test: type, join: type) -> frozenset[str]:
    """The names x of ``node``'s ``x <test> None`` terms, alone or joined by ``join``."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], test) \
            and isinstance(node.left, ast.Name) and isinstance(node.comparators[0], ast.Constant) \
            and node.comparators[0].value is None:
        return frozenset([node.left.id])
    if isinstance(node, ast.BoolOp) and isinstance(node.op, join):
        return frozenset().union(*(_none_tests(v, test, join) for v in node.values))
    return frozenset()


def proven_present(node: ast.expr) -> frozenset[str]:
    """The names ``node`` proves are not None where it holds (``x is not None and ...``)."""
    return _none_tests(node, ast.IsNot, ast.And)


def proven_present_if_false(node: ast.expr) -> frozenset[str]:
    """The names ``node`` proves are not None where it is false (``x is None or ...``)."""
    return _none_tests(node, ast.Is, ast.Or)


def render_check(render: ExprRenderer, op_name: str, rule: Check, strict_guard: str) -> dict[str, Any]:
    """A Check rule's template fields: its guard (``strict_guard`` for strict-mode rules, then its
    ``when``), the check, which runs where the guard holds, and the message, which runs where
    besides the check failed (so both may read the optionals those prove present). Called for each
    rule in order: ``render`` then keeps what the rule proves for the later ones (``passed``)."""
    guards = ([strict_guard] if rule.strict else []) + ([render(rule.when)] if rule.when is not None else [])
    with render.assuming(rule.when):
        expr = render(rule.expr)
    with render.assuming(rule.when, failed=rule.expr):
        message = render.message(op_name, rule.message)
    render.passed(rule)
    return {"let": False, "guard": " && ".join(guards), "expr": expr, "message": message, "warn": rule.warn}


class ExprRenderer:
    """Renders a checked expression; ``env`` gives each name's kind (for optional access).

    ``symbolic`` renders sizes as c10::SymInt (``sym_size``, ``sym_sizes``): the surface of the
    shape rules the Autograd kernel evaluates, which also runs on fake tensors with symbolic shapes.
    """

    namespace = "op_plugin::"  # of the helpers (one_of): csrc/bindings/torch_glue.h

    def __init__(self, env: dict[str, str], symbolic: bool = False) -> None:
        self.env = env
        self.symbolic = symbolic
        # Optionals known not to be None where the expression being rendered is evaluated (a
        # rule's guard, the earlier terms of an `and`, a ternary's test, the earlier rules that
        # passed): read directly, without value_of's test.
        self.present: frozenset[str] = frozenset()
        # What earlier rules with a `when` proved present, by that `when`'s source: see passed().
        self.present_when: dict[str, frozenset[str]] = {}

    def _learn(self, node: ast.expr | None, holds: bool) -> None:
        """Add to ``present`` what ``node`` proves where it evaluates to ``holds``: its own None
        tests, and where it holds and is an earlier rule's `when`, what that rule proved."""
        if node is None:
            return
        if holds:
            self.present |= proven_present(node) | self.present_when.get(ast.unparse(node), frozenset())
        else:
            self.present |= proven_present_if_false(node)

    def passed(self, rule: Check) -> None:
        """Record that ``rule`` passed, for what is rendered after it. The binding and the kernel
        checks both evaluate the rules in order, then the outputs, and stop at the first rule that
        fails; so what follows may read what its check proves present: anywhere if it has no
        `when`, else where that same `when` holds (it reads arguments and earlier lets, which do
        not change, so it has the same value there as when the rule ran). A warn rule proves
        nothing (it does not stop the call, and the binding skips it), nor does a strict one (it
        runs only in strict mode)."""
        if rule.warn or rule.strict:
            return
        proved = proven_present(rule.expr.tree)
        if rule.when is None:
            self.present |= proved
        else:
            when = ast.unparse(rule.when.tree)
            self.present_when[when] = self.present_when.get(when, frozenset()) | proved

    @contextlib.contextmanager
    def _knowing(self, node: ast.expr | None, holds: bool) -> Iterator[None]:
        """Render, inside, where ``node`` evaluated to ``holds``."""
        saved = self.present
        self._learn(node, holds)
        try:
            yield
        finally:
            self.present = saved

    @contextlib.contextmanager
    def assuming(self, proof: Expr | None, failed: Expr | None = None) -> Iterator[None]:
        """Render, inside, where ``proof`` (a rule's guard) holds and ``failed`` (its check, for the
        message) does not."""
        with self._knowing(proof.tree if proof is not None else None, True), \
                self._knowing(failed.tree if failed is not None else None, False):
            yield

    def __call__(self, e: Expr) -> str:
        return self.render(e.tree)

    def kind(self, node: ast.expr) -> str:
        return E._Checker(self.env, ast.unparse(node)).kind(node)

    def value(self, node: ast.expr) -> str:
        """A name's value. Optionals are dereferenced through op_plugin::value_of, which raises
        (rather than reading an empty optional) when a rule forgot its `is not None` guard, or
        directly where a guard proves them present."""
        text = self.render(node)
        if isinstance(node, ast.Name) and self.env.get(node.id, "").endswith(E.OPTIONAL):
            if node.id in self.present:
                return f"(*{text})"
            return f"op_plugin::value_of({text}, {cpp_string(text)})"
        return text

    def seq(self, node: ast.expr) -> str:
        """A shape or int list, as the shape operations (op_plugin/shape_expr.h) take it."""
        return self.value(node)

    def size(self, tensor: ast.expr, index: ast.expr) -> str:
        """``x.shape[i]``: the tensor's own size accessor (negative i counts from the end)."""
        method = "sym_size" if self.symbolic else "size"
        return f"{self.value(tensor)}.{method}({self.value(index)})"

    def subscript(self, node: ast.Subscript) -> str:
        index = node.slice
        if isinstance(index, ast.Slice):
            lower, upper = (self.value(b) if b is not None else "std::nullopt" for b in (index.lower, index.upper))
            return f"op_plugin::shape_expr::slice({self.seq(node.value)}, {lower}, {upper})"
        if isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
            return self.size(node.value.value, index)
        return f"op_plugin::shape_expr::at({self.seq(node.value)}, {self.value(index)})"

    def render(self, node: ast.expr) -> str:  # noqa: C901 - one case per node type
        if isinstance(node, ast.Subscript):
            return self.subscript(node)
        if isinstance(node, ast.BinOp) and E.is_sequence(E.kind_of(node)):
            return f"op_plugin::shape_expr::concat({self.seq(node.left)}, {self.seq(node.right)})"
        if isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.Eq, ast.NotEq)) \
                and E.is_sequence(E.kind_of(node.left)):
            op = "==" if isinstance(node.ops[0], ast.Eq) else "!="
            return f"({self.seq(node.left)} {op} {self.seq(node.comparators[0])})"
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool):
                return "true" if node.value else "false"
            if isinstance(node.value, str):
                return cpp_string(node.value)
            if isinstance(node.value, int):
                return str(node.value)
            return repr(float(node.value))
        if isinstance(node, ast.Name):
            if node.id in E.DTYPES and node.id not in self.env:
                return E.DTYPES[node.id][0]
            return node.id
        if isinstance(node, ast.Attribute):
            owner = self.value(node.value)
            if node.attr == "dtype":
                return f"{owner}.scalar_type()"
            return f"{owner}.sym_sizes()" if self.symbolic else f"{owner}.sizes()"
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute):
                args = ", ".join(self.render(a) for a in node.args)
                method = node.func.attr
                if self.symbolic and method in ("size", "numel"):
                    method = "sym_" + method
                return f"{self.value(node.func.value)}.{method}({args})"
            name = node.func.id  # type: ignore[attr-defined]
            args = ", ".join(self.value(a) for a in node.args)
            if name == "len":
                return f"static_cast<int64_t>({self.seq(node.args[0])}.size())"
            if name in ("min", "max"):
                return f"std::{name}<int64_t>({args})"
            if name == "isfinite":
                return f"std::isfinite(static_cast<double>({args}))"
            if name == "data_dependent":
                raise E.ExprError("data_dependent() is only for int output values (the kernel computes them)")
            return f"op_plugin::{name}({args})"  # upper, stats_dtype, varlen_*: csrc/bindings/torch_glue.h
        if isinstance(node, ast.BoolOp):
            # Evaluated left to right: a later term of `and` runs where the earlier ones held, of
            # `or` where they failed, and may read what those prove present.
            is_and = isinstance(node.op, ast.And)
            saved, terms = self.present, []
            try:
                for v in node.values:
                    terms.append(self.render(v))
                    self._learn(v, is_and)
            finally:
                self.present = saved
            return "(" + (" && " if is_and else " || ").join(terms) + ")"
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
                return f"-{self.render(node.operand)}"  # a negative literal: x.shape[-1]
            return ("!" if isinstance(node.op, ast.Not) else "-") + f"({self.render(node.operand)})"
        if isinstance(node, ast.BinOp):
            return f"({self.value(node.left)} {_BIN[type(node.op)]} {self.value(node.right)})"
        if isinstance(node, ast.Compare):
            op, left, right = node.ops[0], node.left, node.comparators[0]
            if isinstance(op, (ast.Is, ast.IsNot)):
                return ("!" if isinstance(op, ast.Is) else "") + f"{self.render(left)}.has_value()"
            if isinstance(op, (ast.In, ast.NotIn)):
                alts = "".join(f", {self.render(x)}" for x in right.elts)  # type: ignore[attr-defined]
                test = f"{self.namespace}one_of({self.value(left)}{alts})"
                return test if isinstance(op, ast.In) else f"!{test}"
            return f"({self.value(left)} {_CMP[type(op)]} {self.value(right)})"
        if isinstance(node, ast.IfExp):
            if E.is_sequence(E.kind_of(node)):
                # A view (x.sizes(), an int[] argument) and a vector meet as a vector: a view of the
                # vector temporary would dangle.
                def is_view(b: ast.expr) -> bool:
                    return isinstance(b, (ast.Attribute, ast.Name))

                def branch(b: ast.expr) -> str:
                    mixed = is_view(b) and not (is_view(node.body) and is_view(node.orelse))
                    return f"op_plugin::shape_expr::vec({self.seq(b)})" if mixed else self.seq(b)
            elif E.base(self.kind(node.body)) == self.kind(node):  # both branches give a plain value
                branch = self.value
            else:
                branch = self.render
            # The body runs where the test held, the else branch where it failed: each may read what
            # that proves present (`x.shape if x is not None else ...`).
            with self._knowing(node.test, True):
                body = branch(node.body)
            with self._knowing(node.test, False):
                orelse = branch(node.orelse)
            return f"({self.render(node.test)} ? {body} : {orelse})"
        if isinstance(node, ast.List):
            element = "c10::SymInt" if self.symbolic else "int64_t"
            return f"std::vector<{element}>{{" + ", ".join(self.value(x) for x in node.elts) + "}"
        raise AssertionError(f"unchecked node {ast.dump(node)}")

    def message(self, op_name: str, m: Message) -> str:
        """The argument list of TORCH_CHECK's message: literals and op_plugin::fmt(value) pieces."""
        pieces = [cpp_string(f"{op_name}: ")]
        for part in m.parts:
            pieces.append(cpp_string(part) if isinstance(part, str) else f"op_plugin::fmt({self.value(part.tree)})")
        return ", ".join(pieces)


def let_type(kind: str) -> str:
    return {E.INT: "const int64_t", E.FLOAT: "const double", E.BOOL: "const bool",
            E.DTYPE: "const at::ScalarType", E.STR: "const std::string"}.get(kind, "const auto")


# ---- binding signatures (torchgen's dispatcher API: what m.impl expects) ----------------------

@dataclass(frozen=True)
class BindingArg:
    name: str
    cpp_type: str  # the dispatcher C++ type, e.g. `const ::std::optional<at::Tensor> &`
    kind: str


def binding_args(func: FunctionSchema) -> list[BindingArg]:
    by_name = {a.name: a for a in func.arguments.flat_all}
    return [BindingArg(b.name, b.type, E.kind_of_type(by_name[b.name].type))
            for b in dispatcher.arguments(func)]


def symbolic_int_args(registry: Registry, op: OpEntry) -> frozenset[str]:
    """The int arguments of ``op`` that a forward's autograd pairing feeds from its int outputs."""
    return frozenset(arg for fwd in registry.ops if fwd.autograd is not None and fwd.autograd.backward == op.name
                     for arg, src in fwd.autograd.inputs
                     if src.source == "output" and src.name in {o.name for o in fwd.int_outputs})


def registered_func(func: FunctionSchema, symbolic_args: Collection[str] = ()) -> FunctionSchema:
    """The schema op_plugin registers: the registry's, with its int returns, and the int arguments
    that receive them through autograd (``symbolic_args``), as SymInt.

    Under torch.compile and torch.export an int output is symbolic (the fake kernel's expression of
    the input sizes, or an unbacked size). Taken as an int64_t anywhere on the way (the Autograd
    kernel's typed redispatch, or torch's Python-to-IValue conversion of an ``int`` argument when
    the backward is traced) it is guarded on, which pins every size it reads: one graph per shape.
    aten declares such values SymInt (_scaled_dot_product_flash_attention's max_q); c10 matches a
    kernel's return types exactly, so the registered schema says SymInt. Python callers still get
    and pass plain ints, and the kernels' int64_t arguments need no change."""
    def sym(t: Type) -> Type:
        return BaseType(BaseTy.SymInt) if t == BaseType(BaseTy.int) else t

    returns = tuple(dataclasses.replace(r, type=sym(r.type)) for r in func.returns)
    groups = {f.name: tuple(dataclasses.replace(a, type=sym(a.type)) if a.name in symbolic_args else a
                            for a in getattr(func.arguments, f.name))
              for f in dataclasses.fields(func.arguments)
              if f.name in ("pre_self_positional", "post_self_positional", "pre_tensor_options_kwarg_only",
                            "post_tensor_options_kwarg_only", "out")}
    return dataclasses.replace(func, returns=returns, arguments=dataclasses.replace(func.arguments, **groups))


def registered_arg_types(registry: Registry, op: OpEntry) -> list[str]:
    """The C++ type of each of ``op``'s binding_args as registered: c10::SymInt for the int arguments
    an autograd pairing feeds from a forward's int outputs (symbolic_int_args), else its own."""
    symbolic = symbolic_int_args(registry, op)
    return ["c10::SymInt" if a.name in symbolic else a.cpp_type for a in binding_args(op.func)]


def binding_returns(func: FunctionSchema) -> str:
    """The C++ return type of the op's kernels and typed handles (int returns as c10::SymInt)."""
    return dispatcher.returns_type(registered_func(func).returns, symint=True).cpp_type()


# ---- the kernel's C API ---------------------------------------------------------------------

_KERNEL_TYPES = {E.TENSOR: "const opTensor*", E.TENSOR + E.OPTIONAL: "const opTensor*",
                 E.INT: "int64_t", E.FLOAT: "double", E.BOOL: "bool", E.STR: "const char*",
                 E.STR + E.OPTIONAL: "const char*", E.INT + E.OPTIONAL: "const int64_t*",
                 E.FLOAT + E.OPTIONAL: "const double*", E.INT_LIST: "const opIntArray*",
                 E.INT_LIST + E.OPTIONAL: "const opIntArray*"}


@dataclass(frozen=True)
class KernelParam:
    """One parameter of <Kernel>GetWorkspaceSize and how the binding passes it."""

    name: str
    c_type: str
    kind: str
    is_output: bool


def kernel_params(func: FunctionSchema, output_names: Sequence[str], int_output_names: Sequence[str] = (),
                  random: bool = False) -> list[KernelParam]:
    """Inputs in schema order; with ``random:``, the seed and offset the binding drew; then the
    output tensors and the int outputs the kernel writes."""
    params = []
    for a in func.arguments.flat_all:
        kind = E.kind_of_type(a.type)
        params.append(KernelParam(a.name, _KERNEL_TYPES[kind], kind, False))
    if random:
        params += [KernelParam(n, "uint64_t", "rng", False) for n in ("rng_seed", "rng_offset")]
    params += [KernelParam(n, "opTensor*", E.TENSOR, True) for n in output_names]
    params += [KernelParam(n, "int64_t*", E.INT, True) for n in int_output_names]
    return params


def kernel_signature(kernel: str, params: list[KernelParam]) -> str:
    args = ", ".join(f"{p.c_type} {p.name}" for p in params)
    return f"opStatus {kernel}GetWorkspaceSize({args}, uint64_t* workspace_size, opExecutor** executor)"

