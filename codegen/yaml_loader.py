"""A YAML loader that records line numbers and rejects duplicate keys."""
from __future__ import annotations

from typing import Any

import yaml

LINE_KEY = "__line__"


class DuplicateKeyError(Exception):
    def __init__(self, key: str, line: int) -> None:
        super().__init__(f"duplicate key {key!r}")
        self.key = key
        self.line = line


class LineLoader(yaml.SafeLoader):
    """Every mapping gets a ``__line__`` entry (1-based) with the line it starts on."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if key in seen:
                raise DuplicateKeyError(str(key), key_node.start_mark.line + 1)
            seen.add(key)
        mapping = super().construct_mapping(node, deep=deep)
        mapping[LINE_KEY] = node.start_mark.line + 1
        # Remember where each key sits, so an error about one field names its own line.
        mapping["__key_lines__"] = {
            self.construct_object(k, deep=deep): k.start_mark.line + 1  # type: ignore[no-untyped-call]
            for k, _ in node.value
        }
        return mapping


def load(text: str) -> Any:
    return yaml.load(text, Loader=LineLoader)  # noqa: S506 - LineLoader is a SafeLoader
