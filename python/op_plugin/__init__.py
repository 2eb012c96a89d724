"""op_plugin: CANN attention operators on the CPU, registered as torch.ops.op_plugin.*.

Importing this package loads the kernels (op_plugin._C registers the ops and their C++ Autograd
kernels), their fake functions and the typed wrappers, all generated from
op_plugin_functions.yaml.
"""
# Modules imported here under an underscore name: dir(op_plugin) lists exactly __all__ (and the
# submodules once they are imported).
import contextlib as _contextlib
from collections.abc import Iterator as _Iterator

import os as _os

import torch as _torch

try:
    from op_plugin._build_info import TORCH_VERSION as _BUILT_FOR
except ModuleNotFoundError as _missing:
    if _missing.name != "op_plugin._build_info":
        raise
    _BUILT_FOR = None  # python/ of a checkout before any build (the build writes _build_info.py)

if _BUILT_FOR is None:
    # The command line's registry commands (python -m op_plugin list/show/check/gen/new) work
    # without a build; everything else says what is missing.
    class _NotBuilt:
        def __getattr__(self, name: str) -> object:
            raise ImportError(f"op_plugin at {_os.path.dirname(__file__)} is a source tree that is not built (no "
                              "extension): build and install it (bash ci/build.sh), or import the installed one")

    _C = _NotBuilt()
    _op_names: list[str] = []
    _generated_names: list[str] = []
else:
    # The extension links torch's C++ API, which changes between releases: refuse another release
    # (the wheel's metadata pins it too). Builds of one release (+cpu, +cu130) share the C++ API.
    if str(_torch.__version__).split("+")[0] != _BUILT_FOR.split("+")[0]:
        raise ImportError(
            f"op_plugin was built against torch {_BUILT_FOR} but torch {_torch.__version__} is installed; "
            f"install torch=={_BUILT_FOR.split('+')[0]} or rebuild op_plugin")

    from op_plugin import _C  # noqa: E402  (registers torch.ops.op_plugin.*)
    from op_plugin._generated import fakes as _fakes  # noqa: E402,F401
    from op_plugin._generated import sharding as _sharding_rules  # noqa: E402,F401  (DTensor, on its import)
    from op_plugin._generated.ops import *  # noqa: E402,F401,F403
    from op_plugin._generated.ops import _OP_NAMES as _op_names  # noqa: E402,F401  (demo, doctor)
    from op_plugin._generated.ops import __all__ as _generated_names  # noqa: E402  (the ops and their enums)

__version__ = "0.1.0"


def set_strict(enabled: bool) -> None:
    """Enforce the device's limits (SPEC Decision 3) in eager and fake mode alike."""
    _C.set_strict_mode(bool(enabled))


@_contextlib.contextmanager
def strict(enabled: bool = True) -> _Iterator[None]:
    """``with op_plugin.strict(): ...`` enforces device limits inside the block."""
    before = _C.strict_mode()
    _C.set_strict_mode(bool(enabled))
    try:
        yield
    finally:
        _C.set_strict_mode(before)


def workspace_size(op: str, *args: object, **kwargs: object) -> int:
    """Bytes of workspace ``op(*args, **kwargs)`` would ask for (runs checks and stage 1 only)."""
    # Each op's binding registers the torch op _<op>_workspace_size with the op's schema.
    return int(getattr(_torch.ops.op_plugin, f"_{op}_workspace_size")(*args, **kwargs))


def release_workspace() -> int:
    """Frees the buffer the calling thread keeps for stage 2's workspaces (up to 256 MiB, the largest
    it has needed; larger workspaces are allocated per call) and returns its bytes. The next call
    that needs a workspace allocates it again."""
    return int(_C.release_workspace())


def isa_level() -> str:
    """The kernels' ISA level on this CPU (avx512_amx, avx512_bf16, avx512, avx2 or baseline),
    capped by OP_PLUGIN_ISA."""
    return str(_C.isa_level())


# The C++ SDK's CMake package (OpPluginConfig.cmake), as torch.utils.cmake_prefix_path:
#   cmake -DCMAKE_PREFIX_PATH=$(python -c "import op_plugin; print(op_plugin.cmake_prefix_path)") ...
cmake_prefix_path = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "share", "cmake")


__all__ = list(_generated_names) + ["set_strict", "strict", "workspace_size", "release_workspace", "isa_level",
                                 "cmake_prefix_path"]


def __getattr__(name: str) -> object:
    # op_plugin.distributed (context-parallel ring attention) and op_plugin.compat (the sources'
    # call surfaces) are loaded on first use, so that ``import op_plugin`` stays as it was;
    # ``import op_plugin.distributed`` works as well.
    if name in ("distributed", "compat"):
        import importlib

        return importlib.import_module(f"op_plugin.{name}")
    if _BUILT_FOR is None and not name.startswith("__"):
        getattr(_C, name)  # raises: not built
    raise AttributeError(f"module 'op_plugin' has no attribute {name!r}")
