"""The kernel library's ninja file (python/op_plugin/build.py): each source's ISA flags by its file
name, and a sanitizer build for one ISA level (ci/sanitize.sh kernels-ci) that instruments only
the sources that level runs."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("kernel.cpp", "kernel.avx2.cpp", "kernel.avx512.cpp")


@pytest.fixture
def build(monkeypatch):
    for var in ("OP_PLUGIN_SANITIZE", "OP_PLUGIN_SANITIZE_ISA", "OP_PLUGIN_AMX_EMULATE", "OP_PLUGIN_AVX512_EMULATE"):
        monkeypatch.delenv(var, raising=False)
    spec = importlib.util.spec_from_file_location("op_plugin_build_ninja", ROOT / "python" / "op_plugin" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ninja(build, tmp_path: Path) -> tuple[str, dict[str, str]]:
    """The ninja file's global cflags, and each source's isaflags."""
    sources = [tmp_path / name for name in SOURCES]
    for source in sources:
        source.write_text("int f() { return 0; }\n")
    build.write_kernel_ninja(str(tmp_path / "out"), [str(s) for s in sources], [str(tmp_path)])
    lines = (tmp_path / "out" / "build.ninja").read_text().splitlines()
    cflags = next(line for line in lines if line.startswith("cflags = "))
    isaflags = {Path(line.split(" cxx ")[1]).name: lines[i + 1].split("isaflags =", 1)[1].strip()
                for i, line in enumerate(lines) if line.startswith("build obj/")}
    return cflags, isaflags


def test_each_source_gets_its_isas_flags(build, tmp_path) -> None:
    cflags, isaflags = _ninja(build, tmp_path)
    assert "-fsanitize" not in cflags
    assert isaflags == {"kernel.cpp": "", "kernel.avx2.cpp": build.ISA_FLAGS["avx2"],
                        "kernel.avx512.cpp": build.ISA_FLAGS["avx512"]}


@pytest.mark.parametrize("tested", ["avx2", "avx512", "baseline"])
def test_a_sanitizer_build_for_one_level_instruments_only_its_isa(build, tmp_path, monkeypatch, tested) -> None:
    monkeypatch.setenv("OP_PLUGIN_SANITIZE", "1")
    monkeypatch.setenv("OP_PLUGIN_SANITIZE_ISA", tested)
    cflags, isaflags = _ninja(build, tmp_path)
    assert build.SANITIZE_FLAGS in cflags
    assert isaflags["kernel.cpp"] == ""  # baseline sources run at every level: always instrumented
    for isa in ("avx2", "avx512"):
        expected = build.ISA_FLAGS[isa] + ("" if isa == tested else " " + build.UNTESTED_ISA_FLAGS)
        assert isaflags[f"kernel.{isa}.cpp"] == expected


def test_the_tested_isa_alone_changes_nothing(build, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OP_PLUGIN_SANITIZE_ISA", "avx2")  # no sanitizer build: every source as usual
    assert _ninja(build, tmp_path)[1]["kernel.avx512.cpp"] == build.ISA_FLAGS["avx512"]
    monkeypatch.setenv("OP_PLUGIN_SANITIZE", "1")
    monkeypatch.delenv("OP_PLUGIN_SANITIZE_ISA")  # a sanitizer build of every level: all instrumented
    assert _ninja(build, tmp_path)[1]["kernel.avx512.cpp"] == build.ISA_FLAGS["avx512"]
