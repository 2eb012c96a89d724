"""Golden tests: each fixture registry generates exactly the checked-in files under golden/<fixture>/.

Also: write-if-changed, --check, the manifest, per-op rewrites, and the expression renderers.
Regenerate the goldens after an intended change with ``python -m pytest tests/codegen --update-golden``
(each regenerated fixture then fails, so the switch can never make a run pass), review the diff and
rerun without it.
"""
from __future__ import annotations

import ast
import difflib
import os
import shutil
import sys
import types
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from codegen.__main__ import main
from codegen.api import python as py
from codegen.api.cpp import ExprRenderer
from codegen.expr import parse_expr, parse_message
from codegen.generate import generate

HERE = Path(__file__).parent
FIXTURES = HERE / "fixtures"
GOLDEN = HERE / "golden"
FIXTURE_NAMES = sorted(p.stem for p in FIXTURES.glob("*.yaml"))

PER_OP = ("bindings/{op}.cpp", "bindings/{op}_vmap.cpp", "include/op_plugin/ops/{op}.h", "include/op_plugin/ops/{op}_stages.inc",
          "kernels/{op}_checks.cpp")
# Made from every entry: the Python modules. The two C++ files shared by every op name none (each
# op's binding registers its own schema and workspace query), so no registry edit rewrites them.
AGGREGATE_PYTHON = {"python/fakes.py", "python/ops.py", "python/ops.pyi", "python/sharding.py"}
AGGREGATE_CPP = {"bindings/register_schema.cpp", "bindings/helpers_module.cpp"}
AGGREGATE = AGGREGATE_PYTHON | AGGREGATE_CPP


def _tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted(root.rglob("*")) if p.is_file()}


def _generate(fixture: str, out: Path) -> Any:
    return generate(str(FIXTURES / f"{fixture}.yaml"), str(out), display_path=f"{fixture}.yaml")


def test_every_fixture_has_a_golden_directory() -> None:
    assert FIXTURE_NAMES == ["autograd", "enums", "minimal", "options", "shapes"]
    assert sorted(p.name for p in GOLDEN.iterdir() if p.is_dir()) == FIXTURE_NAMES


@pytest.mark.parametrize("fixture", FIXTURE_NAMES)
def test_golden(fixture: str, tmp_path: Path, update_golden: bool) -> None:
    out = tmp_path / "out"
    _generate(fixture, out)
    got = _tree(out)
    golden_dir = GOLDEN / fixture
    if update_golden:
        shutil.rmtree(golden_dir, ignore_errors=True)
        shutil.copytree(out, golden_dir)
        # Fails on purpose: a run with the switch left on (an exported OP_PLUGIN_UPDATE_GOLDEN=1)
        # compares nothing, so it must never pass.
        pytest.fail(f"golden/{fixture} regenerated: review the diff (git diff {golden_dir}), then rerun "
                    "without --update-golden / OP_PLUGIN_UPDATE_GOLDEN")
    expected = _tree(golden_dir)
    assert sorted(got) == sorted(expected), "generated file set differs from the golden one"
    for rel, text in got.items():
        if text != expected[rel]:
            diff = "".join(difflib.unified_diff(expected[rel].splitlines(True), text.splitlines(True),
                                                f"golden/{fixture}/{rel}", f"generated/{rel}"))
            pytest.fail(f"{rel} differs from golden/{fixture}/{rel} "
                        f"(rerun with --update-golden if intended):\n{diff}")


