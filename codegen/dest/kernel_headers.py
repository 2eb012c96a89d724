"""include/op_plugin/ops/<op>.h: the kernel's two stage functions, from the schema."""
from codegen.api import cpp
from codegen.dest.kernel_checks import check_signature
from codegen.file_manager import FileManager
from codegen.model import Registry


def emit(registry: Registry, fm: FileManager) -> None:
    for op in registry.ops:
        params = cpp.kernel_params(op.func, [o.name for o in op.outputs], [o.name for o in op.int_outputs],
                                   random=op.random_when is not None)
        fm.write(f"include/op_plugin/ops/{op.name}.h", "kernel_header.h.j2", op.source,
                 op=op, signature=cpp.kernel_signature(op.kernel, params), check_signature=check_signature(op))
