"""The registry's expression language: restrictions and shape rules, written once.

Expressions are a small, checked subset of Python syntax. They are parsed with ``ast``,
type-checked against the op's arguments, and rendered by ``api/cpp.py`` into the C++
binding and by ``api/python.py`` into the fake function, so the two cannot drift.

    partial_block.dim() == 2
    block_res.size(0) == T and block_res.dtype == partial_block.dtype
    cu_seqlens_q is None or cu_seqlens_q.dim() == 1
    upper(input_layout) in ("BSH", "SBH", "BSND", "BNSD", "TND")
    [T, N + 1]                         (an output shape)

Shapes are sequences of ints: ``x.shape``, list literals ``[T, H]`` and ``int[]`` arguments. They
index (``x.shape[-1]``), slice (``x.shape[1:]``, ``x.shape[:-1]``; negative bounds count from the
end, open ends run to it, no step), concatenate (``x.shape[:-1] + [1]``), compare with ``==`` and
``!=`` and have a ``len()``; docs/registry.md is the reference of every construct.

Names are the op's arguments, ``let`` names, and the dtype names below. Methods: ``dim()``,
``size(i)``, ``numel()`` and the attributes ``dtype``, ``shape`` of tensors. Functions:
``len``, ``min``, ``max``, ``isfinite``, ``upper``, ``stats_dtype``, ``varlen_numels(q, kv)`` (the
sum over sequences of Sq*Skv for cumulative lengths without a leading 0), ``varlen_batches(q)`` (the
number of sequences of such a list: a trailing run of zeros drops batches) and ``data_dependent()``
(an int output known only when the kernel runs; int output values only). ``//`` and ``%`` are meant
for non-negative operands (C++ truncates, Python floors).
"""
from __future__ import annotations

import ast
import string
from dataclasses import dataclass
from typing import Union

from torchgen.model import BaseTy, BaseType, ListType, OptionalType, Type

# Kinds: what an expression evaluates to.
TENSOR, INT, FLOAT, BOOL, STR, DTYPE, SHAPE, INT_LIST, NONE = (
    "Tensor", "int", "float", "bool", "str", "dtype", "shape", "int[]", "None")
OPTIONAL = "?"  # suffix: "Tensor?" is an optional tensor

DTYPES = {  # registry name -> (C++ at::ScalarType, Python torch dtype)
    "float16": ("at::kHalf", "torch.float16"),
    "bfloat16": ("at::kBFloat16", "torch.bfloat16"),
    "float32": ("at::kFloat", "torch.float32"),
    "float64": ("at::kDouble", "torch.float64"),
    "int8": ("at::kChar", "torch.int8"),
    "uint8": ("at::kByte", "torch.uint8"),
    "int32": ("at::kInt", "torch.int32"),
    "int64": ("at::kLong", "torch.int64"),
    "bool_": ("at::kBool", "torch.bool"),
}

FUNCTIONS = {"len", "min", "max", "isfinite", "upper", "stats_dtype", "varlen_numels", "varlen_batches",
             "data_dependent"}


# Errors about what the language has point at its reference.
SEE = "; see docs/registry.md#expressions"


class ExprError(Exception):
    """A malformed or ill-typed expression; the message says what and where."""


def kind_of_type(t: Type) -> str:
    """The expression kind of a schema type, e.g. ``Tensor?`` or ``int[]``."""
    if isinstance(t, OptionalType):
        return kind_of_type(t.elem) + OPTIONAL
    if isinstance(t, ListType) and isinstance(t.elem, BaseType) and t.elem.name in (BaseTy.int, BaseTy.SymInt):
        return INT_LIST
    if isinstance(t, BaseType):
        simple = {BaseTy.Tensor: TENSOR, BaseTy.int: INT, BaseTy.SymInt: INT, BaseTy.float: FLOAT,
                  BaseTy.bool: BOOL, BaseTy.str: STR}
        if t.name in simple:
            return simple[t.name]
    raise ExprError(f"argument type {t} is not supported by op_plugin's codegen")


def base(kind: str) -> str:
    return kind.rstrip(OPTIONAL)


def is_sequence(kind: str) -> bool:
    """A shape or an int list (optional or not): what indexes, slices, concatenates and compares as one."""
    return base(kind) in (SHAPE, INT_LIST)