def test_golden_covers_the_features_it_claims(tmp_path: Path) -> None:
    """Guards the fixtures themselves: a fixture edit must not quietly drop a feature."""
    _generate("autograd", tmp_path / "a")
    _generate("options", tmp_path / "o")
    schema = (tmp_path / "a/bindings/toy_attn.cpp").read_text()
    # SPEC Decision 11: the C++ Autograd kernel takes any schema, so the forward with a backward and a
    # kwarg-only Tensor registers its schema as written, and the wrapper passes that argument by keyword
    # (when given: a None optional is left to the schema's default; a number always).
    assert '"toy_attn(Tensor q, Tensor k, *, Tensor? mask=None, float scale=1.0) -> (Tensor out, Tensor lse)"' in schema
    wrappers = (tmp_path / "a/python/ops.py").read_text()
    assert ("def toy_attn(q: Tensor, k: Tensor, *, mask: Optional[Tensor] = None, scale: float = 1.0) -> Tensor:"
            in wrappers)
    assert "    if mask is not None:\n        _given[\"mask\"] = mask\n" in wrappers
    assert "torch.ops.op_plugin.toy_attn(q, k, scale=scale, **_given)" in wrappers
    autograd = (tmp_path / "a/bindings/toy_attn_autograd.cpp").read_text()
    assert "grad_out,  // grad_out" in autograd and "lse,  // softmax_lse" in autograd  # a renamed source
    # lse is non-differentiable: not attached to the node, saved as a plain value (is_output false)
    assert "torch::autograd::set_history(out, grad_fn);" in autograd and "set_history(lse" not in autograd
    assert "grad_fn->lse_ = SavedVariable(lse, /*is_output=*/false);" in autograd
    assert "if (task_should_compute_output(0)) grad_inputs[0] = std::get<0>(grads_in);  // q" in autograd
    assert "true);  // deterministic" in autograd  # the backward's own default, spelled out for the typed call
    lse_attn = (tmp_path / "a/bindings/toy_lse_attn_autograd.cpp").read_text()
    assert "const bool return_lse_run = true;" in lse_attn  # forward_overrides
    assert "redispatch(ks & c10::after_autograd_keyset, q, k, bias, return_lse_run);" in lse_attn
    assert "if (return_lse != return_lse_run) {" in lse_attn and "std::vector<c10::SymInt>{1}" in lse_attn
    assert "op_plugin::formulas::toy_bias_grad(grad_out, out, bias)" in lse_attn
    dropout = (tmp_path / "a/bindings/toy_dropout_autograd.cpp").read_text()
    assert "grad_fn->seed = op_plugin::saved_value(seed);" in dropout and "op_plugin::as_argument(seed)" in dropout
    stages = (tmp_path / "a/include/op_plugin/ops/toy_dropout_stages.inc").read_text()
    assert "*seed = ex->args.seed;" in stages  # the plan writes the int outputs into the captured args
    assert "return ToyDropoutKernel::run(args, plan, workspace);" in stages  # no dtypes: one entry point
    typed = (tmp_path / "o/include/op_plugin/ops/masked_mix_stages.inc").read_text()
    assert "case OP_DT_BF16: return MaskedMixKernel::run<op_plugin::BFloat16>(args, plan, workspace);" in typed
    checks = (tmp_path / "a/kernels/toy_attn_checks.cpp").read_text()
    assert 'return fail(OP_ERR_PARAM_INVALID, "q and k must be [S, D] with one D, but got "' in checks
    fakes = (tmp_path / "o/python/fakes.py").read_text()
    for piece in ("if strict_mode():", "if sizes is not None:", "if flag:", "_upper(layout) in ('BSND', 'BNSD', 'TND')",
                  "layout_out == layout", "groups >= 1", "window is None or window in (1, 2, 4, 8)",
                  "W = S - 1 if flag else S"):
        assert piece in fakes, piece
    ops = (tmp_path / "o/python/ops.py").read_text()
    assert "y, stats = torch.ops.op_plugin.masked_mix(" in ops and "    return y\n" in ops


# ---- write-if-changed, --check, manifest --------------------------------------------------------

