"""The shape constructs of the expression language (docs/registry.md#shapes): what each renderer
writes, and that the Python rendering means what the registry text means, on real tensors and
under torch.compile with symbolic shapes (the fakes' case)."""
from __future__ import annotations

import itertools
import math
import types

import pytest
import torch

from codegen.api import python as py
from codegen.api.cpp import ExprRenderer, render_check
from codegen.api.kernel import KernelExprRenderer
from codegen.expr import ExprError, parse_expr, parse_message
from codegen.model import Check, Location

ENV = {"x": "Tensor", "w": "Tensor?", "size": "int[]", "n": "int"}

# source, binding C++, kernel-API C++, Python
RENDERED = [
    ("x.shape[-1]", "x.size(-1)", "op_plugin::check::size(x, -1)", "x.shape[-1]"),
    ("x.shape[:-1] + [1]",
     "op_plugin::shape_expr::concat(op_plugin::shape_expr::slice(x.sizes(), std::nullopt, -1), std::vector<int64_t>{1})",
     "op_plugin::shape_expr::concat(op_plugin::shape_expr::slice(op_plugin::check::shape(x), std::nullopt, -1), "
     "std::vector<int64_t>{1})",
     "[*x.shape[:-1], 1]"),
    ("len(x.shape) == len(size)", "(static_cast<int64_t>(x.sizes().size()) == static_cast<int64_t>(size.size()))",
     "(op_plugin::check::len(op_plugin::check::shape(x)) == op_plugin::check::len(size))",
     "len(x.shape) == len(size)"),
    ("x.shape[1:] == size", "(op_plugin::shape_expr::slice(x.sizes(), 1, std::nullopt) == size)",
     "(op_plugin::shape_expr::slice(op_plugin::check::shape(x), 1, std::nullopt) == op_plugin::check::ints(size))",
     "list(x.shape[1:]) == list(size)"),
    ("[n] + size", "op_plugin::shape_expr::concat(std::vector<int64_t>{n}, size)",
     "op_plugin::shape_expr::concat(std::vector<int64_t>{n}, op_plugin::check::ints(size))", "[n, *size]"),
    ("size[0]", "op_plugin::shape_expr::at(size, 0)", "op_plugin::shape_expr::at(op_plugin::check::ints(size), 0)",
     "size[0]"),
    # The terms after `w is not None` read w directly; a term before it goes through value_of,
    # which raises if w is None.
    ("w is not None and w.shape[-1] == x.shape[-1]",
     '(w.has_value() && ((*w).size(-1) == x.size(-1)))',
     '((w != nullptr) && (op_plugin::check::size(w, -1) == op_plugin::check::size(x, -1)))',
     "w is not None and w.shape[-1] == x.shape[-1]"),
    ("w.shape[-1] == x.shape[-1] and w is not None",
     '((op_plugin::value_of(w, "w").size(-1) == x.size(-1)) && w.has_value())',
     '((op_plugin::check::size(op_plugin::check::value_of(w, "w"), -1) == op_plugin::check::size(x, -1)) && '
     '(w != nullptr))',
     "w.shape[-1] == x.shape[-1] and w is not None"),
    ("(w is not None or n == 0) and w.shape[-1] == 1",
     '((w.has_value() || (n == 0)) && (op_plugin::value_of(w, "w").size(-1) == 1))',
     '(((w != nullptr) || (n == 0)) && (op_plugin::check::size(op_plugin::check::value_of(w, "w"), -1) == 1))',
     "(w is not None or n == 0) and w.shape[-1] == 1"),
    # A ternary's body runs where its test held, its else branch where it failed: the branch that
    # `w is not None` / `w is None` proves w in reads it directly, the other keeps value_of.
    ("w.shape[-1] if w is not None else n",
     '(w.has_value() ? (*w).size(-1) : n)',
     '((w != nullptr) ? op_plugin::check::size(w, -1) : n)',
     "w.shape[-1] if w is not None else n"),
    ("n if w is None else w.shape[-1]",
     '(!w.has_value() ? n : (*w).size(-1))',
     '((w == nullptr) ? n : op_plugin::check::size(w, -1))',
     "n if w is None else w.shape[-1]"),
    ("w.shape[-1] if w is None else n",
     '(!w.has_value() ? op_plugin::value_of(w, "w").size(-1) : n)',
     '((w == nullptr) ? op_plugin::check::size(op_plugin::check::value_of(w, "w"), -1) : n)',
     "w.shape[-1] if w is None else n"),
    ("w.shape if w is not None else x.shape[:n]",
     "(w.has_value() ? op_plugin::shape_expr::vec((*w).sizes()) : "
     "op_plugin::shape_expr::slice(x.sizes(), std::nullopt, n))",
     "((w != nullptr) ? op_plugin::shape_expr::vec(op_plugin::check::shape(w)) : "
     "op_plugin::shape_expr::slice(op_plugin::check::shape(x), std::nullopt, n))",
     "w.shape if w is not None else x.shape[:n]"),
    # A view (x.sizes()) and a built vector meet as one vector type.
    ("x.shape if n == 0 else x.shape[:n]",
     "((n == 0) ? op_plugin::shape_expr::vec(x.sizes()) : op_plugin::shape_expr::slice(x.sizes(), std::nullopt, n))",
     "((n == 0) ? op_plugin::shape_expr::vec(op_plugin::check::shape(x)) : "
     "op_plugin::shape_expr::slice(op_plugin::check::shape(x), std::nullopt, n))",
     "x.shape if n == 0 else x.shape[:n]"),
]


