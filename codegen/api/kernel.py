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

    def value(self, node: ast.expr) -> str:
        if isinstance(node, ast.Name) and node.id in self.env:
            kind = self.env[node.id]
            name = node.id
            if kind.endswith(E.OPTIONAL):
                name = f"op_plugin::check::value_of({node.id}, {cpp_string(node.id)})"
            base = E.base(kind)
            if base == E.STR:
                return f"op_plugin::check::text({name})"
            if base in (E.INT, E.FLOAT) and kind.endswith(E.OPTIONAL):
                return f"*{name}"
            return name
        return self.render(node)

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
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("len", "upper", "stats_dtype", "varlen_numels"):
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