def kind_of(node: ast.expr) -> str:
    """The kind the checker gave ``node`` (every node of a parsed Expr has one)."""
    return node.op_plugin_kind  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Expr:
    """A parsed, type-checked expression. ``tree`` is read by the renderers only."""

    source: str
    tree: ast.expr
    kind: str

    def __str__(self) -> str:
        return self.source

    def names(self) -> set[str]:
        """Every name the expression reads."""
        return {n.id for n in ast.walk(self.tree) if isinstance(n, ast.Name)}


@dataclass(frozen=True)
class Message:
    """An error text; ``{expr}`` placeholders interpolate the offending values."""

    source: str
    parts: tuple[Union[str, Expr], ...]


def parse_expr(source: str, env: dict[str, str]) -> Expr:
    try:
        tree = ast.parse(source.strip(), mode="eval").body
    except SyntaxError as e:
        raise ExprError(f"cannot parse expression {source!r}: {e.msg}") from None
    kind = _Checker(env, source).kind(tree)
    return Expr(source.strip(), tree, kind)


def parse_message(text: str, env: dict[str, str]) -> Message:
    parts: list[Union[str, Expr]] = []
    try:
        fields = list(string.Formatter().parse(text))
    except ValueError as e:
        raise ExprError(f"bad placeholder in error text {text!r}: {e}") from None
    for literal, field, spec, conversion in fields:
        if literal:
            parts.append(literal)
        if field is not None:
            if spec or conversion:
                raise ExprError(f"format specs are not supported in error text: {{{field}}}")
            parts.append(parse_expr(field, env))
    return Message(text, tuple(parts))


