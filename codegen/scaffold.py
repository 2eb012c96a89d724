"""`op-plugin new NAME [--backward]`: a new op's registry entries, kernels and test, each of which
builds and runs as written.

With ``--backward`` the backward op is derived from the forward entry, as torchgen derives a
backward's signature from derivatives.yaml: it takes the gradient of each output, then the
forward's tensors (inputs, then outputs, which autograd saves), then its other arguments; it
returns the gradient of each tensor input. Its checks say that each incoming gradient and each
saved output has the shape and dtype the forward's output rules give.
"""
from __future__ import annotations

import keyword
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from torchgen.model import BaseTy, BaseType, FunctionSchema

from codegen import expr as E

NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class Backward:
    """The backward op derived from a forward entry."""

    name: str
    kernel: str
    func: str  # its schema
    grads_in: list[tuple[str, str]]  # (backward argument, forward output): grad(output)
    grads_out: list[tuple[str, str]]  # (forward input, backward output): the gradient it returns
    checks: list[dict[str, str]]  # {expr, error}
    outputs: list[tuple[str, str]]  # (backward output, forward input it is shaped like)
    dtypes: tuple[str, list[str]]  # (grad tensor, dtypes): the forward's first dtypes entry


def kernel_name(op: str) -> str:
    return "".join(part.capitalize() for part in op.split("_"))


def derive_backward(entry: dict[str, Any]) -> Backward:
    """The backward of a forward entry (a parsed registry item with func, dtypes and outputs)."""
    func = FunctionSchema.parse(entry["func"])
    name = f"{func.name}_backward"
    is_tensor = lambda t: isinstance(t, BaseType) and t.name == BaseTy.Tensor  # noqa: E731
    outputs = [r.name or f"result{i}" for i, r in enumerate(func.returns) if is_tensor(r.type)]
    args = func.arguments.flat_all
    tensor_inputs = [a.name for a in args if is_tensor(a.type)]
    grads_in = [(f"grad_{o}", o) for o in outputs]
    params = [f"Tensor {g}" for g, _ in grads_in] + [f"Tensor {t}" for t in tensor_inputs]
    params += [f"Tensor {o}" for o in outputs]
    params += [str(a) for a in args if not is_tensor(a.type)]  # the rest, with their defaults
    grads_out = [(t, f"grad_{t}") for t in tensor_inputs]
    returns = ", ".join(f"Tensor {g}" for _, g in grads_out)
    if len(grads_out) > 1:
        returns = f"({returns})"
    schema = f"{name}({', '.join(params)}) -> {returns}"

    checks = []
    rules = entry.get("outputs", {})
    for grad, out in grads_in:
        shape, dtype = _shape_and_dtype(rules[out])
        checks.append({"expr": f"{out}.shape == {shape}",
                       "error": f"{out} must have shape {{{shape}}}, but got {{{out}.shape}}"})
        checks.append({"expr": f"{out}.dtype == {dtype}",
                       "error": f"{out} must have dtype {{{dtype}}}, but got {{{out}.dtype}}"})
        checks.append({"expr": f"{grad}.shape == {out}.shape",
                       "error": f"{grad} must have the shape of {out} {{{out}.shape}}, but got {{{grad}.shape}}"})
        checks.append({"expr": f"{grad}.dtype == {out}.dtype",
                       "error": f"{grad} must have the dtype of {out} ({{{out}.dtype}}), but got {{{grad}.dtype}}"})
    first_dtypes = next(iter(entry.get("dtypes", {}).items()), (tensor_inputs[0], ["float32", "float64"]))
    return Backward(name=name, kernel=kernel_name(name), func=schema, grads_in=grads_in, grads_out=grads_out,
                    checks=checks, outputs=[(g, t) for t, g in grads_out],
                    dtypes=(grads_in[0][0], list(first_dtypes[1])))


def _shape_and_dtype(rule: dict[str, Any]) -> tuple[str, str]:
    """An output rule's shape and dtype expressions (``like: x`` is x's shape and dtype)."""
    like = rule.get("like")
    shape = str(rule.get("shape", f"{like}.shape"))
    dtype = str(rule.get("dtype", f"{like}.dtype"))
    if dtype.isidentifier() and dtype not in E.DTYPES:  # `dtype: q`: q's dtype
        dtype += ".dtype"
    return shape, dtype


def scaffold(name: str, target: Path, env: Any, namespace: str, backward: bool) -> list[Path]:
    """Writes NAME's entries (appended to target/op_plugin_functions.yaml), its kernel folder
    csrc/kernels/NAME/ and tests/ops/test_NAME.py; returns the paths written. Raises ValueError
    for a bad name or an op that exists already."""
    if not NAME.fullmatch(name) or keyword.iskeyword(name):
        raise ValueError(f"{name!r} is not an op name (lower_case_with_underscores)")
    registry = target / "op_plugin_functions.yaml"
    folder = target / "csrc" / "kernels" / name
    kernel_path = folder / f"{name}_kernel.cpp"
    backward_path = folder / f"{name}_backward_kernel.cpp"
    test_path = target / "tests" / "ops" / f"test_{name}.py"
    existing = [str(p) for p in (kernel_path, backward_path, test_path) if p.exists()]
    text = registry.read_text() if registry.exists() else ""
    for op in (name, f"{name}_backward") if backward else (name,):
        if re.search(rf"^- func: {op}\(", text, re.M):
            existing.append(f"{registry} (entry {op})")
    if existing:
        raise ValueError(f"{name} exists already: {', '.join(existing)}")

    context: dict[str, Any] = dict(name=name, kernel=kernel_name(name), namespace=namespace, backward=None,
                                   kernel_path=os.path.relpath(kernel_path, target))
    if backward:
        forward_entry = yaml.safe_load(env.get_template("scaffold/entry.yaml.j2").render(**context))[0]
        context["backward"] = derive_backward(forward_entry)
        context["backward_path"] = os.path.relpath(backward_path, target)
    entry = env.get_template("scaffold/entry.yaml.j2").render(**context)
    if not registry.exists():
        entry = "# Operator registry (every key and expression: op_plugin's docs/registry.md).\n" + entry
    files = [(kernel_path, "scaffold/kernel.cpp.j2"), (test_path, "scaffold/test.py.j2")]
    if backward:
        files.insert(1, (backward_path, "scaffold/backward_kernel.cpp.j2"))
    for path, template in files:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(env.get_template(template).render(**context))
    with open(registry, "a", encoding="utf-8") as f:
        f.write(entry)
    return [registry] + [path for path, _ in files]
