"""Build helpers: run the generator, compile the torch-free kernel library, build the extension.

Used by this project's setup.py (loaded by path, before op_plugin is installed) and by
out-of-tree op packages, which import it from an installed op_plugin: ``op_package`` gives their
setup.py the build commands for their own registry and kernels (see tests/fixtures/toy_op/). What
they need comes from the installed wheel: the generator (the ``codegen`` package) and the C++ SDK
(``include/``, ``lib/libop_plugin_kernels.so`` with the runtime, ``share/op_plugin/bindings/``
with the torch glue the generated bindings call).

The kernel library is compiled by a generated ninja file rather than by setuptools, because
kernels are compiled per ISA level: a source named ``*.avx512.cpp`` or ``*.avx2.cpp`` gets that
level's flags (see ISA_FLAGS), every other source baseline flags, and ninja tracks header
dependencies so that editing one kernel recompiles one file.
"""
from __future__ import annotations

import glob
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence

ISA_FLAGS = {
    "avx512": "-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mfma -mf16c",
    "avx2": "-mavx2 -mfma -mf16c",
}
# The kernels are torch-free C++17. The bindings include torch's headers and get the C++ standard
# torch's cpp_extension picks for them (C++20 since torch 2.13; torch 2.14's headers need it).
KERNEL_CFLAGS = "-O3 -std=c++17 -fPIC -Wall -Wextra -fno-math-errno"
# The sanitizer build variant (ci/sanitize.sh): OP_PLUGIN_SANITIZE=1 adds these to the kernels, the
# bindings and the link. UB aborts at once (no recover) so that any report fails the run; -g and
# frame pointers give the reports readable stacks. -O1 (it comes last, so it wins over -O3): ASan's
# instrumentation of the unrolled -O3 SIMD kernels takes gcc over 15 minutes for one file.
SANITIZE_FLAGS = "-O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g"


def sanitize_flags() -> str:
    """SANITIZE_FLAGS when OP_PLUGIN_SANITIZE=1 is set, else ''."""
    return SANITIZE_FLAGS if os.environ.get("OP_PLUGIN_SANITIZE", "") == "1" else ""


# A sanitizer build for one ISA level's tests (ci/sanitize.sh kernels-ci runs the native level only):
# OP_PLUGIN_SANITIZE_ISA=avx2 (or avx512, or baseline) instruments that ISA's sources and the baseline
# ones; the library's sources of the other ISA, linked but never run at that level, compile without
# instrumentation at -O0. ASan at -O1 made them about a third of the sanitizer build's time.
UNTESTED_ISA_FLAGS = "-fno-sanitize=all -O0 -g0"


def _untested_under_sanitizer(isa: str) -> bool:
    tested = os.environ.get("OP_PLUGIN_SANITIZE_ISA", "")
    return bool(sanitize_flags() and tested and isa and isa != tested)


# The AMX model build variant (tests/kernels/build_and_run.sh): OP_PLUGIN_AMX_EMULATE=1 compiles the
# kernels with the software tile instructions of kernels/common/amx_intrinsics.h, so the avx512_amx
# level's code runs (slowly) on a CPU without AMX. For tests only.
AMX_EMULATE_FLAGS = "-DOP_PLUGIN_AMX_EMULATE"


# The AVX-512 model build variant: OP_PLUGIN_AVX512_EMULATE=1 compiles the *.avx512.cpp sources with
# the AVX2 flags and kernels/common/avx512_model.h's AVX-512 intrinsics (SIMDe's headers, from the
# simde-py package), and the AMX model too, so the avx512, avx512_bf16 and avx512_amx levels' code
# runs on an AVX2 CPU (or on an AVX-512 one without AVX512_BF16). For tests only.
AVX512_EMULATE_FLAGS = "-DOP_PLUGIN_AVX512_EMULATE"


def avx512_emulated() -> bool:
    return os.environ.get("OP_PLUGIN_AVX512_EMULATE", "") == "1"


