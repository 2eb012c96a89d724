"""The generator's entry point: registry -> every artifact, through one FileManager."""
from __future__ import annotations

from codegen.dest import EMITTERS
from codegen.file_manager import FileManager
from codegen.parse import load_registry


def generate(registry_path: str, out_dir: str, check_only: bool = False, display_path: str | None = None) -> FileManager:
    import os
    registry = load_registry(registry_path, display_path or os.path.basename(registry_path))
    fm = FileManager(out_dir, check_only=check_only)
    for emit in EMITTERS:
        emit(registry, fm)
    fm.write_manifest()
    return fm
