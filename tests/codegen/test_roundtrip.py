"""The real registry: every schema round-trips through torchgen, and the whole registry generates."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from torchgen.model import FunctionSchema

from codegen.generate import generate
from codegen.parse import load_registry

ROOT = Path(__file__).resolve().parent.parent.parent
REGISTRIES = [ROOT / "op_plugin_functions.yaml", *sorted((Path(__file__).parent / "fixtures").glob("*.yaml"))]


def _normalise(schema: str) -> str:
    """What torchgen is allowed to change: whitespace only (it prints ``, `` and `` -> ``)."""
    return re.sub(r"\s*([(),*=\[\]?]|->)\s*", r"\1", schema.strip())


def _funcs(path: Path) -> list[str]:
    entries = yaml.safe_load(path.read_text()) or []
    return [e["func"] for e in entries if "enum" not in e]  # enum items define no op


@pytest.mark.parametrize("path", REGISTRIES, ids=[p.name for p in REGISTRIES])
def test_every_schema_round_trips(path: Path) -> None:
    funcs = _funcs(path)
    assert funcs, f"{path.name} has no entries"
    for func in funcs:
        parsed = FunctionSchema.parse(func)
        assert _normalise(str(parsed)) == _normalise(func)
        assert FunctionSchema.parse(str(parsed)) == parsed


def test_normalise_only_forgives_whitespace() -> None:
    assert _normalise("f( Tensor x ,int n = 1 )  ->  Tensor") == _normalise("f(Tensor x, int n=1) -> Tensor")
    assert _normalise("f(Tensor x, int n=1) -> Tensor") != _normalise("f(Tensor x, int n=2) -> Tensor")
    assert _normalise("f(Tensor x, *, int n) -> Tensor") != _normalise("f(Tensor x, int n) -> Tensor")


def test_the_real_registry_generates(tmp_path: Path) -> None:
    registry = load_registry(str(ROOT / "op_plugin_functions.yaml"), "op_plugin_functions.yaml")
    names = [op.name for op in registry.ops]
    assert names == [f.split("(")[0] for f in _funcs(ROOT / "op_plugin_functions.yaml")]
    fm = generate(str(ROOT / "op_plugin_functions.yaml"), str(tmp_path))
    assert fm.stale == [] and fm.unchanged == []
    files = set(fm.files())
    for name in names:
        assert {f"bindings/{name}.cpp", f"include/op_plugin/ops/{name}.h"} <= files
    assert (tmp_path / "manifest.txt").read_text().splitlines() == fm.files()
    for op in registry.ops:  # every backward argument resolved to a forward input, output or grad
        if op.autograd is not None:
            assert {src.source for _, src in op.autograd.inputs} <= {"input", "output", "grad"}
