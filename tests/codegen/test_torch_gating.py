"""Torch version gating: ``torch:`` ranges on entries and checks, resolved for made-up versions."""
from __future__ import annotations

import pytest

from codegen import torch_version as TV
from codegen.generate import generate
from codegen.parse import RegistryError, parse_registry

# Two releases of one op: the schema gained an argument in (made-up) torch 2.14; a check only
# exists before 2.16; a third op exists only on 2.15.x.
REGISTRY = """\
- func: scale(Tensor x) -> Tensor
  torch: "<2.14"
  kernel: ScaleOld
  outputs: {result0: {like: x}}

- func: scale(Tensor x, float alpha=1.0) -> Tensor
  torch: ">=2.14"
  kernel: Scale
  checks:
    - {expr: alpha != 0.0, error: "alpha must not be 0", torch: "<2.16"}
    - {let: {N: x.numel()}, torch: ">=2.15"}
    - {expr: N >= 0, error: "never", torch: ">=2.15"}
  outputs: {result0: {like: x}}

- func: newer(Tensor x) -> Tensor
  torch: ">=2.15, <2.16"
  kernel: Newer
  outputs: {result0: {like: x}}
"""


def _ops(version: str) -> dict[str, tuple[str, int]]:
    """op -> (its schema, how many rules it kept) for the registry resolved against ``version``."""
    reg = parse_registry(REGISTRY, "reg.yaml", torch_version=version)
    return {op.name: (str(op.func), len(op.rules)) for op in reg.ops}


@pytest.mark.parametrize("version, expected", [
    ("2.13.0+cpu", {"scale": ("scale(Tensor x) -> Tensor", 0)}),
    ("2.14.0", {"scale": ("scale(Tensor x, float alpha=1.0) -> Tensor", 1)}),
    ("2.14.1", {"scale": ("scale(Tensor x, float alpha=1.0) -> Tensor", 1)}),
    ("2.15.0a0+git1234", {"scale": ("scale(Tensor x, float alpha=1.0) -> Tensor", 3),
                          "newer": ("newer(Tensor x) -> Tensor", 0)}),
    ("2.16", {"scale": ("scale(Tensor x, float alpha=1.0) -> Tensor", 2)}),
])
def test_entries_and_checks_follow_the_torch_version(version: str, expected: dict[str, tuple[str, int]]) -> None:
    assert _ops(version) == expected


@pytest.mark.parametrize("text, version, inside", [
    (">=2.14", (2, 14, 0), True), (">=2.14", (2, 13, 9), False), ("<2.15", (2, 14, 99), True),
    ("<2.15", (2, 15, 0), False), ("==2.14", (2, 14, 0), True), ("==2.14", (2, 14, 1), False),
    ("!=2.14.1", (2, 14, 1), False), (" >2 , <=3.0.1 ", (3, 0, 1), True), (">2", (2, 0, 0), False),
])
def test_range_clauses(text: str, version: TV.Version, inside: bool) -> None:
    assert TV.contains(TV.parse_range(text), version) is inside


def test_versions_ignore_local_and_prerelease_suffixes() -> None:
    assert TV.parse_version("2.13.0+cpu") == (2, 13, 0)
    assert TV.parse_version("2.15.0.dev20260101+cu130") == (2, 15, 0)
    assert TV.parse_version("3") == (3, 0, 0)
    with pytest.raises(ValueError, match="not a torch version: 'nightly'"):
        TV.parse_version("nightly")


def test_invalid_ranges_are_reported_with_file_and_line() -> None:
    text = """\
- func: a(Tensor x) -> Tensor
  kernel: A
  torch: "~=2.14"
  outputs: {result0: {like: x}}

- func: b(Tensor x) -> Tensor
  kernel: B
  checks:
    - {expr: x.dim() == 1, error: "1D", torch: 2.14}
    - {expr: x.dim() == 1, error: "1D", torch: ">=2.14,"}
  outputs: {result0: {like: x}}
"""
    with pytest.raises(RegistryError) as info:
        parse_registry(text, "reg.yaml", torch_version="2.13.0")
    assert info.value.errors == [
        "reg.yaml:3: a: 'torch: ~=2.14': '~=2.14' is not a clause OP VERSION (OP one of >= > <= < == !=, "
        "VERSION like 2.14 or 2.14.1)",
        "reg.yaml:9: b: 'torch:' must be a version range such as \">=2.14\" or \">=2.13, <2.15\", but got 2.14",
        "reg.yaml:10: b: 'torch: >=2.14,': '' is not a clause OP VERSION (OP one of >= > <= < == !=, "
        "VERSION like 2.14 or 2.14.1)",
    ]


def test_overlapping_ranges_are_a_duplicate_op() -> None:
    text = REGISTRY.replace('torch: "<2.14"', 'torch: "<=2.14"')
    with pytest.raises(RegistryError, match=r"reg.yaml:6: scale: duplicate op \(first defined at line 1\)"):
        parse_registry(text, "reg.yaml", torch_version="2.14.0")


def test_the_generator_emits_only_the_ops_of_its_torch(tmp_path) -> None:
    registry = tmp_path / "reg.yaml"
    registry.write_text(REGISTRY)
    out = tmp_path / "gen"
    generate(str(registry), str(out), torch_version="2.15.1")
    assert (out / "bindings" / "newer.cpp").is_file()
    assert "alpha must not be 0" in (out / "bindings" / "scale.cpp").read_text()
    # Regenerated for 2.16: newer's files go (the manifest removes them), scale loses its check.
    generate(str(registry), str(out), torch_version="2.16.0")
    assert not (out / "bindings" / "newer.cpp").exists()
    assert "alpha must not be 0" not in (out / "bindings" / "scale.cpp").read_text()
    assert "double alpha" in (out / "include" / "op_plugin" / "ops" / "scale.h").read_text()