def amx_emulate_flags() -> str:
    """The model builds' defines for every source: AMX_EMULATE_FLAGS when OP_PLUGIN_AMX_EMULATE=1
    or OP_PLUGIN_AVX512_EMULATE=1 is set (the latter adds AVX512_EMULATE_FLAGS), else ''."""
    flags = []
    if os.environ.get("OP_PLUGIN_AMX_EMULATE", "") == "1" or avx512_emulated():
        flags.append(AMX_EMULATE_FLAGS)
    if avx512_emulated():
        flags.append(AVX512_EMULATE_FLAGS)
    return " ".join(flags)


def isa_flags(isa: str) -> str:
    """The compiler flags of an ISA's sources ('' for baseline ones); under OP_PLUGIN_AVX512_EMULATE=1
    the avx512 sources get the AVX2 flags and the AVX-512 model's."""
    if isa == "avx512" and avx512_emulated():
        import simde_py  # the SIMDe headers (ci/build.sh installs simde-py)

        # -O1: the model's flash unit compiles in 40 s instead of 150 (the tests' time is their
        # references'); at -O1 GCC cannot see that the dropout lanes are set before they are read.
        # -fwrapv: SIMDe's portable integer lanes are C ints, whose overflow must wrap as the
        # instructions' lanes do (else it is UB, and UBSan reports it inside SIMDe).
        simde = shlex.quote(simde_py.get_include())
        return (f"{ISA_FLAGS['avx2']} -DOP_PLUGIN_AVX512_MODEL -isystem {simde} -O1 -fwrapv -Wno-psabi "
                "-Wno-maybe-uninitialized")
    return ISA_FLAGS.get(isa, "")


def copy_generated_python(generated: str, target: str, registry: str) -> None:
    """Copies the generated Python modules (generated/python: fakes, ops, .pyi) into the
    package directory ``target`` (``<package>/_generated``), made a package of its own."""
    import shutil

    os.makedirs(target, exist_ok=True)
    for path in glob.glob(os.path.join(generated, "python", "*.py*")):
        shutil.copy(path, target)
    with open(os.path.join(target, "__init__.py"), "w") as f:
        f.write(f"# Modules generated from {os.path.basename(registry)} by op_plugin's codegen.\n")


def isa_of(source: str) -> str:
    """'avx512' for foo.avx512.cpp, 'avx2' for foo.avx2.cpp, '' for baseline sources."""
    stem = os.path.basename(source)[: -len(".cpp")]
    suffix = stem.rsplit(".", 1)[-1] if "." in stem else ""
    return suffix if suffix in ISA_FLAGS else ""


def run_codegen(registry: str, out_dir: str, namespace: str = "op_plugin", extension: str = "_C",
                cwd: str | None = None) -> None:
    """Runs ``python -m codegen`` (the checkout's from its root ``cwd``, else the installed one); it
    prints how many files it wrote and how many were unchanged. Relative paths are relative to
    ``cwd``. The registry's ``torch:`` ranges resolve against the torch of this interpreter."""
    cmd = [sys.executable, "-m", "codegen", "--registry", registry, "--out", out_dir, "--namespace", namespace,
           "--extension", extension]
    subprocess.run(cmd, check=True, cwd=cwd)


def _cxx11_abi_flag() -> str:
    """The C++ ABI of the torch the kernels are linked with (the compiler default without torch)."""
    try:
        import torch
    except ImportError:
        return ""
    return f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"


