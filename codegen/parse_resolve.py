"""Cross-entry resolution: names unique across entries, and each entry's autograd: pairing
resolved against its backward op; then every OpEntry is built, once."""
from __future__ import annotations

from typing import Any

from codegen.model import EnumDef, OpEntry
from codegen.parse_autograd import parse_autograd
from codegen.parse_common import Errors


def resolve(parsed: list[tuple[dict[str, Any], dict[str, Any]]], enums: dict[str, EnumDef], path: str,
            errors: Errors) -> list[OpEntry]:
    """``parsed``: (raw entry, its OpEntry fields but autograd) in registry order."""
    first: dict[str, dict[str, Any]] = {}
    kernels: dict[str, dict[str, Any]] = {}
    for _, fields in parsed:
        name, kernel, line = str(fields["func"].name), fields["kernel"], fields["loc"].line
        if name in first:
            errors.add(line, name, f"duplicate op (first defined at line {first[name]['loc'].line})")
        first.setdefault(name, fields)
        if kernel and kernel in kernels:
            other = kernels[kernel]
            errors.add(line, name, f"kernel {kernel} is already used by {other['func'].name} (line {other['loc'].line})")
        kernels.setdefault(kernel, fields)
    for e in enums.values():
        if e.name in first:
            errors.add(e.loc.line, "", f"enum {e.name} has the name of an op")
    funcs = {name: fields["func"] for name, fields in first.items()}
    return [OpEntry(**fields, autograd=parse_autograd(entry, fields, funcs, path, errors)) for entry, fields in parsed]
