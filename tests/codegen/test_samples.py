"""The test keys of an entry (samples:, reference:, bad_calls:) and the tests generated from them."""
# ruff: noqa: E501 - pinned messages stay whole
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from codegen.dest import tests as generated_tests
from codegen.parse import RegistryError, parse_registry

PAIR = """\
- func: f(Tensor x, Tensor w, int n=-1, str mode="a") -> (Tensor y, Tensor stat)
  kernel: F
  dtypes: {x: [float32, float64]}
  checks:
    - {expr: x.dim() == 2, error: "x must be 2D, but got {x.dim()}D"}
    - let: {H: x.size(1)}
    - {expr: w.dim() == 1 and w.size(0) == H, error: "w must be [H] = [{H}], but got {w.shape}"}
    - {expr: w.dtype == x.dtype, error: "w must have x's dtype"}
    - {expr: n == -1 or n == 3, error: "n must be -1 or 3, but got {n}"}
    - {expr: "mode in ('a', 'b')", error: "mode must be a or b, but got {mode}"}
  outputs: {y: {like: x}, stat: {shape: "[x.size(0)]", dtype: float32}}
  autograd:
    backward: f_grad
    inputs: {grad_y: grad(y)}
    grads: {x: grad_x}
    non_differentiable: [stat]
  samples:
    - {x: [3, 4], w: {shape: [4], range: [0.5, 1.5]}}
    - {x: [2, 4], w: {like: x, dtype: float64}, n: 3, mode: b}
  reference: {call: "pkg.refs.f(x, w, n=n)", returns: [y]}
- func: f_grad(Tensor x, Tensor w, Tensor grad_y, int n=-1) -> Tensor grad_x
  kernel: FGrad
  outputs: {grad_x: {like: x}}
"""


def test_samples_and_reference_are_parsed() -> None:
    op = parse_registry(PAIR, "reg.yaml").op("f")
    assert ast.literal_eval(op.tests.samples)[1] == {"x": [2, 4], "w": {"like": "x", "dtype": "float64"}, "n": 3, "mode": "b"}
    assert (op.tests.reference.module, op.tests.reference.returns) == ("pkg.refs", ("y",))


def test_a_dotted_path_is_called_with_every_argument() -> None:
    text = PAIR.replace('{call: "pkg.refs.f(x, w, n=n)", returns: [y]}', "pkg.refs.f")
    ref = parse_registry(text, "reg.yaml").op("f").tests.reference
    assert ref.call == "pkg.refs.f(x=x, w=w, n=n, mode=mode)" and ref.returns == ("y", "stat")


def _errors(text: str) -> list[str]:
    with pytest.raises(RegistryError) as info:
        parse_registry(text, "reg.yaml")
    return info.value.errors


@pytest.mark.parametrize("change,error", [
    (("- {x: [3, 4], w: {shape: [4], range: [0.5, 1.5]}}", "- {x: [3, 4]}"),
     "reg.yaml:18: f: samples[0]: required argument 'w' is missing"),
    (("- {x: [3, 4], w: {shape: [4], range: [0.5, 1.5]}}", "- {x: [3, 4], w: [4], z: 1}"),
     "reg.yaml:18: f: samples[0]: 'z' is not an argument"),
    (("- {x: [3, 4], w: {shape: [4], range: [0.5, 1.5]}}", "- {x: [3, 4], w: {shape: [4], dtype: float8}}"),
     "reg.yaml:18: f: samples[0]: w: dtype 'float8' is none of float16, bfloat16, float32, float64, int8, uint8, int32, int64, bool_"),
    (("- {x: [3, 4], w: {shape: [4], range: [0.5, 1.5]}}", "- {x: [3, 4], w: {shape: [4], like: x}}"),
     "reg.yaml:18: f: samples[0]: w: a tensor needs exactly one of shape:, values:, like:"),
    (("n: 3, mode: b}", "n: 3.5, mode: b}"), "reg.yaml:19: f: samples[1]: n: an int argument takes an int, got 3.5"),
    (('"pkg.refs.f(x, w, n=n)"', '"pkg.refs.f(x, q)"'),
     "reg.yaml:20: f: reference: 'pkg.refs.f(x, q)' reads q, which are not arguments of the op"),
    (("returns: [y]", "returns: [grad_y]"),
     "reg.yaml:20: f: reference: returns must list some of the Tensor outputs y, stat, got ['grad_y']"),
], ids=["missing", "unknown", "dtype", "two_forms", "int", "names", "returns"])
def test_errors(change: tuple[str, str], error: str) -> None:
    assert PAIR.count(change[0]) == 1
    assert _errors(PAIR.replace(*change)) == [error]