def write_kernel_ninja(build_dir: str, sources: Sequence[str], include_dirs: Sequence[str],
                       library: str = "libop_plugin_kernels.a", extra_cflags: str = "",
                       shared_library: str | None = None) -> str:
    """Writes build_dir/build.ninja compiling ``sources`` into the static ``library`` (linked into
    the extension) and, if named, the same objects into ``shared_library`` (the C++ SDK's)."""
    os.makedirs(build_dir, exist_ok=True)
    includes = " ".join(f"-I{shlex.quote(os.path.abspath(d))}" for d in include_dirs)
    cflags = f"{KERNEL_CFLAGS} {_cxx11_abi_flag()} {sanitize_flags()} {amx_emulate_flags()} {extra_cflags} {includes}".strip()
    lines = [
        "# generated by op_plugin.build; rewritten by every build",
        f"cflags = {cflags}",
        "rule cxx",
        "  command = c++ -MMD -MF $out.d $cflags $isaflags -c $in -o $out",
        "  depfile = $out.d",
        "  deps = gcc",
        "  description = CXX $in",
        "rule ar",
        "  command = rm -f $out && ar rcs $out $in",
        "  description = AR $out",
        "rule link",
        "  command = c++ -shared -o $out $in -pthread",
        "  description = LINK $out",
    ]
    objects = []
    for src in sorted(sources):
        src = os.path.abspath(src)
        obj = "obj/" + os.path.relpath(src, os.path.commonpath([os.path.abspath(s) for s in sources])) + ".o"
        objects.append(obj)
        lines.append(f"build {obj}: cxx {src}")
        isa = isa_of(src)
        untested = f" {UNTESTED_ISA_FLAGS}" if _untested_under_sanitizer(isa) else ""
        lines.append(f"  isaflags = {isa_flags(isa)}{untested}")
    lines.append(f"build {library}: ar {' '.join(objects)}")
    lines.append(f"default {library}")
    if shared_library:
        lines.append(f"build {shared_library}: link {' '.join(objects)}")
        lines.append(f"default {shared_library}")
    path = os.path.join(build_dir, "build.ninja")
    text = "\n".join(lines) + "\n"
    old = open(path).read() if os.path.exists(path) else None
    if old != text:
        with open(path, "w") as f:
            f.write(text)
    return os.path.join(build_dir, library)


def build_kernels(build_dir: str, sources: Sequence[str], include_dirs: Sequence[str], jobs: int | None = None,
                  shared: bool = False) -> str:
    """Compiles the kernel library with ninja; prints ninja's own summary of what it did. ``shared``
    also links build_dir/SHARED_LIBRARY (the SDK's) from the same objects."""
    include_dirs = [os.path.realpath(d) for d in include_dirs]  # one spelling: one ninja file
    library = write_kernel_ninja(build_dir, sources, include_dirs, shared_library=SHARED_LIBRARY if shared else None)
    ninja = _ninja()
    cmd = [ninja, "-C", build_dir] + ([f"-j{jobs}"] if jobs else [])
    subprocess.run(cmd, check=True)
    return library


# The C++ SDK (docs/kernel_api.md): the wheel's op_plugin/lib, include and share/cmake; and
# share/op_plugin (its bindings/ directory, included as "bindings/torch_glue.h") for op packages.
SHARED_LIBRARY = "libop_plugin_kernels.so"
SDK_BINDINGS = os.path.join("share", "op_plugin", "bindings")
SDK_CMAKE_CONFIG = '''# OpPlugin: op_plugin's kernel library as a C++ SDK (find_package(OpPlugin) with
# CMAKE_PREFIX_PATH from `python -c "import op_plugin; print(op_plugin.cmake_prefix_path)"`).
# Target OpPlugin::kernels: the torch-free kernel API (headers, libop_plugin_kernels.so).
get_filename_component(_op_plugin_root "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET OpPlugin::kernels)
  add_library(OpPlugin::kernels SHARED IMPORTED)
  set_target_properties(OpPlugin::kernels PROPERTIES
    IMPORTED_LOCATION "${_op_plugin_root}/lib/libop_plugin_kernels.so"
    INTERFACE_INCLUDE_DIRECTORIES "${_op_plugin_root}/include"
    INTERFACE_COMPILE_FEATURES cxx_std_17)
endif()
set(OpPlugin_FOUND TRUE)
'''


