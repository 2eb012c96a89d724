"""What every part of the registry parser shares: error collection with line numbers, and
reading the YAML loader's line annotations."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Optional

from codegen import expr as E
from codegen import torch_version as TV
from codegen.yaml_loader import KEY_LINES, LINE_KEY

META_KEYS = {LINE_KEY, KEY_LINES}
# Every key of an entry and every construct of the expression language: the reference page
# errors point at.
REFERENCE = "docs/registry.md"


def see(section: str) -> str:
    """The pointer an error about the registry's keys ends with: its section of the reference."""
    return f"; see {REFERENCE}#{section}"


class RegistryError(Exception):
    """Every problem found in a registry, one ``file:LINE: op: message`` per line."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = errors


class Errors:
    def __init__(self, path: str) -> None:
        self.path = path
        self.items: list[tuple[int, str]] = []

    def add(self, line: int, op: str, message: str) -> None:
        prefix = f"{self.path}:{line}: " + (f"{op}: " if op else "")
        self.items.append((line, prefix + message))

    @contextmanager
    def collect(self, line: int, op: str) -> Iterator[None]:
        """Records an expression error at ``line`` (or the line an ``_At`` names) and goes on."""
        try:
            yield
        except Invalid as e:
            self.add(e.line or line, op, str(e))
        except E.ExprError as e:
            self.add(line, op, str(e))


class Invalid(Exception):
    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.line = line


@contextmanager
def at_key(line: int, prefix: str = "") -> Iterator[None]:
    """Errors raised inside name ``line`` (the key they are about), not the enclosing item's."""
    try:
        yield
    except E.ExprError as e:
        raise Invalid(prefix + str(e), line) from None


def line_of(d: Any, key: Optional[str] = None, default: int = 0) -> int:
    if not isinstance(d, dict):
        return default
    if key is not None:
        return int(d.get(KEY_LINES, {}).get(key, d.get(LINE_KEY, default)))
    return int(d.get(LINE_KEY, default))


def keys_of(d: dict[str, Any]) -> list[str]:
    return [k for k in d if k not in META_KEYS]


def known_keys_only(spec: dict[str, Any], known: set[str], where: str, section: str, line: int, op: str,
                    errors: Errors) -> bool:
    """Reports each key of ``spec`` not in ``known`` (``WHERE: unknown key 'k'; known: ...``, pointing
    at ``section`` of the reference); True when there is none."""
    unknown = [k for k in keys_of(spec) if k not in known]
    for k in unknown:
        errors.add(line_of(spec, k, line), op, f"{where}: unknown key {k!r}; known: {', '.join(sorted(known))}"
                   f"{see(section)}")
    return not unknown


def expr_text(v: Any) -> str:
    """An expression written as YAML: text, a number, or a flow list such as ``[T, H]``."""
    if isinstance(v, list):
        return "[" + ", ".join(expr_text(x) for x in v) + "]"
    return str(v)


def literal(v: Any) -> str:
    return repr(v) if isinstance(v, str) else str(v)


def name_hint(entry: Any) -> str:
    """The op name an entry's ``func:`` starts with, for errors found before (or without) parsing it."""
    func = entry.get("func") if isinstance(entry, dict) else None
    if not isinstance(func, str):
        return ""
    name = func.split("(", 1)[0].strip()
    return name if name.replace(".", "_").isidentifier() else ""


def in_torch_range(item: dict[str, Any], version: TV.Version, op: str, errors: Errors) -> bool:
    """False when ``item`` has a ``torch:`` range that ``version`` is outside of; an invalid range
    is an error (at its line) and keeps the item, so the rest of it is checked too."""
    if "torch" not in item:
        return True
    try:
        return TV.contains(TV.parse_range(item["torch"]), version)
    except ValueError as e:
        errors.add(line_of(item, "torch"), op, str(e))
        return True


def kind_or_empty(t: Any) -> str:
    """An argument's expression kind, or '' for a type already reported as unsupported."""
    try:
        return E.kind_of_type(t)
    except E.ExprError:
        return ""
