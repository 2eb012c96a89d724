"""Every AVX-512 intrinsic the kernels call has a model for AVX2 hosts.

On an AVX2-only host, ci/test.sh tests the AVX-512 and AMX levels' code by building the
*.avx512.cpp units with AVX2 flags and csrc/kernels/common/avx512_model.h, which maps each
AVX-512 intrinsic to SIMDe's portable version or to a model of its own. An intrinsic with
neither fails that build ("inlining failed ... target specific option mismatch"), but only on
such a host: on an AVX-512 host CI never builds the models. This test reads the sources instead,
on every host: the intrinsics GCC declares in its avx512*intrin.h headers that the kernels call
must each be an alias SIMDe defines or a macro avx512_model.h defines.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import simde_py

ROOT = Path(__file__).resolve().parents[2]
CALL = re.compile(r"\b(_mm\w+)\s*\(")
DEFINE = re.compile(r"#\s*define\s+(_mm\w+)\(")


def avx512_intrinsics() -> set[str]:
    """The intrinsics GCC's avx512*intrin.h declare (functions and macros)."""
    include = subprocess.run([os.environ.get("CXX", "g++"), "-print-file-name=include"], capture_output=True,
                             text=True, check=True).stdout.strip()
    headers = sorted(Path(include).glob("avx512*intrin.h"))
    assert headers, f"no avx512*intrin.h under {include}"
    names: set[str] = set()
    for header in headers:
        text = header.read_text(errors="ignore")
        names |= set(re.findall(r"^(_mm\w+)\s*\(", text, re.M)) | set(DEFINE.findall(text))
    return names


def kernel_calls() -> dict[str, list[str]]:
    """Intrinsic -> the kernel files that call it (the headers and the *.avx512.cpp units)."""
    calls: dict[str, list[str]] = {}
    for path in sorted((ROOT / "csrc" / "kernels").rglob("*")):
        if path.name in ("avx512_model.h", "amx_intrinsics.h"):  # the models themselves
            continue
        if path.suffix in (".h", ".inc") or path.name.endswith(".avx512.cpp"):
            for name in set(CALL.findall(path.read_text())):
                calls.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return calls


def modelled() -> set[str]:
    simde = Path(simde_py.__file__).parent / "simde"
    names = set(DEFINE.findall((ROOT / "csrc/kernels/common/avx512_model.h").read_text()))
    for header in simde.rglob("*.h"):
        names |= set(DEFINE.findall(header.read_text(errors="ignore")))
    return names


def test_every_avx512_intrinsic_the_kernels_call_has_a_model() -> None:
    calls = kernel_calls()
    needed = calls.keys() & avx512_intrinsics()
    assert len(needed) > 50, f"found only {len(needed)} AVX-512 intrinsics in the kernels: is the scan broken?"
    missing = {name: calls[name] for name in sorted(needed - modelled())}
    assert not missing, ("AVX-512 intrinsics without a model in csrc/kernels/common/avx512_model.h (or SIMDe); "
                         f"the AVX2 hosts' test build would fail: {missing}")
