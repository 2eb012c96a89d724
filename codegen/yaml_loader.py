"""A YAML loader that records line numbers and duplicate keys."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

LINE_KEY = "__line__"
KEY_LINES = "__key_lines__"


class DuplicateKeyError(Exception):
    def __init__(self, key: str, line: int) -> None:
        super().__init__(f"duplicate key {key!r}")
        self.key = key
        self.line = line


class LineLoader(yaml.SafeLoader):
    """Every mapping gets a ``__line__`` entry (1-based) with the line it starts on, and a
    ``__key_lines__`` entry with the line of each key. A repeated key keeps its first value and
    is recorded in ``duplicates`` (key, line), so the caller can report it with its op."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[tuple[str, int]] = []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        unique = []
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if key in seen:
                self.duplicates.append((str(key), key_node.start_mark.line + 1))
                continue
            seen.add(key)
            unique.append((key_node, value_node))
        node.value = unique
        mapping = super().construct_mapping(node, deep=deep)
        mapping[LINE_KEY] = node.start_mark.line + 1
        # Remember where each key sits, so an error about one field names its own line.
        mapping[KEY_LINES] = {
            self.construct_object(k, deep=deep): k.start_mark.line + 1  # type: ignore[no-untyped-call]
            for k, _ in node.value
        }
        return mapping


class LineList(list):  # type: ignore[type-arg]
    """A YAML sequence that remembers the line of each item (``lines``), scalars included."""

    lines: list[int]


def _construct_seq(loader: LineLoader, node: yaml.SequenceNode) -> Any:
    data = LineList()
    data.lines = [n.start_mark.line + 1 for n in node.value]
    yield data
    data.extend(loader.construct_sequence(node))


LineLoader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)


@dataclass
class Document:
    data: Any
    item_lines: list[int] = field(default_factory=list)  # start line of each item of a top-level list
    duplicates: list[tuple[str, int]] = field(default_factory=list)  # (key, line), in line order


def load_document(text: str) -> Document:
    """Parses ``text``; raises ``yaml.YAMLError`` on a syntax error."""
    loader = LineLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return Document(None)
        data = loader.construct_document(node)
        items = [n.start_mark.line + 1 for n in node.value] if isinstance(node, yaml.SequenceNode) else []
        return Document(data, items, sorted(loader.duplicates, key=lambda d: d[1]))
    finally:
        loader.dispose()


def load(text: str) -> Any:
    """The data of ``text``; raises ``DuplicateKeyError`` on the first repeated key."""
    doc = load_document(text)
    if doc.duplicates:
        raise DuplicateKeyError(*doc.duplicates[0])
    return doc.data
