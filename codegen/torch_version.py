"""Torch version ranges in the registry (``torch: ">=2.14, <2.16"`` on an entry or a check).

One registry serves several torch releases: the generator resolves every range against the torch
it builds for and leaves out the entries and checks outside it, as op-plugin filters its master
YAML per torch version, so kernels carry no ``#if`` on the torch version.

A range is one or more comma-separated clauses ``OP VERSION`` with OP one of ``>= > <= < == !=``
and VERSION one to three numbers (``2``, ``2.14``, ``2.14.1``). Versions compare as release numbers
padded with zeros (``2.14`` is ``2.14.0``, so ``<2.15`` admits every 2.14.x); a local or
pre-release suffix of the torch version (``+cpu``, ``a0+git...``) is ignored.
"""
from __future__ import annotations

import operator
import re
from collections.abc import Callable

_CLAUSE = re.compile(r"\s*(>=|<=|==|!=|>|<)\s*(\d+(?:\.\d+){0,2})\s*")
_OPS: dict[str, Callable[[tuple[int, ...], tuple[int, ...]], bool]] = {
    ">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq, "!=": operator.ne}

Version = tuple[int, int, int]
Range = tuple[tuple[str, Version], ...]


def parse_version(text: str) -> Version:
    """``"2.13.0+cpu"`` -> (2, 13, 0); raises ValueError for text that does not start with a release."""
    m = re.match(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", str(text).strip())
    if not m:
        raise ValueError(f"not a torch version: {text!r}")
    return tuple(int(g or 0) for g in m.groups())  # type: ignore[return-value]


def parse_range(text: object) -> Range:
    """Parses a range; raises ValueError saying what is wrong with it."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"'torch:' must be a version range such as \">=2.14\" or \">=2.13, <2.15\", but got {text!r}")
    clauses = []
    for part in text.split(","):
        m = _CLAUSE.fullmatch(part)
        if not m:
            raise ValueError(f"'torch: {text}': {part.strip()!r} is not a clause OP VERSION "
                             "(OP one of >= > <= < == !=, VERSION like 2.14 or 2.14.1)")
        clauses.append((m.group(1), parse_version(m.group(2))))
    return tuple(clauses)


def contains(version_range: Range, version: Version) -> bool:
    return all(_OPS[op](version, bound) for op, bound in version_range)


def installed_torch_version() -> str:
    """The version of the installed torch, read from its metadata (importing torch takes seconds)."""
    from importlib.metadata import version

    return version("torch")