def install_sdk(include_dirs: Sequence[str], shared_library: str, bindings: str, target: str) -> None:
    """Copies the SDK into the package directory ``target``: the public headers (each
    ``include_dirs`` entry's op_plugin/ tree: the hand-written API and the generated op headers),
    lib/ with the shared kernel library, share/cmake/OpPlugin/OpPluginConfig.cmake, and the torch
    glue of the generated bindings (``bindings``: csrc/bindings) as share/op_plugin/bindings/."""
    import shutil

    shutil.copytree(bindings, os.path.join(target, SDK_BINDINGS), dirs_exist_ok=True)
    for d in include_dirs:
        shutil.copytree(os.path.join(d, "op_plugin"), os.path.join(target, "include", "op_plugin"), dirs_exist_ok=True)
    os.makedirs(os.path.join(target, "lib"), exist_ok=True)
    shutil.copy(shared_library, os.path.join(target, "lib", SHARED_LIBRARY))
    config = os.path.join(target, "share", "cmake", "OpPlugin")
    os.makedirs(config, exist_ok=True)
    with open(os.path.join(config, "OpPluginConfig.cmake"), "w") as f:
        f.write(SDK_CMAKE_CONFIG)


def _ninja() -> str:
    try:
        import ninja  # the PyPI package ships the binary

        return os.path.join(ninja.BIN_DIR, "ninja")
    except ImportError:
        return "ninja"


def kernel_sources(csrc: str, generated: str | None = None) -> list[str]:
    """The runtime and every kernel source of a csrc/ tree, and the generator's kernel-side sources
    (``generated``/kernels: each op's <Kernel>CheckArguments)."""
    return sorted(glob.glob(os.path.join(csrc, "runtime", "*.cpp")) +
                  glob.glob(os.path.join(csrc, "kernels", "**", "*.cpp"), recursive=True) +
                  (generated_kernel_sources(generated) if generated else []))


def generated_kernel_sources(generated: str) -> list[str]:
    """The kernel-side sources the generator wrote into ``generated`` (build/generated)."""
    return sorted(glob.glob(os.path.join(generated, "kernels", "*.cpp")))


def installed_sdk() -> str:
    """The installed op_plugin package directory, which holds the C++ SDK (include/, lib/, share/)."""
    import importlib.util

    spec = importlib.util.find_spec("op_plugin")
    package = os.path.dirname(spec.origin) if spec and spec.origin else ""
    if not os.path.isfile(os.path.join(package, "lib", SHARED_LIBRARY)):
        raise FileNotFoundError(f"op_plugin's C++ SDK is not in {package or 'any op_plugin on sys.path'} "
                                "(no lib/libop_plugin_kernels.so): install op_plugin's wheel first")
    return package


class _OpPackageSources:
    """Generation and the kernel library of an op package, run once by whichever build command
    needs them first (build_py for the generated Python, build_ext for the bindings)."""

    def __init__(self, registry: str, kernel_sources: Sequence[str], build_dir: str, namespace: str,
                 extension: str) -> None:
        self.registry, self.namespace, self.extension = os.path.abspath(registry), namespace, extension
        self.kernel_sources = [os.path.abspath(s) for s in kernel_sources]
        self.build_dir = os.path.abspath(build_dir)
        self.generated = os.path.join(self.build_dir, "generated")
        self.sdk = installed_sdk()
        self.glue = os.path.join(self.sdk, SDK_BINDINGS)
        # The package's generated headers first: they must win over the SDK's op headers.
        # functorch_compat/: what torch's functorch headers include but its wheel lacks (vmap_glue.cpp).
        self.include_dirs = [os.path.join(self.generated, "include"), os.path.join(self.sdk, "include"),
                             os.path.dirname(self.glue), os.path.join(self.glue, "functorch_compat")]
        self._generated = False

    def generate(self) -> None:
        if not self._generated:
            run_codegen(self.registry, self.generated, self.namespace, self.extension)
            self._generated = True

    def kernel_library(self) -> str:
        """The package's kernels and generated checks, compiled with ninja (per-ISA sources allowed)."""
        self.generate()
        sources = generated_kernel_sources(self.generated) + self.kernel_sources
        names = [os.path.basename(s) for s in sources]
        clashes = sorted({n for n in names if names.count(n) > 1})
        if clashes:  # ar keeps one member per file name
            raise ValueError(f"kernel_sources: file names must be unique, but {clashes} repeat")
        return build_kernels(os.path.join(self.build_dir, "kernels"), sources, self.include_dirs)

    def binding_sources(self) -> list[str]:
        self.generate()
        return (sorted(glob.glob(os.path.join(self.generated, "bindings", "*.cpp"))) +
                sorted(glob.glob(os.path.join(self.glue, "*.cpp"))))

    def link_args(self) -> list[str]:
        """The SDK's kernel library (op_plugin's runtime), found at run time where it is installed."""
        lib = os.path.join(self.sdk, "lib")
        return [f"-L{lib}", "-lop_plugin_kernels", f"-Wl,-rpath,{lib}"]


