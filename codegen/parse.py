"""Loads op_plugin_functions.yaml into the model, strictly, reporting every error at once.

The parser's four jobs, one module each: the YAML structure of an entry (parse_entry.py), its
checks desugared into expressions (parse_checks.py), its autograd: pairing (parse_autograd.py),
and the resolution across entries (parse_resolve.py); parse_common.py has the error collection
they share. Every key and expression construct is documented in docs/registry.md.
"""
from __future__ import annotations

import hashlib
from typing import Any, Optional

import yaml

from codegen import torch_version as TV
from codegen.model import Registry
from codegen.parse_common import Errors, RegistryError, in_torch_range, name_hint
from codegen.parse_entry import parse_entry, parse_enums
from codegen.parse_resolve import resolve
from codegen.yaml_loader import load_document

__all__ = ["RegistryError", "load_registry", "parse_registry"]


def load_registry(path: str, display_path: Optional[str] = None, torch_version: Optional[str] = None) -> Registry:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return parse_registry(text, display_path or path, torch_version)


def parse_registry(text: str, path: str, torch_version: Optional[str] = None) -> Registry:
    """``torch_version`` (default: the installed torch) resolves the ``torch:`` ranges: entries and
    checks outside their range are left out, as if they were not written."""
    errors = Errors(path)
    try:
        version = TV.parse_version(torch_version or TV.installed_torch_version())
    except ValueError as e:
        raise RegistryError([f"{path}: {e}"]) from None
    try:
        doc = load_document(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{path}:{mark.line + 1}" if mark is not None else path
        raise RegistryError([f"{where}: invalid YAML: {e.problem or e.context}"]) from None
    except yaml.YAMLError as e:
        raise RegistryError([f"{path}: invalid YAML: {e}"]) from None
    data = [] if doc.data is None else doc.data
    if not isinstance(data, list):
        raise RegistryError([f"{path}:1: the registry must be a list of op entries"])

    lines = text.splitlines(keepends=True)
    starts = doc.item_lines + [len(lines) + 1]
    for key, line in doc.duplicates:
        index = max((i for i, s in enumerate(doc.item_lines) if s <= line), default=-1)
        op = name_hint(data[index]) if index >= 0 else ""
        errors.add(line, op, f"duplicate key {key!r}")
    enums = parse_enums(data, path, errors)
    parsed: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for index, entry in enumerate(data):
        if not isinstance(entry, dict):
            errors.add(starts[index], "", f"an entry must be a mapping with 'func:' (or 'enum:'), got {entry!r}")
            continue
        if "enum" in entry:
            continue
        if not in_torch_range(entry, version, name_hint(entry), errors):
            continue
        fields = parse_entry(entry, path, errors, version, enums)
        if fields is not None:
            parsed.append((entry, fields))
    ops = resolve(parsed, enums, path, errors)
    if errors.items:
        raise RegistryError([m for _, m in sorted(errors.items, key=lambda x: x[0])])
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return Registry(path=path, ops=tuple(ops), registry_hash=digest, enums=tuple(enums.values()))
