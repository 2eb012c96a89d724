"""DTensor support: each op's sharding strategies (the registry's ``sharding:``), registered with
torch.distributed.tensor (docs/distributed.md, "DTensor").

The generated ``_generated/sharding.py`` has one function per op: given a call's arguments, the
strategies that hold, each as (name, {input: split axis or None}, {output: axis, None or
"partial"}). Here they become DTensor placements (Shard, Replicate, Partial), together with the
strategy every op has: every tensor whole on each rank (Replicate). DTensor expands them over the
mesh's dimensions, and a combination is kept only where each tensor's split axes divide evenly by
the ranks splitting them: no rank gets a ragged or an empty shard (the kernels refuse empty
tensors), and a rank's query heads always meet their own GQA group's key heads.

That filter needs DTensor's strategy expansion (``expand_to_full_mesh_op_strategy`` with its
filter: ``is_valid_strategy_cb`` in torch 2.13, ``full_mesh_strategy_filter`` in 2.14), an
internal API, used as its public ``register_sharding`` uses it. A torch without it gets
``register_sharding`` with a stricter filter: every split axis divisible by the whole mesh's size
(on a mesh of more than one dimension that refuses some valid splits, which DTensor then
redistributes: slower, never wrong).

Registering imports torch.distributed.tensor, which takes about 0.6 s: it is done when that
module is first imported (at once if it already is), so ``import op_plugin`` costs nothing more.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import inspect
import math
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

PARTIAL = "partial"
DTENSOR_MODULE = "torch.distributed.tensor"

# "namespace::op" -> the generated function giving its strategies for a call's arguments
RULES: dict[str, Callable[..., list[tuple[str, dict[str, Any], dict[str, Any]]]]] = {}
_registered: set[str] = set()


def install(namespace: str, rules: dict[str, Callable[..., Any]]) -> None:
    """Called by a package's generated sharding module: registers its ops' strategies with DTensor
    now if torch.distributed.tensor is loaded, else as soon as it is."""
    RULES.update({f"{namespace}::{name}": rule for name, rule in rules.items()})
    if not torch.distributed.is_available():
        return
    if hasattr(sys.modules.get(DTENSOR_MODULE), "DTensor"):
        _register_all_or_warn()
    elif not any(isinstance(f, _RegisterAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterImport())


def register_all(exact: bool | None = None) -> None:
    """Registers every installed op not registered yet; ``exact=False`` forces the public
    register_sharding path (tests), None takes the exact one where this torch has it."""
    from torch.distributed.tensor.experimental import register_sharding

    exact = _has_exact_filter() if exact is None else exact
    for qualname, rule in RULES.items():
        if qualname in _registered:
            continue
        namespace, name = qualname.split("::")
        op = getattr(getattr(torch.ops, namespace), name).default
        if exact:
            _register_exact(op, _placements(op, rule, whole_mesh_even=False))
        else:
            register_sharding(op)(_placements(op, rule, whole_mesh_even=True))
        _registered.add(qualname)


def _register_all_or_warn() -> None:
    try:
        register_all()
    except Exception as e:  # noqa: BLE001  (a torch whose DTensor API changed: the ops still run, whole on each rank)
        warnings.warn(f"op_plugin: the ops' DTensor sharding strategies were not registered: {e!r}", stacklevel=2)


# The expansion's per-combination filter, by torch release: 2.14 renamed 2.13's argument.
FILTER_ARGUMENTS = ("full_mesh_strategy_filter", "is_valid_strategy_cb")


def _filter_argument() -> str | None:
    try:
        from torch.distributed.tensor import DTensor
        from torch.distributed.tensor._ops.utils import expand_to_full_mesh_op_strategy
    except ImportError:
        return None
    propagator = getattr(getattr(DTensor, "_op_dispatcher", None), "sharding_propagator", None)
    if not hasattr(propagator, "register_op_strategy"):
        return None
    parameters = inspect.signature(expand_to_full_mesh_op_strategy).parameters
    return next((name for name in FILTER_ARGUMENTS if name in parameters), None)


def _has_exact_filter() -> bool:
    return _filter_argument() is not None


def _register_exact(op: Any, strategies: Callable[..., list[tuple[list[Any], list[Any]]]]) -> None:
    """register_sharding's registration (torch/distributed/tensor/experimental/_register_sharding.py),
    with the even-split filter applied to each combination of mesh dimensions, and every argument that
    is not a tensor part of the cache key (a rule may read any of them)."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._op_schema import OpStrategy, RuntimeSchemaInfo
    from torch.distributed.tensor._ops.utils import expand_to_full_mesh_op_strategy

    def spec_of(arg: Any) -> Any:  # an input's current placement, as register_sharding passes it
        return arg.strategies[0].output_spec if isinstance(arg, OpStrategy) else arg

    keep = {_filter_argument(): _splits_evenly}

    def strategy(op_schema: Any) -> Any:
        args = [spec_of(a) for a in op_schema.args_schema]
        kwargs = {k: spec_of(v) for k, v in op_schema.kwargs_schema.items()}
        return expand_to_full_mesh_op_strategy(
            op_schema.get_mesh_from_args(), op_schema, [outs + ins for outs, ins in strategies(*args, **kwargs)],
            input_index=len(op._schema.returns), **keep)

    arguments = op._schema.arguments
    positional = [i for i, a in enumerate(arguments) if not a.kwarg_only and not _is_tensor_type(a.type)]
    keywords = [a.name for a in arguments if a.kwarg_only and not _is_tensor_type(a.type)]
    info = RuntimeSchemaInfo(min(positional, default=100), keywords or None, needs_pytree=True)
    DTensor._op_dispatcher.sharding_propagator.register_op_strategy(op, strategy, info)


