"""op_plugin's public names are exactly its API: __all__, nothing its own imports leave behind."""
from __future__ import annotations

import inspect
import json
import subprocess
import sys

import op_plugin


def _public_names_of_a_fresh_import() -> dict[str, str]:
    """name -> the module an attribute is (its __name__), or "" for other objects, of a fresh
    ``import op_plugin``: in this interpreter, tests import more of op_plugin's submodules."""
    code = ("import json, types, op_plugin; print(json.dumps({n: getattr(op_plugin, n).__name__ "
            "if isinstance(getattr(op_plugin, n), types.ModuleType) else '' for n in dir(op_plugin) "
            "if not n.startswith('_')}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    return json.loads(out.stdout)


def test_dir_lists_exactly_all() -> None:
    names = _public_names_of_a_fresh_import()
    # Submodules the import loads (the generated autograd reads op_plugin.autograd_formulas) are
    # op_plugin's own; anything else must be in __all__, and __all__ is all there is.
    submodules = {n: m for n, m in names.items() if m}
    assert all(m == f"op_plugin.{n}" for n, m in submodules.items()), submodules
    assert sorted(n for n, m in names.items() if not m) == sorted(op_plugin.__all__)
    for leaked in ("Iterator", "annotations", "contextlib", "torch"):
        assert leaked not in names


def test_all_is_the_ops_their_enums_and_the_helpers() -> None:
    ops = set(op_plugin._op_names)
    helpers = {"set_strict", "strict", "workspace_size", "release_workspace", "isa_level", "cmake_prefix_path"}
    assert set(op_plugin.__all__) == ops | {"MaskMode"} | helpers
    assert len(op_plugin.__all__) == len(set(op_plugin.__all__))
    assert isinstance(op_plugin.cmake_prefix_path, str)  # the one data name, as torch.utils has it
    for name in set(op_plugin.__all__) - {"cmake_prefix_path"}:
        obj = getattr(op_plugin, name)
        assert inspect.isfunction(obj) or inspect.isclass(obj), name
        assert obj.__doc__, f"op_plugin.{name} has no docstring"


def test_submodules_load_on_first_use() -> None:
    assert op_plugin.compat.SURFACES == ("cann_ops_transformer", "torch_npu")
    assert callable(op_plugin.distributed.ring_flash_attn)
