"""include/op_plugin/ops/<op>.h (the kernel's stage functions and <Kernel>Args, from the schema)
and include/op_plugin/ops/<op>_stages.inc (the generated stage-1 skeleton a kernel may use)."""
from typing import Any

from codegen import expr as E
from codegen.api import cpp, kernel
from codegen.dest.kernel_checks import check_signature
from codegen.file_manager import FileManager
from codegen.model import OpEntry, Registry


def _dispatch(op: OpEntry) -> dict[str, Any] | None:
    """The typed entry points of stage 2: the first required tensor the registry gives dtypes."""
    kinds = {a.name: E.kind_of_type(a.type) for a in op.func.arguments.flat_all}
    for name, dtypes in op.dtypes:
        if kinds.get(name) == E.TENSOR:
            return {"tensor": name, "cases": [{"dtype": kernel.KERNEL_DTYPES[d], "type": kernel.STORAGE_TYPES[d]}
                                              for d in dtypes]}
    return None


def emit(registry: Registry, fm: FileManager) -> None:
    for op in registry.ops:
        params = cpp.kernel_params(op.func, [o.name for o in op.outputs], [o.name for o in op.int_outputs],
                                   random=op.random_when is not None)
        fields = kernel.args_fields(params)
        fm.write(f"include/op_plugin/ops/{op.name}.h", "kernel_header.h.j2", op.source,
                 op=op, signature=cpp.kernel_signature(op.kernel, params), check_signature=check_signature(op),
                 fields=fields)
        fm.write(f"include/op_plugin/ops/{op.name}_stages.inc", "kernel_stages.inc.j2", op.source,
                 op=op, signature=cpp.kernel_signature(op.kernel, params), params=params, fields=fields,
                 dispatch=_dispatch(op))
