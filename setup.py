"""Builds op_plugin: codegen -> kernel library (ninja, per-ISA flags) -> extension op_plugin._C.

Build without isolation so the installed torch 2.13.0 is used (an isolated build environment
would download another torch): pip install --no-build-isolation .
"""
import glob
import importlib.util
import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
GENERATED = os.path.join("build", "generated")


def _load_build_helpers():
    # Loaded by path: importing the op_plugin package would try to load the extension we build.
    spec = importlib.util.spec_from_file_location("op_plugin_build", os.path.join(ROOT, "python", "op_plugin", "build.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


helpers = _load_build_helpers()
helpers.run_codegen("op_plugin_functions.yaml", GENERATED, cwd=ROOT)

from torch.utils.cpp_extension import BuildExtension, CppExtension  # noqa: E402
import torch  # noqa: E402

include_dirs = [os.path.join(ROOT, "csrc"), os.path.join(ROOT, "csrc", "include"), os.path.join(ROOT, GENERATED, "include")]
# OP_PLUGIN_SANITIZE=1 (ci/sanitize.sh): ASan+UBSan kernels in their own directory, bindings and link too
sanitize = helpers.sanitize_flags().split()
kernels_dir = os.path.join(ROOT, "build", "kernels-sanitize" if sanitize else "kernels")
kernels_lib = helpers.build_kernels(kernels_dir, helpers.kernel_sources(os.path.join(ROOT, "csrc"), os.path.join(ROOT, GENERATED)),
                                   include_dirs, shared=True)

binding_sources = sorted(glob.glob(os.path.join(GENERATED, "bindings", "*.cpp"))) + sorted(glob.glob(os.path.join("csrc", "bindings", "*.cpp")))
build_flags = f"torch {torch.__version__}; kernels {helpers.KERNEL_CFLAGS}; isa variants {sorted(helpers.ISA_FLAGS)}"
if sanitize:
    build_flags += f"; sanitize {helpers.SANITIZE_FLAGS}"


class BuildPyWithGenerated(build_py):
    """Copies the generated Python modules into op_plugin/_generated/, the registry into op_plugin/
    (op-plugin list/show/gen away from a checkout), the C++ SDK into op_plugin/{include,lib,share}
    and records the torch version. The generator is a package of its own (packages= below)."""

    def run(self):
        super().run()
        package = os.path.join(self.build_lib, "op_plugin")
        helpers.copy_generated_python(GENERATED, os.path.join(package, "_generated"), "op_plugin_functions.yaml")
        self.copy_file(os.path.join(ROOT, "op_plugin_functions.yaml"), package)
        # The C++ SDK: headers, the shared kernel library, a CMake package config, the bindings' torch glue.
        helpers.install_sdk([os.path.join(ROOT, "csrc", "include"), os.path.join(ROOT, GENERATED, "include")],
                            os.path.join(kernels_dir, helpers.SHARED_LIBRARY), os.path.join(ROOT, "csrc", "bindings"),
                            package)
        with open(os.path.join(self.build_lib, "op_plugin", "_build_info.py"), "w") as f:
            f.write(f'TORCH_VERSION = "{torch.__version__}"\nBUILD_FLAGS = {build_flags!r}\n')


setup(
    # The exact torch release this build's extension is compiled against (its C++ ABI is not stable
    # across releases); op_plugin/__init__.py refuses to load under another.
    install_requires=[f"torch=={torch.__version__.split('+')[0]}", "jinja2", "pyyaml"],
    packages=["op_plugin", "op_plugin.models", "op_plugin.compat", "op_plugin.compat.cann_ops_transformer",
              "op_plugin.compat.cann_ops_transformer.ops", "op_plugin.compat.cann_ops_transformer.ops.attention",
              # The generator, importable as `codegen` from the wheel as from a checkout's root; the
              # checkout's top-level templates/ become its package data (codegen/templates/).
              "codegen", "codegen.api", "codegen.dest", "codegen.templates"],
    package_dir={"": "python", "codegen": "codegen", "codegen.templates": "templates"},
    package_data={"codegen.templates": ["*.j2", "scaffold/*.j2"]},
    ext_modules=[
        CppExtension(
            "op_plugin._C",
            binding_sources,
            # functorch_compat/: what torch's functorch headers include but its wheel lacks (vmap_glue.cpp)
            include_dirs=include_dirs + [os.path.join(ROOT, "csrc", "bindings", "functorch_compat")],
            extra_objects=[kernels_lib],
            # -fopenmp: at::parallel_for is an inline OpenMP template; without it the kernels would run
            # on one thread. The libgomp it links is the one torch already loaded (same soname), so
            # torch.set_num_threads governs both.
            # No -std: torch's cpp_extension adds the standard its headers need (C++20).
            # -g0: Python's CFLAGS carry -g, and debug info for torch's headers makes every binding
            # compile slower and the module larger (the sanitizer build's -g comes later and wins).
            extra_compile_args=["-O2", "-g0", "-fopenmp", f'-DOP_PLUGIN_BUILD_FLAGS="{build_flags}"'] + sanitize,
            extra_link_args=["-fopenmp"] + sanitize,
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True), "build_py": BuildPyWithGenerated},
)