def test_generated_module(tmp_path: Path) -> None:
    (tmp_path / "reg.yaml").write_text(PAIR)
    _, ops = generated_tests.generate_tests(str(tmp_path / "reg.yaml"), str(tmp_path))
    assert ops == ["f", "f_grad"]  # the backward gets its forward's samples
    text = (tmp_path / "tests" / "test_f.py").read_text()
    for piece in ("import pkg.refs", "return pkg.refs.f(x, w, n=n)", "def test_f_gradcheck():",
                  "differentiable_inputs=['x']", "differentiable_outputs=['y']", "def test_f_error(check):"):
        assert piece in text, piece
    grad = (tmp_path / "tests" / "test_f_grad.py").read_text()
    assert "forward=testing.ForwardSpec(" in grad and "('grad_y', 'grad', 'y')" in grad
    assert "def test_f_grad_gradcheck" not in grad  # no autograd pairing of its own
    compile(text, "test_f.py", "exec")
    compile(grad, "test_f_grad.py", "exec")


def test_mutations_follow_the_check() -> None:
    checks = {c["message"]: c for c in generated_tests._checks(parse_registry(PAIR, "reg.yaml").op("f"))}
    assert checks["x must be 2D, but got {x.dim()}D"]["mutations"][0] == ("dim", "x")
    # through the let H = x.size(1): w's dim and size, then x's size
    assert checks["w must be [H] = [{H}], but got {w.shape}"]["mutations"][:3] == [("dim", "w"), ("size", "w"), ("dtype", "w")]
    assert ("size", "x") in checks["w must be [H] = [{H}], but got {w.shape}"]["mutations"]
    assert checks["w must have x's dtype"]["mutations"] == [("dtype", "w"), ("dtype", "x")]
    n = checks["n must be -1 or 3, but got {n}"]
    assert n["mutations"] == [("value", "n")] and n["ints"] == [-1, 3]
    assert checks["mode must be a or b, but got {mode}"]["strs"] == ["a", "b"]
    assert checks["x must be 2D, but got {x.dim()}D"]["pattern"] == r"f:\ x\ must\ be\ 2D,\ but\ got\ .*D"


def test_the_test_keys_change_none_of_the_ops_compiled_files(tmp_path: Path) -> None:
    """Editing samples:, reference: or bad_calls: rewrites no file of the op that is compiled."""
    from codegen.generate import generate

    bare = PAIR.replace(PAIR[PAIR.index("  samples:"):PAIR.index("- func: f_grad")], "")
    assert parse_registry(PAIR, "reg.yaml").op("f").tests is not None
    assert parse_registry(bare, "reg.yaml").op("f").tests is None
    outs = []
    for name, text in (("with", PAIR), ("without", bare)):
        (tmp_path / f"{name}.yaml").write_text(text)
        generate(str(tmp_path / f"{name}.yaml"), str(tmp_path / name), display_path="reg.yaml")
        outs.append(tmp_path / name)
    compiled = sorted(p.relative_to(outs[0]) for p in outs[0].rglob("*")
                      if p.suffix in (".cpp", ".h", ".inc") and p.stem in ("f", "f_autograd", "f_checks", "f_stages"))
    assert len(compiled) >= 4, compiled
    for rel in compiled:
        assert (outs[0] / rel).read_text() == (outs[1] / rel).read_text(), rel