@pytest.mark.parametrize(("source", "cpp", "kernel", "python"), RENDERED, ids=[r[0] for r in RENDERED])
def test_shape_constructs_render(source: str, cpp: str, kernel: str, python: str) -> None:
    e = parse_expr(source, ENV)
    assert ExprRenderer(ENV)(e) == cpp
    assert KernelExprRenderer(ENV)(e) == kernel
    assert py.render(e, ENV) == python


def _checks(*rules: tuple[str, str | None], flag: str = "") -> list[Check]:
    """Checks of (expr, when) pairs, each with the message `got {w.dim()}`; ``flag`` ("warn" or
    "strict") marks the first."""
    return [Check(parse_expr(expr, ENV), parse_message("got {w.dim()}", ENV), i == 0 and flag == "strict",
                  parse_expr(when, ENV) if when is not None else None, Location("test.yaml", i + 1),
                  i == 0 and flag == "warn") for i, (expr, when) in enumerate(rules)]


def _rendered(checks: list[Check], field: str = "expr", then: str = "") -> list[tuple[str, str]]:
    """Each check's ``field`` rendered by render_check in order, as the binding and the kernel
    checks render them, then ``then`` as a let after them: a (binding, kernel API) pair each."""
    pairs = []
    for render in (ExprRenderer(ENV), KernelExprRenderer(ENV)):
        texts = [render_check(render, "op", c, "strict()")[field] for c in checks]
        pairs.append(texts + ([render(parse_expr(then, ENV))] if then else []))
    return list(zip(*pairs))


W = ("(*w).dim()", "op_plugin::check::dim(w)")  # w read directly
W_VALUE_OF = ('op_plugin::value_of(w, "w").dim()', 'op_plugin::check::dim(op_plugin::check::value_of(w, "w"))')


def _is_2d(w: tuple[str, str]) -> tuple[str, ...]:
    return tuple(f"({x} == 2)" for x in w)


def test_an_earlier_rule_proves_an_optional_present_for_the_later_ones() -> None:
    """Past `w is not None` (the call stopped where it failed), a later check, its message and a
    let read w directly."""
    checks = _checks(("w is not None", None), ("w.dim() == 2", None))
    assert _rendered(checks, then="w.dim()")[1:] == [_is_2d(W), W]
    assert _rendered(checks, "message")[1] == (f'"op: ", "got ", op_plugin::fmt({W[0]})',
                                               f'"got ", op_plugin::check::fmt({W[1]})')


def test_an_earlier_rule_under_a_when_proves_only_where_that_when_holds() -> None:
    """Under `when: n == 0`: a later rule with that same `when`, and the branch of a ternary that
    tests it, read w directly; a rule with another `when` or none, and the other branch, keep value_of."""
    checks = _checks(("w is not None and w.dim() > 0", "n == 0"), ("w.dim() == 2", "n == 0"),
                     ("w.dim() == 2", "n == 1"), ("w.dim() == 2", None))
    assert _rendered(checks, then="w.dim() if n == 0 else w.dim()")[1:] == [
        _is_2d(W), _is_2d(W_VALUE_OF), _is_2d(W_VALUE_OF),
        tuple(f"((n == 0) ? {direct} : {checked})" for direct, checked in zip(W, W_VALUE_OF))]