def _is_tensor_type(t: Any) -> bool:
    t = t.getElementType() if isinstance(t, torch.OptionalType) else t
    return isinstance(t, torch.TensorType)


def _splits_evenly(input_specs: list[Any], output_specs: Any) -> bool:
    """Each input's split axes divide evenly by the ranks splitting them (their mesh dims' sizes)."""
    for spec in input_specs:
        ranks = [1] * spec.ndim
        for mesh_dim, placement in enumerate(spec.placements):
            if placement.is_shard():
                ranks[placement.dim] *= spec.mesh.size(mesh_dim)
        if any(size % r or (r > 1 and size < r) for size, r in zip(spec.shape, ranks)):
            return False
    return True


class _RegisterAfterImport(importlib.abc.MetaPathFinder):
    """Finds torch.distributed.tensor as the other finders do, and registers the strategies once its
    module has run."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> Any:
        if fullname != DTENSOR_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def run_then_register(module: Any) -> None:
            run(module)
            _register_all_or_warn()

        spec.loader.exec_module = run_then_register  # type: ignore[method-assign]
        return spec


class _GlobalTensor:
    """A DTensor's spec read as the rules read a tensor: the whole (global) tensor's shape and dtype."""

    def __init__(self, spec: Any) -> None:
        self.shape = torch.Size(spec.shape)
        self.dtype = spec.tensor_meta.dtype

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return math.prod(self.shape)


def _is_spec(value: Any) -> bool:
    return hasattr(value, "placements") and hasattr(value, "mesh")


def _placements(op: Any, rule: Callable[..., Any], whole_mesh_even: bool
                ) -> Callable[..., list[tuple[list[Any], list[Any]]]]:
    """register_sharding's function for ``op``: its arguments come as the call gave them (a DTensor
    as its spec); it returns (output placements, input placements) per strategy, the inputs in the
    order DTensor counts them (positional arguments, then keyword ones), None for a non-tensor.
    ``whole_mesh_even``: leave out strategies that split an axis the mesh's size does not divide."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    names = [a.name for a in op._schema.arguments]
    returns = [(r.name, isinstance(r.type, torch.TensorType)) for r in op._schema.returns]

    def placement(axis: Any) -> Any:
        return Partial() if axis == PARTIAL else Replicate() if axis is None else Shard(axis)

    def strategies(*args: Any, **kwargs: Any) -> list[tuple[list[Any], list[Any]]]:
        given = list(zip(names, args)) + list(kwargs.items())
        specs = {n: v for n, v in given if _is_spec(v)}
        ranks = next(iter(specs.values())).mesh.size()
        result = [([Replicate() if is_tensor else None for _, is_tensor in returns],
                   [Replicate() if n in specs else None for n, _ in given])]
        call = {n: _GlobalTensor(v) if n in specs else v for n, v in given}
        for _name, inputs, outputs in rule(**call):
            split = {n: axis for n, axis in inputs.items() if n in specs and axis is not None}
            if whole_mesh_even and any(specs[n].shape[axis] % ranks for n, axis in split.items()):
                continue
            result.append(([placement(outputs[n]) if is_tensor else None for n, is_tensor in returns],
                           [placement(split.get(n)) if n in specs else None for n, _ in given]))
        return result

    return strategies