class _Checker:
    def __init__(self, env: dict[str, str], source: str) -> None:
        self.env = env
        self.source = source

    def fail(self, why: str) -> ExprError:
        return ExprError(f"in expression {self.source!r}: {why}")

    def kind(self, node: ast.expr) -> str:
        """The kind of ``node``, also recorded on it for the renderers (``kind_of``)."""
        k = self._kind(node)
        node.op_plugin_kind = k  # type: ignore[attr-defined]
        return k

    def _kind(self, node: ast.expr) -> str:  # noqa: C901 - one case per node type
        if isinstance(node, ast.Constant):
            if node.value is None:
                return NONE
            if isinstance(node.value, bool):
                return BOOL
            if isinstance(node.value, int):
                return INT
            if isinstance(node.value, float):
                return FLOAT
            if isinstance(node.value, str):
                return STR
            raise self.fail(f"unsupported constant {node.value!r}")
        if isinstance(node, ast.Name):
            if node.id in self.env:
                return self.env[node.id]
            if node.id in DTYPES:
                return DTYPE
            raise self.fail(f"unknown name {node.id!r} (not an argument, let, or dtype){SEE}")
        if isinstance(node, ast.Attribute):
            owner = self.kind(node.value)
            if base(owner) != TENSOR or node.attr not in ("dtype", "shape"):
                raise self.fail(f"unsupported attribute .{node.attr} of a {owner}{SEE}")
            return DTYPE if node.attr == "dtype" else SHAPE
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.BoolOp):
            for v in node.values:
                self.expect(v, BOOL)
            return BOOL
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.Not):
                self.expect(node.operand, BOOL)
                return BOOL
            if isinstance(node.op, ast.USub):
                k = self.kind(node.operand)
                if k not in (INT, FLOAT):
                    raise self.fail("unary minus needs a number")
                return k
            raise self.fail("unsupported unary operator")
        if isinstance(node, ast.BinOp):
            if not isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)):
                raise self.fail("only + - * // % are supported")
            left, right = self.kind(node.left), self.kind(node.right)
            if isinstance(node.op, ast.Add) and is_sequence(left) and is_sequence(right):
                return SHAPE  # concatenation: x.shape[:-1] + [1]
            if is_sequence(left) or is_sequence(right):
                raise self.fail(f"a shape takes only + with another shape or int list, got {left} and {right}")
            kinds = {left, right}
            if not kinds <= {INT, FLOAT}:
                raise self.fail("arithmetic needs numbers")
            return FLOAT if FLOAT in kinds else INT
        if isinstance(node, ast.Subscript):
            return self.subscript(node)
        if isinstance(node, ast.Compare):
            return self.compare(node)
        if isinstance(node, ast.IfExp):
            self.expect(node.test, BOOL)
            a, b = self.kind(node.body), self.kind(node.orelse)
            if a == b:
                return a
            if base(a) == base(b):  # `x if x is not None else 0`: the value of the optional branch
                return base(a)
            if is_sequence(a) and is_sequence(b):
                return SHAPE
            raise self.fail(f"both branches of a conditional need one type, got {a} and {b}")
        if isinstance(node, ast.List):
            for e in node.elts:
                self.expect(e, INT)
            return SHAPE
        raise self.fail(f"unsupported syntax {type(node).__name__} ({ast.unparse(node)!r}){SEE}")

    def expect(self, node: ast.expr, kind: str) -> None:
        got = self.kind(node)
        if got != kind:
            raise self.fail(f"expected {kind}, got {got} in {ast.unparse(node)!r}")

    def call(self, node: ast.Call) -> str:
        if node.keywords:
            raise self.fail("keyword arguments are not supported")
        if isinstance(node.func, ast.Attribute):  # tensor methods
            owner = self.kind(node.func.value)
            method = node.func.attr
            if base(owner) != TENSOR or method not in ("dim", "size", "numel"):
                raise self.fail(f"unsupported method .{method}() of a {owner}{SEE}")
            want = 1 if method == "size" else 0
            if len(node.args) != want:
                raise self.fail(f".{method}() takes {want} argument(s)")
            for a in node.args:
                self.expect(a, INT)
            return INT
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            raise self.fail(f"unknown function {ast.unparse(node.func)!r}; known: {sorted(FUNCTIONS)}{SEE}")
        name = node.func.id
        arg_kinds = [self.kind(a) for a in node.args]
        if name == "len" and len(arg_kinds) == 1 and is_sequence(arg_kinds[0]):
            return INT
        if name in ("min", "max") and len(arg_kinds) == 2 and set(arg_kinds) <= {INT}:
            return INT
        if name == "isfinite" and arg_kinds in ([FLOAT], [INT]):
            return BOOL
        if name == "upper" and len(arg_kinds) == 1 and base(arg_kinds[0]) == STR:
            return STR
        if name == "stats_dtype" and len(arg_kinds) == 1 and base(arg_kinds[0]) == TENSOR:
            return DTYPE
        if name == "varlen_numels" and len(arg_kinds) == 2 and all(base(k) == INT_LIST for k in arg_kinds):
            return INT
        if name == "varlen_batches" and len(arg_kinds) == 1 and base(arg_kinds[0]) == INT_LIST:
            return INT
        if name == "data_dependent" and not arg_kinds:
            return INT
        raise self.fail(f"wrong arguments for {name}(): {', '.join(arg_kinds)}")

    def compare(self, node: ast.Compare) -> str:
        if len(node.ops) != 1:
            raise self.fail("chained comparisons are not supported; use 'and'")
        op, left, right = node.ops[0], node.left, node.comparators[0]
        lk = self.kind(left)
        if isinstance(op, (ast.Is, ast.IsNot)):
            if not (isinstance(right, ast.Constant) and right.value is None) or not lk.endswith(OPTIONAL):
                raise self.fail("'is None' / 'is not None' apply to optional arguments only")
            return BOOL
        if isinstance(op, (ast.In, ast.NotIn)):
            if not isinstance(right, (ast.Tuple, ast.List)) or not right.elts:
                raise self.fail("'in' needs a literal tuple of values")
            for e in right.elts:
                self.expect(e, base(lk))
            return BOOL
        rk = self.kind(right)
        if is_sequence(lk) and is_sequence(rk):
            lk = rk = SHAPE  # a shape compares with an int list element by element
        if base(lk) != base(rk) and {base(lk), base(rk)} != {INT, FLOAT}:
            raise self.fail(f"cannot compare {lk} with {rk}")
        if base(lk) in (DTYPE, SHAPE, STR, BOOL) and not isinstance(op, (ast.Eq, ast.NotEq)):
            raise self.fail(f"{lk} values compare with == and != only")
        return BOOL

    def subscript(self, node: ast.Subscript) -> str:
        """``s[i]`` (an int; negative i counts from the end) and ``s[a:b]`` (a shape) of a shape or int list."""
        owner = self.kind(node.value)
        if not is_sequence(owner):
            raise self.fail(f"only shapes and int lists index and slice, not a {owner} "
                            f"({ast.unparse(node.value)!r})")
        index = node.slice
        if isinstance(index, ast.Slice):
            if index.step is not None:
                raise self.fail("slices take no step (x.shape[a:b], either end may be left out)")
            for bound in (index.lower, index.upper):
                if bound is not None:
                    self.expect(bound, INT)
            return SHAPE
        if isinstance(index, ast.Tuple):
            raise self.fail("a shape takes one index or one slice")
        self.expect(index, INT)
        return INT