def test_a_rule_proves_nothing_for_the_rules_before_it() -> None:
    assert _rendered(_checks(("w.dim() == 2", None), ("w is not None", None)))[0] == _is_2d(W_VALUE_OF)


@pytest.mark.parametrize("flag", ["warn", "strict"])
def test_a_warn_or_strict_rule_proves_nothing(flag: str) -> None:
    """A warn rule does not stop the call (and the binding skips it); a strict one runs only in
    strict mode."""
    checks = _checks(("w is not None", None), ("w.dim() == 2", None), flag=flag)
    assert _rendered(checks)[1] == _is_2d(W_VALUE_OF)


def test_symbolic_rendering_builds_symint_shapes() -> None:
    e = parse_expr("x.shape[:-1] + [n]", ENV)
    assert ExprRenderer(ENV, symbolic=True)(e) == (
        "op_plugin::shape_expr::concat(op_plugin::shape_expr::slice(x.sym_sizes(), std::nullopt, -1), "
        "std::vector<c10::SymInt>{n})")


SHAPE_SOURCES = ["x.shape[:-1] + [1]", "x.shape[1:]", "x.shape[-2:]", "x.shape[:n] + size", "size + x.shape[n:]",
                 "[len(x.shape)] + x.shape[0:1]",
                 "(x.shape + size)[n]", "x.shape[-n:]", "x.shape[n:-1] == size", "len(x.shape[n:] + [n, n])"]


@pytest.mark.parametrize("source", SHAPE_SOURCES)
def test_python_rendering_means_what_the_text_means(source: str) -> None:
    """The registry text read as Python over lists is the meaning; the rendering runs over a
    torch.Size and int lists and must agree, for every rank and every n in range."""
    e = parse_expr(source, ENV)
    rendered = py.render(e, ENV)
    for rank, n in itertools.product(range(0, 4), range(-3, 4)):
        dims = [2 + i for i in range(rank)]
        size = [7, 8][: (n % 2) + 1]
        as_lists = types.SimpleNamespace(shape=list(dims))
        try:
            expected = eval(source, {}, {"x": as_lists, "size": size, "n": n})  # noqa: S307
        except IndexError:
            with pytest.raises(IndexError):
                eval(rendered, {"math": math}, {"x": torch.empty(dims), "size": size, "n": n})  # noqa: S307
            continue
        got = eval(rendered, {"math": math}, {"x": torch.empty(dims), "size": size, "n": n})  # noqa: S307
        assert (list(got) if isinstance(got, (list, tuple)) else got) == expected, (source, rank, n)


def test_fake_shapes_stay_symbolic_under_torch_compile() -> None:
    """A fake built from rendered shape rules, compiled with dynamic shapes: one graph serves
    every size, and the outputs have the rules' shapes."""
    env = {"x": "Tensor"}
    y_shape = py.render(parse_expr("x.shape[:-1] + [1]", env), env)
    z_shape = py.render(parse_expr("[x.shape[-1]] + x.shape[1:-1]", env), env)

    @torch.library.custom_op("op_plugin_expr_test::split_stats", mutates_args=())
    def split_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.sum(-1, keepdim=True), x.movedim(-1, 0).sum(1).reshape(x.shape[-1], *x.shape[1:-1])

    @split_stats.register_fake
    def _(x):
        return x.new_empty(eval(y_shape)), x.new_empty(eval(z_shape))  # noqa: S307

    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    compiled = torch.compile(split_stats, backend=counter, dynamic=True, fullgraph=True)
    for shape in [(2, 3, 4), (3, 5, 6), (4, 2, 7)]:
        x = torch.randn(shape)
        y, z = compiled(x)
        assert list(y.shape) == [*shape[:-1], 1] and list(z.shape) == [shape[-1], *shape[1:-1]]
    assert counter.frame_count == 1


def test_out_of_range_slices_are_python_slices() -> None:
    e = parse_expr("len(x.shape[5:]) == 0", ENV)
    assert eval(py.render(e, ENV), {}, {"x": torch.empty(2, 3)})  # noqa: S307


def test_a_shape_is_not_a_number() -> None:
    with pytest.raises(ExprError, match="a shape takes only \\+ with another shape or int list"):
        parse_expr("x.shape - [1]", ENV)
