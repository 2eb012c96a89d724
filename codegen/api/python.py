"""Translations into Python: expressions for the fakes, and the wrappers' signatures."""
from __future__ import annotations

import ast
import copy

from torchgen.model import Argument, FunctionSchema

from codegen import expr as E
from codegen.expr import Expr, Message

_PY_FUNCS = {"isfinite": "math.isfinite", "stats_dtype": "_stats_dtype", "upper": "_upper",
             "varlen_numels": "_varlen_numels", "varlen_batches": "_varlen_batches",
             # an unbacked SymInt: FakeTensor mode cannot know what the kernel will return
             "data_dependent": "torch.library.get_ctx().new_dynamic_size"}


class _ToPython(ast.NodeTransformer):
    def visit_Name(self, node: ast.Name) -> ast.expr:
        if node.id in E.DTYPES and node.id not in self.env:
            return ast.parse(E.DTYPES[node.id][1], mode="eval").body
        return node

    def visit_Call(self, node: ast.Call) -> ast.expr:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in _PY_FUNCS:
            node.func = ast.parse(_PY_FUNCS[node.func.id], mode="eval").body
        return node

    def visit_Compare(self, node: ast.Compare) -> ast.expr:
        # A shape may be a torch.Size (a tuple), an int list argument or a list literal, and a tuple
        # never equals a list in Python (C++ compares the sizes): compare shapes as lists.
        is_sequence = E.is_sequence(E.kind_of(node.left))
        self.generic_visit(node)
        if is_sequence and isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
            node.left, node.comparators = self._as_list(node.left), [self._as_list(c) for c in node.comparators]
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.expr:
        # s + t over shapes: torch.Size + list raises in Python, so concatenate by unpacking.
        is_sequence = E.is_sequence(E.kind_of(node))
        self.generic_visit(node)
        if not is_sequence:
            return node
        parts = [side.elts if isinstance(side, ast.List) else [ast.Starred(side, ast.Load())]
                 for side in (node.left, node.right)]
        return ast.List(parts[0] + parts[1], ast.Load())

    @staticmethod
    def _as_list(node: ast.expr) -> ast.expr:
        if isinstance(node, ast.List):
            return node
        return ast.Call(ast.Name("list", ast.Load()), [node], [])

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env


def render(e: Expr, env: dict[str, str]) -> str:
    tree = _ToPython(env).visit(copy.deepcopy(e.tree))  # the copy keeps the kinds the checker recorded
    return ast.unparse(tree)


def message(op_name: str, m: Message, env: dict[str, str]) -> str:
    """A Python expression building the same text as the C++ message."""
    pieces = [repr(f"{op_name}: ")]
    for part in m.parts:
        pieces.append(repr(part) if isinstance(part, str) else f"_fmt({render(part, env)})")
    return " + ".join(pieces)


_PY_TYPES = {E.TENSOR: "Tensor", E.INT: "int", E.FLOAT: "float", E.BOOL: "bool", E.STR: "str",
             E.INT_LIST: "Sequence[int]"}


def annotation(a: Argument, enum: str = "") -> str:
    """The Python type of ``a``; an argument with an ``enum`` takes a member, an int or a name."""
    kind = E.kind_of_type(a.type)
    text = f"Union[{enum}, int, str]" if enum else _PY_TYPES[E.base(kind)]
    return f"Optional[{text}]" if kind.endswith(E.OPTIONAL) else text


def default(a: Argument) -> str:
    """The schema default as a Python literal."""
    d = a.default
    assert d is not None
    if d in ("True", "False", "None"):
        return d
    if d.startswith('"') or d.startswith("'"):
        return repr(ast.literal_eval(d))
    if d.startswith("["):
        return repr(tuple(ast.literal_eval(d)))
    value = ast.literal_eval(d)
    return repr(value)


def wrapper_params(func: FunctionSchema, enums: dict[str, str] | None = None) -> list[str]:
    """``name: type = default`` items with the schema's ``*`` kept; ``enums`` (argument -> enum
    name) types the wrappers' enum arguments."""
    enums = enums or {}
    out: list[str] = []
    for a in func.arguments.flat_positional:
        out.append(_param(a, enums.get(a.name, "")))
    if func.arguments.flat_kwarg_only:
        out.append("*")
        out += [_param(a, enums.get(a.name, "")) for a in func.arguments.flat_kwarg_only]
    return out


def _param(a: Argument, enum: str) -> str:
    text = f"{a.name}: {annotation(a, enum)}"
    return f"{text} = {default(a)}" if a.default is not None else text