def build_op_package(registry: str, kernel_sources: Sequence[str], build_dir: str, namespace: str,
                     extension: str) -> str:
    """Generates and compiles the ops of another registry as torch.ops.<namespace>.*, in process
    (torch.utils.cpp_extension.load; a development loop, ``op_package`` is the package's build).

    Returns the directory of the generated Python modules (fakes.py, ops.py); import the
    extension module (returned by torch.utils.cpp_extension.load, already imported) first.
    """
    from torch.utils import cpp_extension

    package = _OpPackageSources(registry, kernel_sources, build_dir, namespace, extension)
    cpp_extension.load(name=extension, sources=package.binding_sources(), build_directory=package.build_dir,
                       extra_include_paths=package.include_dirs, extra_cflags=["-O2", "-g0", "-fopenmp"],
                       extra_ldflags=[package.kernel_library(), "-fopenmp", *package.link_args()], verbose=False)
    return os.path.join(package.generated, "python")


def op_package(package: str, registry: str, kernel_sources: Sequence[str], namespace: str | None = None,
               build_dir: str = "build") -> dict:
    """``setup(**op_package(...))``: the build of an out-of-tree op package with op_plugin's machinery.

    Returns ``ext_modules`` (the extension ``<package>._C``) and the ``cmdclass`` that does the
    work inside the build, not while setup.py is imported: build_py generates ``registry`` (ops
    registered as torch.ops.<namespace>.*, default: the package's name) and puts the generated
    fakes and wrappers into ``<package>/_generated/``; build_ext compiles ``kernel_sources`` with
    ninja (``*.avx512.cpp`` / ``*.avx2.cpp`` get their ISA's flags, as op_plugin's own kernels),
    then the generated bindings with torch's BuildExtension, linked with the installed SDK's
    kernel library. A compile error is the compiler's message. The package's ``__init__.py``
    imports ``op_plugin`` (the fakes use its runtime helpers), then ``._C`` (with the C++
    Autograd kernels), ``._generated.fakes``, ``._generated.sharding`` (DTensor) and ``._generated.ops``.
    """
    from setuptools.command.build_py import build_py
    from torch.utils.cpp_extension import BuildExtension, CppExtension

    sources = _OpPackageSources(registry, kernel_sources, build_dir, namespace or package.rsplit(".", 1)[-1], "_C")
    # The sources are generated by build_ext itself; setuptools needs a list now.
    extension = CppExtension(f"{package}._C", [], include_dirs=sources.include_dirs,
                             extra_compile_args=["-O2", "-g0", "-fopenmp"], extra_link_args=["-fopenmp"])

    class BuildPyWithGenerated(build_py):
        def run(self) -> None:
            super().run()
            sources.generate()
            copy_generated_python(sources.generated, os.path.join(self.build_lib, *package.split("."), "_generated"),
                                  registry)

    class BuildExtWithKernels(BuildExtension.with_options(use_ninja=True)):
        def run(self) -> None:
            extension.sources = sources.binding_sources()
            extension.extra_objects = [sources.kernel_library()]
            extension.extra_link_args = ["-fopenmp", *sources.link_args()]
            super().run()

    return {"ext_modules": [extension],
            "cmdclass": {"build_ext": BuildExtWithKernels, "build_py": BuildPyWithGenerated}}
