"""The generator's entry point: registry -> every artifact, through one FileManager."""
from __future__ import annotations

from codegen.dest import EMITTERS, docs
from codegen.file_manager import FileManager, jinja_environment
from codegen.parse import load_registry


def generate(registry_path: str, out_dir: str, check_only: bool = False, display_path: str | None = None,
             namespace: str = "op_plugin", extension: str = "_C", torch_version: str | None = None) -> FileManager:
    """Generates every artifact of ``registry_path`` into ``out_dir``. ``namespace`` and
    ``extension`` let another package generate its own ops (torch.ops.<namespace>.*);
    ``torch_version`` (default: the installed torch) resolves the registry's ``torch:`` ranges."""
    import os
    registry = load_registry(registry_path, display_path or os.path.basename(registry_path), torch_version)
    fm = FileManager(out_dir, check_only=check_only, env=jinja_environment(namespace=namespace, extension=extension))
    fm.ops = len(registry.ops)
    for emit in EMITTERS:
        emit(registry, fm)
    fm.write_manifest()
    return fm


def generate_docs(registry_path: str, docs_dir: str, check_only: bool = False,
                  display_path: str | None = None, namespace: str = "op_plugin",
                  torch_version: str | None = None) -> FileManager:
    """Writes the reference pages of every op (docs/ops/) from ``registry_path``."""
    import os
    registry = load_registry(registry_path, display_path or os.path.basename(registry_path), torch_version)
    fm = FileManager(docs_dir, check_only=check_only, env=jinja_environment(namespace=namespace))
    fm.ops = len(registry.ops)
    docs.emit(registry, fm)
    fm.write_manifest()
    return fm