def test_second_run_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    first = _generate("autograd", out)
    assert first.written and not first.unchanged
    mtimes = {rel: os.stat(out / rel).st_mtime_ns for rel in first.written}
    registry = str(FIXTURES / "autograd.yaml")
    assert main(["--registry", registry, "--out", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"codegen: 5 ops, 0 written, {len(first.written)} unchanged in {out} (")
    second = _generate("autograd", out)
    assert second.written == []
    assert sorted(second.unchanged) == sorted(first.written)
    assert {rel: os.stat(out / rel).st_mtime_ns for rel in first.written} == mtimes


def test_check_reports_stale_files_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    registry = str(FIXTURES / "autograd.yaml")
    _generate("autograd", out)
    assert main(["--registry", registry, "--out", str(out), "--check"]) == 0
    assert capsys.readouterr().out == "codegen: 36 files up to date\n"

    edited = out / "bindings/toy_attn.cpp"
    hand_edit = edited.read_text() + "// a hand edit the templates know nothing about\n"
    edited.write_text(hand_edit)
    (out / "python/ops.pyi").unlink()
    assert main(["--registry", registry, "--out", str(out), "--check"]) == 1
    err = capsys.readouterr().err
    assert err == ("stale generated files (run python -m codegen):\n"
                   "  bindings/toy_attn.cpp\n  python/ops.pyi\n")
    assert edited.read_text() == hand_edit and not (out / "python/ops.pyi").exists()  # --check wrote nothing

    assert main(["--registry", registry, "--out", str(out)]) == 0
    assert capsys.readouterr().out.startswith("codegen: 5 ops, 2 written, 34 unchanged")
    assert main(["--registry", registry, "--out", str(out), "--check"]) == 0


def test_check_on_an_empty_directory_is_stale(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--registry", str(FIXTURES / "minimal.yaml"), "--out", str(tmp_path / "none"), "--check"]) == 1
    assert "  bindings/identity_copy.cpp\n" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()


def test_registry_error_exits_1_with_every_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("- func: f(Tensor x) -> Tensor\n  kernel: 1\n  outputs: {result0: {like: y}}\n")
    assert main(["--registry", str(bad), "--out", str(tmp_path / "out")]) == 1
    assert capsys.readouterr().err == (
        "bad.yaml:2: f: 'kernel:' must name the kernel (a C++ identifier, e.g. FlashAttnGrad)\n"
        "bad.yaml:3: f: outputs: result0: 'like: y' does not name a tensor argument\n")
    assert not (tmp_path / "out").exists()


TWO_OPS = """\
- func: op_a(Tensor x) -> Tensor
  kernel: OpA
  outputs: {result0: {like: x}}
  doc: first

- func: op_b(Tensor x, int n=1) -> Tensor
  kernel: OpB
  outputs: {result0: {like: x}}
  doc: second
"""


def _files_of(op: str) -> set[str]:
    return {p.format(op=op) for p in PER_OP}


def test_manifest_lists_every_file_and_removes_files_of_a_deleted_op(tmp_path: Path) -> None:
    reg, out = tmp_path / "reg.yaml", tmp_path / "out"
    reg.write_text(TWO_OPS)
    fm = generate(str(reg), str(out))
    listed = (out / "manifest.txt").read_text().splitlines()
    assert listed == sorted(_tree(out).keys() - {"manifest.txt"}) == fm.files()
    assert _files_of("op_a") | _files_of("op_b") | AGGREGATE == set(listed)

    reg.write_text(TWO_OPS.split("\n\n")[0] + "\n")  # delete op_b
    generate(str(reg), str(out))
    assert set(_tree(out)) == _files_of("op_a") | AGGREGATE | {"manifest.txt"}
    assert (out / "manifest.txt").read_text().splitlines() == sorted(_files_of("op_a") | AGGREGATE)
    assert "op_b" not in (out / "python/ops.py").read_text()


def test_editing_one_entry_rewrites_only_its_files(tmp_path: Path) -> None:
    """A file names its entry, not the entry's hash or line: an edit rewrites exactly the files whose
    text it changes (so only their objects recompile)."""
    reg, out = tmp_path / "reg.yaml", tmp_path / "out"
    reg.write_text(TWO_OPS)
    generate(str(reg), str(out))

    # A new default: op_b's binding (its schema) and kernel header (the C++ signature's comment),
    # the Python modules with op_b's signature; not op_b's checks or stages.
    reg.write_text(TWO_OPS.replace("int n=1", "int n=2"))
    fm = generate(str(reg), str(out))
    assert set(fm.written) == {"bindings/op_b.cpp", "include/op_plugin/ops/op_b.h"} | AGGREGATE_PYTHON
    assert set(fm.unchanged) == (_files_of("op_a") | _files_of("op_b") | AGGREGATE_CPP) - set(fm.written)

    # Editing op_a's doc in place: ops.py (its docstrings) alone; no C++ file.
    edited = TWO_OPS.replace("int n=1", "int n=2").replace("doc: first", "doc: first, edited")
    reg.write_text(edited)
    fm = generate(str(reg), str(out))
    assert set(fm.written) == {"python/ops.py"}

    # Moving op_b down (a longer op_a doc): fakes.py and sharding.py name each op's file:LINE; no C++
    # file changes.
    reg.write_text(edited.replace("doc: first, edited", "doc: |\n    first\n    and more"))
    fm = generate(str(reg), str(out))
    assert set(fm.written) == {"python/ops.py", "python/fakes.py", "python/sharding.py"}
    assert set(fm.unchanged) == _files_of("op_a") | _files_of("op_b") | AGGREGATE_CPP | {"python/ops.pyi"}


def test_appending_an_op_writes_only_its_files_and_the_python_modules(tmp_path: Path) -> None:
    """What `op-plugin new` does (blank lines, a comment, the entry): the previous last entry's
    hash ignores what follows it, so none of op_b's files and no shared C++ file is rewritten."""
    reg, out = tmp_path / "reg.yaml", tmp_path / "out"
    reg.write_text(TWO_OPS)
    generate(str(reg), str(out))
    reg.write_text(TWO_OPS + "\n\n# op_c: a new op\n- func: op_c(Tensor x) -> Tensor\n  kernel: OpC\n"
                   "  outputs: {result0: {like: x}}\n  doc: third\n")
    fm = generate(str(reg), str(out))
    assert set(fm.written) == _files_of("op_c") | AGGREGATE_PYTHON
    assert set(fm.unchanged) == _files_of("op_a") | _files_of("op_b") | AGGREGATE_CPP


# ---- generated Python is valid Python --------------------------------------------------------

def _python_files(root: Path) -> Iterator[Path]:
    return (p for p in sorted(root.rglob("*")) if p.suffix in (".py", ".pyi"))


@pytest.mark.parametrize("fixture", FIXTURE_NAMES + ["op_plugin_functions"])
def test_generated_python_compiles(fixture: str, tmp_path: Path) -> None:
    if fixture == "op_plugin_functions":
        generate(str(HERE.parent.parent / "op_plugin_functions.yaml"), str(tmp_path))
    else:
        _generate(fixture, tmp_path)
    files = list(_python_files(tmp_path))
    assert {p.name for p in files} == {"fakes.py", "ops.py", "ops.pyi", "sharding.py"}
    for p in files:
        compile(p.read_text(), str(p), "exec", dont_inherit=True)


class _Shape:
    """A stand-in tensor for the strategy functions: its shape."""

    def __init__(self, shape: list[int]) -> None:
        self.shape = shape

    def size(self, dim: int) -> int:
        return self.shape[dim]

    def dim(self) -> int:
        return len(self.shape)


def _run_module(path: Path, recorded: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Executes a generated module against stand-ins for torch (registrations are recorded, not
    performed; importing the real torch would cost seconds) and op_plugin._runtime (compiled)."""

    def register_fake(name: str) -> Callable[[Any], Any]:
        recorded.append(("fake", name))
        return lambda fn: fn

    torch = types.ModuleType("torch")
    torch.Tensor = type("Tensor", (), {})  # type: ignore[attr-defined]
    torch.library = types.SimpleNamespace(register_fake=register_fake)  # type: ignore[attr-defined]
    runtime = types.ModuleType("op_plugin._runtime")
    for attr in ("_enum_arg", "_fmt", "_same_device", "_stats_dtype", "_upper", "_varlen_batches", "_varlen_numels",
                 "strict_mode"):
        setattr(runtime, attr, lambda *a: None)
    sharding = types.ModuleType("op_plugin._sharding")
    sharding.install = lambda ns, rules: recorded.extend(("sharding", f"{ns}::{op}") for op in rules)  # type: ignore[attr-defined]
    op_plugin = types.ModuleType("op_plugin")
    op_plugin._sharding = sharding  # type: ignore[attr-defined]
    for name, module in {"torch": torch, "op_plugin": op_plugin, "op_plugin._runtime": runtime,
                         "op_plugin._sharding": sharding}.items():
        monkeypatch.setitem(sys.modules, name, module)
    namespace: dict[str, Any] = {"__name__": f"generated.{path.stem}", "__package__": "generated"}
    exec(compile(path.read_text(), str(path), "exec", dont_inherit=True), namespace)
    return namespace


@pytest.mark.parametrize("fixture", ["minimal", "options", "autograd", "enums"])
def test_generated_python_modules_execute(fixture: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _generate(fixture, tmp_path)
    recorded: list[tuple[str, str]] = []
    for name in ("ops.py", "fakes.py", "sharding.py"):
        module = _run_module(tmp_path / "python" / name, recorded, monkeypatch)
    expected = {"minimal": ["identity_copy"], "options": ["masked_mix"], "enums": ["paint"],
                "autograd": ["toy_attn", "toy_attn_grad", "toy_lse_attn", "toy_dropout", "toy_dropout_grad"]}
    assert [op for kind, op in recorded if kind == "fake"] == [f"op_plugin::{op}" for op in expected[fixture]]
    # sharding.py hands every op's strategies to op_plugin._sharding (DTensor's registration).
    assert [op for kind, op in recorded if kind == "sharding"] == [f"op_plugin::{op}" for op in expected[fixture]]
    if fixture == "autograd":
        q, bias = _Shape([6, 4]), _Shape([6])
        assert module["_toy_attn_grad_strategies"](q, q, q, q, q) == [
            ("rows", {"grad_out": 0, "q": 0, "out": 0, "softmax_lse": 0}, {"grad_q": 0, "grad_k": "partial"})]
        assert module["_toy_lse_attn_strategies"](q, q, bias) == [
            ("rows", {"q": 0, "bias": 0}, {"out": 0, "lse": None})]
        assert module["_toy_lse_attn_strategies"](q, q, _Shape([1]), return_lse=True) == [
            ("rows", {"q": 0, "bias": None}, {"out": 0, "lse": 0})]
        assert module["_toy_lse_attn_strategies"](q, q, q) == []  # a 2-D bias: no strategy holds
    # The Autograd kernels are C++ (bindings/<op>_autograd.cpp): one per pairing, none in Python.
    autograd = sorted(p.name for p in (tmp_path / "bindings").glob("*_autograd.cpp"))
    assert autograd == (["toy_attn_autograd.cpp", "toy_dropout_autograd.cpp", "toy_lse_attn_autograd.cpp"]
                        if fixture == "autograd" else [])


# ---- the expression renderers (render level) --------------------------------------------------

ENV = {"q": "Tensor", "bias": "Tensor?", "layout": "str", "window": "int?", "sizes": "int[]?",
       "n": "int", "scale": "float", "flag": "bool", "T": "int"}

RENDERED = [
    # (expression, C++, Python)
    ("bias is None or bias.dim() == 1",
     "(!bias.has_value() || ((*bias).dim() == 1))",
     "bias is None or bias.dim() == 1"),
    ("bias is not None and bias.size(0) == q.size(-1)",
     "(bias.has_value() && ((*bias).size(0) == q.size(-1)))",
     "bias is not None and bias.size(0) == q.size(-1)"),
    ("window is None or window >= 1",
     "(!window.has_value() || ((*window) >= 1))",
     "window is None or window >= 1"),
    ("upper(layout) in ('BSND', 'TND')",
     'op_plugin::one_of(op_plugin::upper(layout), "BSND", "TND")',
     "_upper(layout) in ('BSND', 'TND')"),
    ("n not in (1, 2)", "!op_plugin::one_of(n, 1, 2)", "n not in (1, 2)"),
    ("q.dtype in (float16, bfloat16)",
     "op_plugin::one_of(q.scalar_type(), at::kHalf, at::kBFloat16)",
     "q.dtype in (torch.float16, torch.bfloat16)"),
    ("stats_dtype(q) == float32", "(op_plugin::stats_dtype(q) == at::kFloat)", "_stats_dtype(q) == torch.float32"),
    ("T * 2 if flag else T // 2 + n % 3", "(flag ? (T * 2) : ((T / 2) + (n % 3)))",
     "T * 2 if flag else T // 2 + n % 3"),
    ("not flag and isfinite(scale)", "(!(flag) && std::isfinite(static_cast<double>(scale)))",
     "not flag and math.isfinite(scale)"),
    ("len(sizes) == max(n, 2)", "(static_cast<int64_t>(op_plugin::value_of(sizes, \"sizes\").size()) == std::max<int64_t>(n, 2))",
     "len(sizes) == max(n, 2)"),
    ("[T, n + 1, q.size(0)]", "std::vector<int64_t>{T, (n + 1), q.size(0)}", "[T, n + 1, q.size(0)]"),
    ("q.shape", "q.sizes()", "q.shape"),
    ("bias.shape", "op_plugin::value_of(bias, \"bias\").sizes()", "bias.shape"),
    ("scale > 0.5 and layout != 'x\"y'", '((scale > 0.5) && (layout != "x\\"y"))', "scale > 0.5 and layout != 'x\"y'"),
    ("q.numel() == 0 or True", "((q.numel() == 0) || true)", "q.numel() == 0 or True"),
]


@pytest.mark.parametrize(("source", "cpp", "python"), RENDERED, ids=[r[0] for r in RENDERED])
def test_expression_renderers(source: str, cpp: str, python: str) -> None:
    e = parse_expr(source, ENV)
    assert ExprRenderer(ENV)(e) == cpp
    assert py.render(e, ENV) == python
    ast.parse(python, mode="eval")


def test_a_let_named_like_a_dtype_renders_as_the_let() -> None:
    env = dict(ENV, float16="int")
    e = parse_expr("float16 + 1", env)
    assert ExprRenderer(env)(e) == "(float16 + 1)"
    assert py.render(e, env) == "float16 + 1"


def test_message_renderers_interpolate_the_same_values() -> None:
    m = parse_message("bias must be [{T}] but got {bias.shape}; {{literal}} {upper(layout)} {stats_dtype(q)}", ENV)
    assert ExprRenderer(ENV).message("op", m) == (
        '"op: ", "bias must be [", op_plugin::fmt(T), "] but got ", op_plugin::fmt(op_plugin::value_of(bias, \"bias\").sizes()), '
        '"; {", "literal}", " ", op_plugin::fmt(op_plugin::upper(layout)), " ", '
        'op_plugin::fmt(op_plugin::stats_dtype(q))')
    python = py.message("op", m, ENV)
    assert python == ("'op: ' + 'bias must be [' + _fmt(T) + '] but got ' + _fmt(bias.shape) + '; {' + 'literal}' "
                      "+ ' ' "
                      "+ _fmt(_upper(layout)) + ' ' + _fmt(_stats_dtype(q))")
    # The Python message evaluates to the text the C++ pieces spell out.
    text = eval(python, {"_fmt": str, "_upper": str.upper, "_stats_dtype": lambda t: "float32",
                         "T": 4, "bias": types.SimpleNamespace(shape=[3]), "layout": "bsnd", "q": None})
    assert text == "op: bias must be [4] but got [3]; {literal} BSND float32"
