"""Translations into the torch-free kernel API: the registry's rules over opTensor.

The third surface of one rule (the binding renders it over at::Tensor, the fake over torch
tensors): ``<Kernel>CheckArguments`` evaluates it over the descriptors and values a C++ caller
gives ``<Kernel>GetWorkspaceSize``, with the same message text. Names and helpers are those of
csrc/include/op_plugin/checks.h (namespace op_plugin::check).
"""
from __future__ import annotations

import ast

from codegen import expr as E
from codegen.api.cpp import ExprRenderer, cpp_string
from codegen.expr import Message

# Registry dtype name -> opDataType.
KERNEL_DTYPES = {"float16": "OP_DT_FLOAT16", "bfloat16": "OP_DT_BF16", "float32": "OP_DT_FLOAT",
                 "float64": "OP_DT_DOUBLE", "int8": "OP_DT_INT8", "uint8": "OP_DT_UINT8", "int32": "OP_DT_INT32",
                 "int64": "OP_DT_INT64", "bool_": "OP_DT_BOOL"}


class KernelExprRenderer(ExprRenderer):
    """Renders a checked expression over the kernel API's parameters (``const opTensor*`` for
    tensors, ``const char*`` for strings, ``const int64_t*`` / ``const double*`` for optional
    scalars, ``const opIntArray*`` for int lists; a null pointer is None)."""

    namespace = "op_plugin::check::"

    def value(self, node: ast.expr) -> str:
        if isinstance(node, ast.Name) and node.id in self.env:
            kind = self.env[node.id]
            name = node.id
            if kind.endswith(E.OPTIONAL) and node.id not in self.present:
                name = f"op_plugin::check::value_of({node.id}, {cpp_string(node.id)})"
            base = E.base(kind)
            if base == E.STR:
                return f"op_plugin::check::text({name})"
            if base in (E.INT, E.FLOAT) and kind.endswith(E.OPTIONAL):
                return f"*{name}"
            return name
        return self.render(node)

    def seq(self, node: ast.expr) -> str:
        if isinstance(node, ast.Name) and E.base(self.env.get(node.id, "")) == E.INT_LIST:
            return f"op_plugin::check::ints({self.value(node)})"
        return self.value(node)

    def size(self, tensor: ast.expr, index: ast.expr) -> str:
        return f"op_plugin::check::size({self.value(tensor)}, {self.value(index)})"

    def render(self, node: ast.expr) -> str:  # noqa: C901 - the nodes that differ from the binding's
        if isinstance(node, ast.Name) and node.id in E.DTYPES and node.id not in self.env:
            return KERNEL_DTYPES[node.id]
        if isinstance(node, ast.Name) and node.id in self.env and E.base(self.env[node.id]) == E.STR \
                and not self.env[node.id].endswith(E.OPTIONAL):
            return self.value(node)
        if isinstance(node, ast.Attribute):
            owner = self.value(node.value)
            return f"{owner}->dtype" if node.attr == "dtype" else f"op_plugin::check::shape({owner})"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            args = "".join(", " + self.render(a) for a in node.args)
            return f"op_plugin::check::{node.func.attr}({self.value(node.func.value)}{args})"
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("len", "upper", "stats_dtype", "varlen_numels", "varlen_batches"):
            args = ", ".join(self.value(a) for a in node.args)
            return f"op_plugin::check::{node.func.id}({args})"  # type: ignore[attr-defined]
        if isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.Is, ast.IsNot)):
            op = "==" if isinstance(node.ops[0], ast.Is) else "!="
            return f"({self.render(node.left)} {op} nullptr)"
        return super().render(node)

    def message(self, op_name: str, m: Message) -> str:
        """The arguments of op_plugin::check's message: literals and fmt(value) pieces, without
        the ``<op>: `` prefix the binding adds (stage 1 reports the message alone)."""
        pieces = []
        for part in m.parts:
            pieces.append(cpp_string(part) if isinstance(part, str) else f"op_plugin::check::fmt({self.value(part.tree)})")
        return ", ".join(pieces) if pieces else '""'


# ---- the generated stages (op_plugin/ops/<op>_stages.inc) ----------------------------------------

# How <Kernel>Args keeps each kind of stage-1 parameter (owning copies; None is an empty optional),
# and how stage 1 fills it from the parameter ``{n}``.
_ARG_FIELDS = {
    E.TENSOR: ("opTensor", "*{n}"),
    E.TENSOR + E.OPTIONAL: ("std::optional<opTensor>", "{n} != nullptr ? std::optional<opTensor>(*{n}) : std::nullopt"),
    E.INT: ("int64_t", "{n}"), E.FLOAT: ("double", "{n}"), E.BOOL: ("bool", "{n}"), "rng": ("uint64_t", "{n}"),
    E.STR: ("std::string", "{n}"),
    E.STR + E.OPTIONAL: ("std::optional<std::string>",
                         "{n} != nullptr ? std::optional<std::string>({n}) : std::nullopt"),
    E.INT + E.OPTIONAL: ("std::optional<int64_t>", "{n} != nullptr ? std::optional<int64_t>(*{n}) : std::nullopt"),
    E.FLOAT + E.OPTIONAL: ("std::optional<double>", "{n} != nullptr ? std::optional<double>(*{n}) : std::nullopt"),
    E.INT_LIST: ("std::vector<int64_t>", "std::vector<int64_t>({n}->data, {n}->data + {n}->size)"),
    E.INT_LIST + E.OPTIONAL: ("std::optional<std::vector<int64_t>>",
                              "{n} != nullptr ? std::optional<std::vector<int64_t>>(std::vector<int64_t>("
                              "{n}->data, {n}->data + {n}->size)) : std::nullopt"),
}

# The storage type of each registry dtype: the T of a kernel's typed entry point run<T>.
STORAGE_TYPES = {"float16": "op_plugin::Half", "bfloat16": "op_plugin::BFloat16", "float32": "float",
                 "float64": "double", "int8": "int8_t", "uint8": "uint8_t", "int32": "int32_t", "int64": "int64_t",
                 "bool_": "bool"}


def args_fields(params: list) -> list[dict[str, str]]:
    """The fields of <Kernel>Args, one per stage-1 parameter: type, name and how stage 1 fills it
    (the int outputs are fields the kernel's plan writes, copied out by stage 1)."""
    fields = []
    for p in params:
        if p.is_output and p.kind == E.INT:
            fields.append({"type": "int64_t", "name": p.name, "capture": "", "int_output": True})
        else:
            kind = E.TENSOR if p.is_output else p.kind
            c_type, capture = _ARG_FIELDS[kind]
            fields.append({"type": c_type, "name": p.name, "capture": capture.format(n=p.name), "int_output": False})
    return fields
