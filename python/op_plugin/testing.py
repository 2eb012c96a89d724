"""The standard tests of an op, run from its registry entry (docs/generated_tests.md).

The generated test modules (tests/test_<op>.py, written by ``codegen/dest/tests.py``; run them
with ``op-plugin test [OP]``) describe one op as an ``OpSpec``: its samples, its float64
reference, its checks with the mutations that may fire each one, its autograd pairing. The
checks here are what a demanding user runs on a custom op:

    check_reference    every allowed dtype against the float64 reference, within 2x the error of
                       the same-dtype PyTorch computation of the reference (assert_within_budget)
    check_fake_shapes  FakeTensor outputs have the eager shapes and dtypes
    check_opcheck      torch.library.opcheck
    check_gradcheck    torch.autograd.gradcheck in float64 (ops with an autograd pairing)
    check_compile      torch.compile(fullgraph=True) forward, and backward, equal to eager
    check_export       torch.export with every tensor dimension dynamic, and its save/load round
                       trip, equal to eager at the sample's sizes and at other sizes
    check_dynamic_compile  torch.compile(dynamic=True) compiles once for every size the op accepts
    check_func_transforms  torch.func.vjp equals torch.autograd.grad (ops with an autograd pairing)
    check_vmap         torch.vmap (and vmap of vjp) equals the op called per sample, up to rounding
    check_autocast     under torch.autocast the op makes the call its autocast: rule says, bit for bit,
                       forward, backward, in fake mode and compiled (ops with an autocast: rule)
    check_sharding     each strategy of the op's sharding: rule (what DTensor runs on each rank): the op
                       called on even shards of a sample, its outputs joined, gives the unsplit call
    check_eager_path   no Python runs on the eager call, forward or backward, past torch's own
                       entry points (the op's Autograd kernel, binding and kernels are C++)
    check_error        one failing call per check: a mutated sample fires the check's text, in
                       eager and in fake mode alike

A backward op without samples of its own gets its forward's: the forward is run and its inputs,
outputs and incoming gradients are mapped to the backward's arguments as the autograd pairing
says; its reference is torch.autograd of the forward's reference.
"""
from __future__ import annotations

import contextlib
import io
import math
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
import torch.autograd.forward_ad as fwAD
import torch.fx.experimental._config
from torch._subclasses.fake_tensor import FakeTensorMode

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64,
          "int8": torch.int8, "uint8": torch.uint8, "int32": torch.int32, "int64": torch.int64, "bool_": torch.bool}
SEED = 1234


@dataclass(frozen=True)
class CheckSpec:
    """One check of the registry: the regex of its text and the mutations that may fire it."""

    line: int
    pattern: str
    strict: bool
    warn: bool
    mutations: list[tuple[str, str]]  # (dtype|dim|size|empty|none|value, argument)
    ints: list[int] = field(default_factory=list)  # constants the check compares with
    strs: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ForwardSpec:
    """The forward op whose samples a backward op derives its own from."""

    op: Any
    kinds: dict[str, str]
    outputs: list[str]
    samples: list[dict[str, Any]]
    inputs: list[tuple[str, str, str]]  # backward argument, input|output|grad, forward name
    grads: list[tuple[str, str]]  # forward input, backward output
    overrides: dict[str, Any]
    defaults: dict[str, Any] = field(default_factory=dict)  # the forward's schema defaults
    reference: Optional[Callable[..., Any]] = None
    reference_returns: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class AutocastSpec:
    """The registry's autocast: rule: torch's cast policy and the tensor arguments it casts."""

    policy: str  # lower_precision_fp | fp32 | promote
    inputs: list[str]


@dataclass(frozen=True)
class OpSpec:
    name: str
    op: Any
    kinds: dict[str, str]
    dtype_argument: Optional[str]
    dtypes: tuple[torch.dtype, ...]
    tensor_dtypes: dict[str, tuple[torch.dtype, ...]]
    outputs: list[str]
    samples: Optional[list[dict[str, Any]]]
    bad_calls: list[dict[str, Any]]
    checks: list[CheckSpec]
    differentiable_inputs: list[str]
    differentiable_outputs: list[str]
    reference: Optional[Callable[..., Any]] = None
    reference_returns: list[str] = field(default_factory=list)
    forward: Optional[ForwardSpec] = None
    autocast: Optional[AutocastSpec] = None
    sharding: list[str] = field(default_factory=list)  # the names of the registry's sharding: strategies


# ---- error budget ---------------------------------------------------------------------------------

def assert_within_budget(ours: torch.Tensor, torch_same_dtype: torch.Tensor, reference64: torch.Tensor,
                         name: str = "output", scale_floor: float = 1.0,
                         computed_in: torch.dtype | None = None, summed: int = 0) -> None:
    """op_plugin's error is at most 2x the error of the same-dtype PyTorch computation.

    Both are measured against a float64 reference. A floor of four ulps of the dtype at the
    output's scale (at least ``scale_floor``) keeps a near-exact PyTorch result from demanding
    more than exactness up to summation order; the ulps are those of the output's dtype or of
    ``computed_in`` (the inputs' dtype of a float32 statistic or gradient), whichever is coarser,
    plus sqrt(``summed``) float32 ulps for an output that sums that many cancelling terms (two
    valid summation orders differ by about that much).
    Where the same-dtype computation overflows (float16 inv_norm**3 of a tiny row) and the
    reference does not, only the floor is left. float64 outputs have no higher-precision
    reference: they must agree with it to 1e-10.
    """
    assert ours.shape == reference64.shape, f"{name}: shape {tuple(ours.shape)}, the reference's {tuple(reference64.shape)}"
    if not ours.is_floating_point():  # an int or bool output is exact
        assert torch.equal(ours, reference64.to(ours.dtype)), f"{name}: differs from the reference"
        return
    ref = reference64.double()
    if ours.dtype == torch.float64:  # no higher-precision reference: agree to summation order
        torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12, msg=lambda m: f"{name}: {m}")
        return
    dtype = ours.dtype  # the ulps below are the output's dtype's, not float64's
    finite = torch.isfinite(ref)  # +-inf entries (an empty row's lse) must match exactly
    assert torch.equal(ours.double()[~finite], ref[~finite]), f"{name}: the reference's inf entries differ"
    ours, torch_same_dtype, ref = ours.double()[finite], torch_same_dtype.double()[finite], ref[finite]
    our_err = (ours - ref).abs().max().item() if ref.numel() else 0.0
    torch_err = (torch_same_dtype - ref).abs().max().item() if ref.numel() else 0.0
    if not math.isfinite(torch_err):
        torch_err = 0.0
    scale = ref.abs().max().item() if ref.numel() else 0.0
    eps = max(torch.finfo(dtype).eps, torch.finfo(computed_in or dtype).eps)
    ulp = 4 * (eps + math.sqrt(summed) * torch.finfo(torch.float32).eps) * max(scale, scale_floor)
    budget = 2 * torch_err + ulp
    assert our_err <= budget, (f"{name}: error {our_err:.3g} exceeds 2x PyTorch's same-dtype error "
                               f"{torch_err:.3g} (+4 ulps {ulp:.3g})")


# ---- samples --------------------------------------------------------------------------------------

def _tensor(spec: Any, dtype: torch.dtype, gen: torch.Generator, built: dict[str, Any]) -> torch.Tensor:
    """One tensor of a sample; float values are drawn in float64 and rounded to ``dtype``, so every
    dtype sees the same numbers as nearly as it can hold them."""
    if isinstance(spec, list):
        spec = {"shape": spec}
    want = DTYPES[spec["dtype"]] if "dtype" in spec else None
    if "values" in spec:
        return torch.tensor(spec["values"], dtype=want or dtype)
    if "like" in spec:
        other = built[spec["like"]]
        shape, want = list(other.shape), want or other.dtype
    else:
        shape = spec["shape"]
    want = want or dtype
    lo, hi = spec.get("range", (None, None))
    if want == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if not want.is_floating_point:
        return torch.randint(int(lo if lo is not None else 0), int(hi if hi is not None else 10), shape,
                             generator=gen, dtype=want)
    if lo is None:
        values = torch.randn(shape, generator=gen, dtype=torch.float64)
    else:
        values = lo + (hi - lo) * torch.rand(shape, generator=gen, dtype=torch.float64)
    return values.to(want)


def _size(size: Any, dims: dict[str, int]) -> int:
    """A size: an int, or an expression of the sample's dims (checked by the generator)."""
    return size if isinstance(size, int) else int(eval(size, {"__builtins__": {}}, dict(dims)))  # noqa: S307


def build_sample(kinds: dict[str, str], sample: dict[str, Any], dtype: torch.dtype, seed: int = SEED,
                 dims: Optional[dict[str, int]] = None) -> dict[str, Any]:
    """The call ``sample`` describes, with float tensors in ``dtype`` (those given a dtype keep it);
    ``dims`` overrides some of its named sizes."""
    gen = torch.Generator().manual_seed(seed)
    sizes = {**sample.get("dims", {}), **(dims or {})}
    built: dict[str, Any] = {}
    for name, value in sample.items():
        if name == "dims":
            continue
        if value is not None and kinds[name].rstrip("?") == "Tensor":
            if isinstance(value, list) or "shape" in value:
                shape = value if isinstance(value, list) else value["shape"]
                shape = [_size(d, sizes) for d in shape]
                value = shape if isinstance(value, list) else {**value, "shape": shape}
            built[name] = _tensor(value, dtype, gen, built)
        elif isinstance(value, str) and kinds[name].rstrip("?") == "int":
            built[name] = _size(value, sizes)
        else:
            built[name] = list(value) if isinstance(value, list) else value
    return built


def _outputs(out: Any, names: list[str]) -> dict[str, Any]:
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return dict(zip(names, outs))


def _as_dtype(sample: dict[str, Any], dtype: torch.dtype) -> dict[str, Any]:
    """The sample with its floating tensors in ``dtype`` (float32 statistics stay float32 below float64)."""
    return {k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in sample.items()}


def samples(spec: OpSpec, dtype: torch.dtype) -> list[dict[str, Any]]:
    """The op's calls in ``dtype``: its own samples, or those derived from its forward's."""
    if spec.samples is not None:
        return [build_sample(spec.kinds, s, dtype, SEED + i) for i, s in enumerate(spec.samples)]
    return [_backward_sample(spec, s, dtype, SEED + i)[0] for i, s in enumerate(spec.forward.samples)]


def _bad_call(spec: OpSpec, bad: dict[str, Any]) -> dict[str, Any]:
    """A bad_calls: item as a call: its sample with other dims, dtype and arguments."""
    index = bad.get("sample", 0)
    dtype = DTYPES[bad["dtype"]] if "dtype" in bad else _first_dtype(spec)
    if spec.samples is not None:
        x = build_sample(spec.kinds, spec.samples[index], dtype, SEED + index, bad.get("dims"))
    else:
        forward = {**spec.forward.samples[index], **bad.get("forward_args", {})}
        x = _backward_sample(spec, forward, dtype, SEED + index, bad.get("dims"))[0]
    return {**x, **build_sample(spec.kinds, {**bad.get("args", {}), "dims": dict(_dims_of(spec, index), **bad.get("dims", {}))},
                                dtype)}


def _dims_of(spec: OpSpec, index: int) -> dict[str, int]:
    own = spec.samples if spec.samples is not None else spec.forward.samples
    return own[index].get("dims", {})


def _backward_sample(spec: OpSpec, forward_sample: dict[str, Any], dtype: torch.dtype, seed: int,
                     dims: Optional[dict[str, int]] = None
                     ) -> tuple[dict[str, Any], dict[str, Any], dict[str, torch.Tensor]]:
    """(backward call, forward call, incoming gradients) for one forward sample."""
    fwd = spec.forward
    x = build_sample(fwd.kinds, forward_sample, dtype, seed, dims)
    outs = _outputs(fwd.op(**{**x, **fwd.overrides}), fwd.outputs)
    gen = torch.Generator().manual_seed(seed + 1)
    grads = {name: torch.randn(outs[name].shape, generator=gen, dtype=torch.float64).to(outs[name].dtype)
             for _, source, name in fwd.inputs if source == "grad"}
    call = {}
    for arg, source, name in fwd.inputs:
        call[arg] = x.get(name, fwd.defaults.get(name)) if source == "input" else (
            outs[name] if source == "output" else grads[name])
    return call, x, grads


def _reference_outputs(spec: OpSpec, x: dict[str, Any]) -> dict[str, torch.Tensor]:
    return _outputs(spec.reference(**x), spec.reference_returns)


def _backward_reference(spec: OpSpec, x: dict[str, Any], grads: dict[str, torch.Tensor], dtype: torch.dtype
                        ) -> dict[str, torch.Tensor]:
    """The backward's outputs as torch.autograd of the forward's reference, computed in ``dtype``."""
    fwd = spec.forward
    x = _as_dtype(x, dtype)
    wanted = [(fwd_in, bwd_out) for fwd_in, bwd_out in fwd.grads if isinstance(x.get(fwd_in), torch.Tensor)]
    leaves = [x[fwd_in].detach().requires_grad_() for fwd_in, _ in wanted]
    x.update({fwd_in: leaf for (fwd_in, _), leaf in zip(wanted, leaves)})
    outs = _outputs(fwd.reference(**x), fwd.reference_returns)
    used = [name for name in grads if name in outs]
    got = torch.autograd.grad([outs[n] for n in used], leaves, [grads[n].to(outs[n].dtype) for n in used],
                              allow_unused=True)
    return {bwd_out: (g if g is not None else torch.zeros_like(leaf))
            for (_, bwd_out), g, leaf in zip(wanted, got, leaves)}


def check_reference(spec: OpSpec, dtype: torch.dtype) -> None:
    """Every sample in ``dtype`` against the float64 reference, within the error budget."""
    if spec.samples is not None:
        assert spec.reference is not None, f"{spec.name} has samples but no reference:"
        for x in samples(spec, dtype):
            ours = _outputs(spec.op(**x), spec.outputs)
            ref64 = _reference_outputs(spec, _as_dtype(x, torch.float64))
            same = _reference_outputs(spec, x) if dtype != torch.float64 else ref64
            for name in spec.reference_returns:
                assert_within_budget(ours[name], same[name], ref64[name], f"{spec.name}.{name}", computed_in=dtype)
        return
    assert spec.forward.reference is not None, f"{spec.name}'s forward has samples but no reference:"
    for i, s in enumerate(spec.forward.samples):
        call, x, grads = _backward_sample(spec, s, dtype, SEED + i)
        ours = _outputs(spec.op(**call), spec.outputs)
        grads64 = {k: g.double() for k, g in grads.items()}
        ref64 = _backward_reference(spec, x, grads64, torch.float64)
        same = _backward_reference(spec, x, grads, dtype) if dtype != torch.float64 else ref64
        for name in ref64:
            assert_within_budget(ours[name], same[name], ref64[name], f"{spec.name}.{name}", computed_in=dtype)


def _first_dtype(spec: OpSpec) -> torch.dtype:
    return torch.float32 if torch.float32 in spec.dtypes or not spec.dtypes else spec.dtypes[0]


def _fake(mode: FakeTensorMode, x: dict[str, Any]) -> dict[str, Any]:
    return {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in x.items()}


def _shapes(out: Any) -> list[Any]:
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [(tuple(o.shape), o.dtype) if isinstance(o, torch.Tensor) else o for o in outs]


def check_fake_shapes(spec: OpSpec) -> None:
    for x in samples(spec, _first_dtype(spec)):
        eager = _shapes(spec.op(**x))
        with FakeTensorMode() as mode:
            fake = _shapes(spec.op(**_fake(mode, x)))
        assert fake == eager, f"{spec.name}: fake outputs {fake}, eager {eager}"


def check_opcheck(spec: OpSpec) -> None:
    """torch.library.opcheck of every sample, its differentiable inputs requiring grad (so the
    autograd registration is checked too)."""
    for x in samples(spec, _first_dtype(spec)):
        x.update({n: x[n].detach().requires_grad_() for n in _differentiable(spec, x)})
        torch.library.opcheck(spec.op, (), x)


def _differentiable(spec: OpSpec, x: dict[str, Any]) -> list[str]:
    return [n for n in spec.differentiable_inputs if isinstance(x.get(n), torch.Tensor) and x[n].is_floating_point()]


def check_gradcheck(spec: OpSpec) -> None:
    """gradcheck in float64 of the differentiable outputs with respect to the differentiable inputs."""
    for x in samples(spec, torch.float64):
        names = _differentiable(spec, x)

        def f(*leaves: torch.Tensor, x: dict[str, Any] = x, names: list[str] = names) -> tuple[torch.Tensor, ...]:
            outs = _outputs(spec.op(**{**x, **dict(zip(names, leaves))}), spec.outputs)
            return tuple(outs[n] for n in spec.differentiable_outputs)

        assert torch.autograd.gradcheck(f, [x[n].detach().requires_grad_() for n in names], fast_mode=True)


def check_compile(spec: OpSpec) -> None:
    """torch.compile(fullgraph=True) of the first sample's call gives eager's outputs, and its gradients."""
    x = samples(spec, _first_dtype(spec))[0]
    names = _differentiable(spec, x)
    torch._dynamo.reset()  # every op compiles this same code object: start with no cached graphs

    def run(leaves: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        return tuple(o for o in _outputs(spec.op(**{**x, **leaves}), spec.outputs).values())

    compiled = torch.compile(run, fullgraph=True, backend="aot_eager")
    eager_leaves = {n: x[n].detach().requires_grad_(True) for n in names}
    compiled_leaves = {n: x[n].detach().requires_grad_(True) for n in names}
    eager, got = run(eager_leaves), compiled(compiled_leaves)
    for name, a, b in zip(spec.outputs, eager, got):
        torch.testing.assert_close(b, a, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{spec.name}.{name}: {m}")
    if not names:
        return
    index = [spec.outputs.index(o) for o in spec.differentiable_outputs]
    weights = [torch.randn(eager[i].shape, generator=torch.Generator().manual_seed(i)).to(eager[i].dtype)
               for i in index]
    grads = [torch.autograd.grad(sum((outs[i] * w).sum() for i, w in zip(index, weights)), list(leaves.values()))
             for outs, leaves in ((eager, eager_leaves), (got, compiled_leaves))]
    for name, a, b in zip(names, *grads):
        torch.testing.assert_close(b, a, rtol=0, atol=0, msg=lambda m: f"{spec.name} grad of {name}: {m}")


def _split(x: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """A call's tensor arguments and the rest."""
    return ({k: v for k, v in x.items() if isinstance(v, torch.Tensor)},
            {k: v for k, v in x.items() if not isinstance(v, torch.Tensor)})


def _resized_calls(spec: OpSpec, index: int, dtype: torch.dtype) -> Iterator[tuple[str, dict[str, Any]]]:
    """Sample ``index`` at other sizes: each of its named sizes of at least 2 that no int argument
    is computed from, changed to size + 1 and to 2 * size, where the call keeps the same tensor
    arguments and the same other values and the op accepts it in eager."""
    own, kinds = (spec.samples, spec.kinds) if spec.samples is not None else (spec.forward.samples, spec.forward.kinds)
    sample = own[index]
    in_ints = {word for name, value in sample.items() if name != "dims" and isinstance(value, str)
               and kinds[name].rstrip("?") == "int" for word in re.findall(r"[A-Za-z_]\w*", value)}
    tensors, rest = _split(samples(spec, dtype)[index])
    for dim, size in sample.get("dims", {}).items():
        if dim in in_ints or size < 2:
            continue
        for new in (size + 1, 2 * size):
            try:
                y = (build_sample(spec.kinds, sample, dtype, SEED + index, {dim: new}) if spec.samples is not None
                     else _backward_sample(spec, sample, dtype, SEED + index, {dim: new})[0])
                y_tensors, y_rest = _split(y)
                if set(y_tensors) != set(tensors) or y_rest != rest:
                    continue
                spec.op(**y)
            # The op, or the forward a backward's sample runs, rejects the size.
            except (RuntimeError, ValueError, IndexError):
                continue
            yield f"{dim}={new}", y


def _save_and_load(program: Any) -> Any:
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    buffer.seek(0)
    return torch.export.load(buffer)


def check_export(spec: OpSpec) -> None:
    """torch.export of every sample's call keeps the op as one node. Exported with every dimension
    of every tensor argument dynamic (Dim.AUTO), the program gives eager's outputs bit for bit at
    the sample's sizes and at other sizes the op accepts (the fake function pins a size only where
    a registry rule ties it to a constant or an int argument); exported with static shapes, too.
    Both survive torch.export.save / load, except a dynamic program whose op returns a symbolic
    int (swa_forward's numels): torch 2.13's serializer cannot write a SymInt among several
    outputs, which this check asserts so that a torch that can is noticed. Gradients through the
    loaded module equal eager's."""
    dtype = _first_dtype(spec)
    resized = 0
    for i, x in enumerate(samples(spec, dtype)):
        tensors, rest = _split(x)
        names = list(tensors)

        class Call(torch.nn.Module):
            def forward(self, *args: torch.Tensor) -> Any:
                return spec.op(**dict(zip(names, args)), **rest)

        dims = tuple({d: torch.export.Dim.AUTO for d in range(t.dim())} for t in tensors.values())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.export's own deprecation notes
            static = torch.export.export(Call(), tuple(tensors.values()))
            dynamic = torch.export.export(Call(), tuple(tensors.values()), dynamic_shapes=(dims,) if names else None)
            programs = {"static": static, "static, saved and loaded": _save_and_load(static), "dynamic": dynamic}
            nodes = [n for n in dynamic.graph.nodes if n.op == "call_function" and n.target == spec.op]
            assert len(nodes) == 1, f"{spec.name} sample {i}: the exported graph calls the op {len(nodes)} times"
            outs = nodes[0].meta["val"]
            if any(isinstance(v, torch.SymInt) for v in (outs if isinstance(outs, (tuple, list)) else [outs])):
                try:
                    _save_and_load(dynamic)
                except Exception as e:  # torch._export.serde.serialize.SerializeError
                    assert "torch.SymInt" in str(e), f"{spec.name} sample {i}: {e}"
                else:
                    raise AssertionError(f"{spec.name} sample {i}: torch.export.save now writes a symbolic int "
                                         "output: test the loaded program and update docs/compile.md")
            else:
                programs["dynamic, saved and loaded"] = _save_and_load(dynamic)
        for label, y in [("", x), *_resized_calls(spec, i, dtype)]:
            eager = _outputs(spec.op(**y), spec.outputs)
            for where, program in programs.items():
                if label and where.startswith("static"):
                    continue
                got = _outputs(program.module()(*(y[n] for n in names)), spec.outputs)
                for name, want in eager.items():
                    torch.testing.assert_close(got[name], want, rtol=0, atol=0, equal_nan=True,
                                               msg=lambda m: f"{spec.name} sample {i} {label} {where}, {name}: {m}")
            resized += bool(label)
        grads = _differentiable(spec, x) if spec.differentiable_outputs else []
        if not grads:
            continue
        results = []
        loaded = programs["static, saved and loaded"].module()
        for run in (lambda leaves: spec.op(**{**x, **leaves}),
                    lambda leaves: loaded(*({**tensors, **leaves}[n] for n in names))):
            leaves = {n: x[n].detach().requires_grad_() for n in grads}
            outs = _outputs(run(leaves), spec.outputs)
            loss = sum((outs[o].float() * (k + 1)).sum() for k, o in enumerate(spec.differentiable_outputs))
            results.append(torch.autograd.grad(loss, list(leaves.values())))
        for name, a, b in zip(grads, *results):
            torch.testing.assert_close(b, a, rtol=0, atol=0,
                                       msg=lambda m: f"{spec.name} sample {i} exported, grad of {name}: {m}")
    assert resized, f"{spec.name}: no sample runs at other sizes (give a sample dims:)"


def check_dynamic_compile(spec: OpSpec) -> None:
    """torch.compile(dynamic=True, fullgraph=True) of every sample's call compiles once, its backward
    included (AOTAutograd traces the joint graph up front): at other sizes the op accepts it runs
    the same graph (torch.compiler's "fail_on_recompile" stance) and gives eager's outputs and
    gradients bit for bit. A shape rule that guards on a size, or an int output that reaches C++
    as int64_t, would recompile. Duck sizing is off: a sample's sizes that are equal by chance
    (B = N = 2) would otherwise be one symbol, and a resized call would recompile for torch's
    reason, not the op's."""
    with torch.fx.experimental._config.patch(use_duck_shape=False):
        _check_dynamic_compile(spec)


def _check_dynamic_compile(spec: OpSpec) -> None:
    dtype = _first_dtype(spec)
    resized = 0
    for i, x in enumerate(samples(spec, dtype)):
        tensors, rest = _split(x)
        names = _differentiable(spec, x) if spec.differentiable_outputs else []
        index = [spec.outputs.index(o) for o in spec.differentiable_outputs]
        torch._dynamo.reset()

        def run(args: dict[str, torch.Tensor]) -> tuple[Any, ...]:
            return tuple(_outputs(spec.op(**args, **rest), spec.outputs).values())

        compiled = torch.compile(run, dynamic=True, fullgraph=True, backend="aot_eager")
        for label, y in [("", x), *_resized_calls(spec, i, dtype)]:
            results = []
            for f, stance in ((run, "default"), (compiled, "fail_on_recompile" if label else "default")):
                args = {n: t.detach().requires_grad_(n in names) for n, t in _split(y)[0].items()}
                with torch.compiler.set_stance(stance):
                    outs = f(args)
                loss = sum((outs[k].float() * (j + 1)).sum() for j, k in enumerate(index))
                results.append(outs + (torch.autograd.grad(loss, [args[n] for n in names]) if names else ()))
            for k, (a, b) in enumerate(zip(*results)):
                what = spec.outputs[k] if k < len(spec.outputs) else f"grad of {names[k - len(spec.outputs)]}"
                if isinstance(a, torch.Tensor):
                    torch.testing.assert_close(b, a, rtol=0, atol=0, equal_nan=True,
                                               msg=lambda m: f"{spec.name} sample {i} {label}, {what}: {m}")
                else:
                    assert a == b, f"{spec.name} sample {i} {label}: {what} {b} != {a}"
            resized += bool(label)
    assert resized, f"{spec.name}: no sample runs at other sizes (give a sample dims:)"


def check_func_transforms(spec: OpSpec) -> None:
    """torch.func.vjp of every sample's call (its differentiable outputs with respect to its
    differentiable inputs) gives torch.autograd.grad's gradients bit for bit: the Autograd kernel's
    node works under torch.func's transforms, as an aten op's does. Forward mode (torch.func.jvp, a
    forward_ad dual tensor) is refused with torch's not-implemented text, not answered with zeros."""
    for i, x in enumerate(samples(spec, _first_dtype(spec))):
        names = _differentiable(spec, x)
        if not names or not spec.differentiable_outputs:
            continue

        def f(*leaves: torch.Tensor, x: dict[str, Any] = x, names: list[str] = names) -> tuple[torch.Tensor, ...]:
            outs = _outputs(spec.op(**{**x, **dict(zip(names, leaves))}), spec.outputs)
            return tuple(outs[n] for n in spec.differentiable_outputs)

        primals = [x[n].detach() for n in names]
        outs, vjp_fn = torch.func.vjp(f, *primals)
        cotangents = tuple(torch.randn(o.shape, generator=torch.Generator().manual_seed(k)).to(o.dtype)
                           for k, o in enumerate(outs))
        got = vjp_fn(cotangents)
        leaves = [p.clone().requires_grad_() for p in primals]
        want = torch.autograd.grad(f(*leaves), leaves, cotangents, allow_unused=True)
        for name, a, b in zip(names, want, got):
            a = torch.zeros_like(b) if a is None else a
            torch.testing.assert_close(b, a, rtol=0, atol=0, msg=lambda m: f"{spec.name} sample {i} vjp of {name}: {m}")
        _check_forward_ad_refused(spec, i, f, primals)


def _check_forward_ad_refused(spec: OpSpec, i: int, f: Callable[..., Any], primals: list[torch.Tensor]) -> None:
    """Forward mode has no formula: torch.func.jvp and a forward_ad dual tensor are refused with
    torchgen's text for such ops (the generated Autograd kernel checks), never answered with zeros."""
    def jvp() -> Any:
        return torch.func.jvp(f, tuple(primals), tuple(map(torch.ones_like, primals)))

    def dual() -> Any:
        with fwAD.dual_level():
            return f(fwAD.make_dual(primals[0], torch.ones_like(primals[0])), *primals[1:])

    for label, call in (("torch.func.jvp", jvp), ("a forward_ad dual tensor", dual)):
        try:
            call()
        except NotImplementedError as e:
            assert f"Trying to use forward AD with {spec.op._schema.name} that does not" in str(e), str(e)
        else:
            raise AssertionError(f"{spec.name} sample {i}: {label} was not refused")


def _sample_copies(spec: OpSpec, index: int, count: int, dtype: torch.dtype) -> list[dict[str, Any]]:
    """``count`` calls like sample ``index``, with other tensor values (the same sizes and options)."""
    seeds = [SEED + index + 7919 * k for k in range(count)]
    if spec.samples is not None:
        return [build_sample(spec.kinds, spec.samples[index], dtype, seed) for seed in seeds]
    return [_backward_sample(spec, spec.forward.samples[index], dtype, seed)[0] for seed in seeds]


def _stacked(tensors: list[torch.Tensor], dim: int) -> torch.Tensor:
    return torch.stack(tensors, dim=dim if dim >= 0 else tensors[0].dim() + 1 + dim)


def check_vmap(spec: OpSpec) -> None:
    """torch.vmap over the op equals the op called on each sample, for every sample
    (three copies with other values), with every tensor batched (at the front and at the back),
    with only the first batched (the others shared by every sample), and with every other one
    batched: the registry's fold rule (bindings/<op>_vmap.cpp) and the per-sample calls where it
    does not fold. Ops with an autograd pairing: vmap of torch.func.vjp (per-sample gradients: the
    backward op vmapped with its forward) and the vjp function vmapped over cotangents alone (what
    jacrev does: the backward op vmapped with shared forward tensors), each against a loop. Equal
    up to rounding (torch's default tolerance of the dtype): a fold changes B, and a kernel's plan
    may depend on it (the flash backward's key chunks when B x N is small), which reorders a sum.
    Int outputs are left out: vmap cannot batch them, and a folded call's describe the folded call."""
    dtype = _first_dtype(spec)
    count = len(spec.samples if spec.samples is not None else spec.forward.samples)
    for i in range(count):
        copies = _sample_copies(spec, i, 3, dtype)
        names = [n for n, v in copies[0].items() if isinstance(v, torch.Tensor)]
        if not names:
            continue  # nothing to vmap over
        tensor_outputs = [n for n, v in _outputs(spec.op(**copies[0]), spec.outputs).items()
                          if isinstance(v, torch.Tensor)]

        def f(*tensors: torch.Tensor, batched: list[str], x: dict[str, Any]) -> tuple[torch.Tensor, ...]:
            outs = _outputs(spec.op(**{**x, **dict(zip(batched, tensors))}), spec.outputs)
            return tuple(outs[n] for n in tensor_outputs)

        layouts = {"every tensor at dim 0": (names, 0), "every tensor at dim -1": (names, -1),
                   f"only {names[0]}": (names[:1], 0), "every other tensor": (names[::2], 0)}
        for label, (batched, dim) in layouts.items():
            calls = [{**copies[0], **{n: c[n] for n in batched}} for c in copies]
            want = [f(*[c[n] for n in batched], batched=batched, x=c) for c in calls]
            got = torch.vmap(lambda *t, b=batched: f(*t, batched=b, x=copies[0]), in_dims=dim)(
                *[_stacked([c[n] for c in calls], dim) for n in batched])
            for name, g, *per_sample in zip(tensor_outputs, got, *want):
                torch.testing.assert_close(g, torch.stack(per_sample), equal_nan=True,
                                           msg=lambda m: f"{spec.name} sample {i}, vmap with {label}, {name}: {m}")
        _check_vmapped_vjp(spec, i, copies)


def _check_vmapped_vjp(spec: OpSpec, i: int, copies: list[dict[str, Any]]) -> None:
    names = _differentiable(spec, copies[0])
    if not names or not spec.differentiable_outputs:
        return

    def f(*leaves: torch.Tensor, x: dict[str, Any]) -> tuple[torch.Tensor, ...]:
        outs = _outputs(spec.op(**{**x, **dict(zip(names, leaves))}), spec.outputs)
        return tuple(outs[n] for n in spec.differentiable_outputs)

    def cotangents(x: dict[str, Any], seed: int) -> tuple[torch.Tensor, ...]:
        return tuple(torch.randn(o.shape, generator=torch.Generator().manual_seed(seed + k)).to(o.dtype)
                     for k, o in enumerate(f(*[x[n] for n in names], x=x)))

    def vjp(primals: list[torch.Tensor], cts: tuple[torch.Tensor, ...], x: dict[str, Any]) -> tuple[torch.Tensor, ...]:
        return torch.func.vjp(lambda *p: f(*p, x=x), *primals)[1](cts)

    # The differentiable inputs differ between the samples; the other arguments are copy 0's.
    copies = [{**copies[0], **{n: c[n] for n in names}} for c in copies]
    cts = [cotangents(c, 100 * k) for k, c in enumerate(copies)]
    # Per-sample gradients: the forward and its backward vmapped together.
    want = [vjp([c[n] for n in names], ct, c) for c, ct in zip(copies, cts)]
    got = torch.vmap(lambda p, ct: vjp(list(p), ct, copies[0]))(
        tuple(torch.stack([c[n] for c in copies]) for n in names), tuple(torch.stack(t) for t in zip(*cts)))
    # jacrev's shape: one forward, its vjp function vmapped over cotangents.
    x = copies[0]
    _, vjp_fn = torch.func.vjp(lambda *p: f(*p, x=x), *[x[n] for n in names])
    want_ct = [vjp_fn(ct) for ct in cts]
    got_ct = torch.vmap(vjp_fn)(tuple(torch.stack(t) for t in zip(*cts)))
    for label, g_all, w_all in (("vmap(vjp)", got, want), ("vmap(vjp_fn) over cotangents", got_ct, want_ct)):
        for name, g, *per_sample in zip(names, g_all, *w_all):
            torch.testing.assert_close(g, torch.stack(per_sample), equal_nan=True,
                                       msg=lambda m: f"{spec.name} sample {i}, {label}, grad of {name}: {m}")


def _autocast_call(spec: OpSpec, x: dict[str, Any], to: torch.dtype) -> dict[str, Any]:
    """The call torch.autocast(dtype=to) should turn ``x`` into: the rule's floating inputs, float64
    ones excepted, cast by its policy (torch's: aten/src/ATen/autocast_mode.h)."""
    rule = spec.autocast
    cast = [n for n in rule.inputs
            if isinstance(x.get(n), torch.Tensor) and x[n].is_floating_point() and x[n].dtype != torch.float64]
    target = {"lower_precision_fp": to, "fp32": torch.float32,
              "promote": torch.float32 if any(x[n].dtype == torch.float32 for n in cast) else to}[spec.autocast.policy]
    return {**x, **{n: x[n].to(target) for n in cast}}


def _seeded(spec: OpSpec, x: dict[str, Any]) -> dict[str, Any]:
    torch.manual_seed(SEED)  # a random op draws the same numbers in both calls
    return _outputs(spec.op(**x), spec.outputs)


def _assert_same(got: dict[str, Any], want: dict[str, Any], what: str) -> None:
    for name, w in want.items():
        if isinstance(w, torch.Tensor):
            torch.testing.assert_close(got[name], w, rtol=0, atol=0, equal_nan=True,
                                       msg=lambda m: f"{what}, {name}: {m}")
        else:
            assert got[name] == w, f"{what}: {name} {got[name]} != {w}"


def check_autocast(spec: OpSpec) -> None:
    """Under torch.autocast on the CPU (bfloat16 and float16) the op makes the call its autocast: rule
    says (bindings/<op>_autocast.cpp), bit for bit: float32 inputs, the rule's first input alone in the
    autocast dtype (a mix the op refuses outside autocast), float64 inputs (never cast). Its
    gradients reach float32 leaves in float32, equal to those through explicit casts; fake mode gives
    eager's shapes and dtypes; the eager call runs no Python (the autocast kernel is C++);
    torch.compile(fullgraph=True) with autocast inside gives eager's outputs and gradients."""
    rule = spec.autocast

    def takes(dtype: torch.dtype) -> bool:
        return not spec.dtypes or dtype in spec.dtypes

    # Under lower_precision_fp an op that refuses autocast's dtype refuses the cast call too, as torch's
    # ops do: only the autocast dtypes it takes are tested.
    autocast_dtypes = [to for to in (torch.bfloat16, torch.float16) if rule.policy != "lower_precision_fp" or takes(to)]
    for i, x32 in enumerate(samples(spec, torch.float32)):
        for to in autocast_dtypes:
            first = rule.inputs[0]
            calls = {"float32 inputs": x32, f"{first} in {to}": {**x32, first: x32[first].to(to)}}
            if takes(torch.float64):
                calls["float64 inputs"] = samples(spec, torch.float64)[i]
            for label, x in calls.items():
                what = f"{spec.name} sample {i}, autocast to {to}, {label}"
                with torch.autocast("cpu", dtype=to):
                    got = _seeded(spec, x)
                    with FakeTensorMode() as mode:
                        fake = _shapes(tuple(_outputs(spec.op(**_fake(mode, x)), spec.outputs).values()))
                _assert_same(got, _seeded(spec, _autocast_call(spec, x, to)), what)
                eager = _shapes(tuple(got.values()))
                assert fake == eager, f"{what}: fake outputs {fake}, eager {eager}"
        _check_autocast_grads(spec, i, x32)
    x = samples(spec, torch.float32)[0]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, calls = _python_calls(lambda: spec.op(**x))
    assert not calls, f"{spec.name}: the call under autocast ran Python: {calls}"
    _check_autocast_compile(spec, x)


def _autocast_loss(spec: OpSpec, outs: dict[str, Any]) -> torch.Tensor:
    weights = [torch.randn(outs[n].shape, generator=torch.Generator().manual_seed(k)).to(outs[n].dtype)
               for k, n in enumerate(spec.differentiable_outputs)]
    return sum((outs[n].float() * w.float()).sum() for n, w in zip(spec.differentiable_outputs, weights))


def _check_autocast_grads(spec: OpSpec, i: int, x: dict[str, Any]) -> None:
    names = _differentiable(spec, x)
    if not names or not spec.differentiable_outputs:
        return
    grads = []
    for under_autocast in (True, False):
        leaves = {n: x[n].detach().requires_grad_() for n in names}
        call = {**x, **leaves}
        if under_autocast:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                outs = _seeded(spec, call)
        else:
            outs = _seeded(spec, _autocast_call(spec, call, torch.bfloat16))
        grads.append(torch.autograd.grad(_autocast_loss(spec, outs), list(leaves.values())))
    for name, got, want in zip(names, *grads):
        assert got.dtype == x[name].dtype, f"{spec.name} sample {i}: grad of {name} is {got.dtype}, not its leaf's"
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True,
                                   msg=lambda m: f"{spec.name} sample {i}, autocast grad of {name}: {m}")


def _check_autocast_compile(spec: OpSpec, x: dict[str, Any]) -> None:
    names = _differentiable(spec, x) if spec.differentiable_outputs else []
    torch._dynamo.reset()

    def run(leaves: dict[str, torch.Tensor]) -> dict[str, Any]:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return _outputs(spec.op(**{**x, **leaves}), spec.outputs)

    compiled = torch.compile(run, fullgraph=True, backend="aot_eager")
    results = []
    for fn in (run, compiled):
        leaves = {n: x[n].detach().requires_grad_() for n in names}
        torch.manual_seed(SEED)
        outs = fn(leaves)
        grads = torch.autograd.grad(_autocast_loss(spec, outs), list(leaves.values())) if names else ()
        results.append((outs, dict(zip(names, grads))))
    (want, want_grads), (got, got_grads) = results
    _assert_same(got, want, f"{spec.name} compiled under autocast")
    _assert_same(got_grads, want_grads, f"{spec.name} compiled under autocast, grads")


def sharding_strategies(op: Any, x: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """The op's sharding: strategies that hold for the call ``x`` (python/sharding.py, as DTensor
    evaluates them): (name, {input: split axis or None}, {output: axis, None or "partial"})."""
    from op_plugin import _sharding
    return _sharding.RULES[str(op._schema.name)](**x)


def even_shards(x: dict[str, Any], inputs: dict[str, Any], most: int = 5) -> int:
    """The fewest ranks (2 to ``most``) over which every axis ``inputs`` splits divides evenly, none
    empty (DTensor splits no axis shorter than the ranks); 0 if none."""
    sizes = [x[n].size(a) for n, a in inputs.items() if a is not None and isinstance(x.get(n), torch.Tensor)]
    return next((r for r in range(2, most + 1) if sizes and all(s % r == 0 and s >= r for s in sizes)), 0)


def check_sharded_call(op: Any, x: dict[str, Any], outputs: list[str], strategy: tuple[str, dict[str, Any], dict[str, Any]],
                       ranks: int, what: str) -> None:
    """What DTensor does with ``strategy`` on a mesh of ``ranks``: each input split along its axis
    (contiguous shards, as DTensor's), the op called on each rank's, each output joined (concatenated
    along its axis; without one every rank's equals the unsplit call's; "partial": the ranks' sum).
    Equal to the unsplit call up to rounding (the kernels' plan may change with a shard's size and
    reorder a sum; a partial output is summed in another order). Int outputs are left out: each
    rank's describe its own call."""
    name, inputs, joins = strategy
    whole = _outputs(op(**x), outputs)
    split = {n: [t.contiguous() for t in x[n].chunk(ranks, a)] for n, a in inputs.items()
             if a is not None and isinstance(x.get(n), torch.Tensor)}
    per_rank = [_outputs(op(**{**x, **{n: s[r] for n, s in split.items()}}), outputs) for r in range(ranks)]
    for out, want in whole.items():
        if not isinstance(want, torch.Tensor):
            continue
        join, got = joins[out], [p[out] for p in per_rank]
        label = f"{what}, strategy {name} over {ranks} ranks, {out}"
        if join == "partial":
            torch.testing.assert_close(torch.stack([g.double() for g in got]).sum(0).to(want.dtype), want,
                                       equal_nan=True, msg=lambda m: f"{label} (summed): {m}")
        elif join is None:
            for r, g in enumerate(got):
                torch.testing.assert_close(g, want, equal_nan=True, msg=lambda m: f"{label} (rank {r}'s): {m}")
        else:
            torch.testing.assert_close(torch.cat(got, join), want, equal_nan=True, msg=lambda m: f"{label}: {m}")


def check_sharding(spec: OpSpec) -> None:
    """The op's sharding: strategies compute the unsplit call (check_sharded_call): every sample
    with every strategy that holds for it, over the fewest ranks (2 to 5) that split it evenly, in
    float32 (the first allowed dtype without it). A sample no rank count splits evenly (a batch of
    1) is joined with a copy of itself with other values along the strategy's axes (a batch of 2:
    one copy per rank), where the strategy holds for the joined call. Each strategy must be
    exercised by some sample: add a sample where none holds."""
    dtype = _first_dtype(spec)
    count = len(spec.samples if spec.samples is not None else spec.forward.samples)
    exercised: set[str] = set()
    for i in range(count):
        x, other = _sample_copies(spec, i, 2, dtype)
        for name, inputs, _ in sharding_strategies(spec.op, x):
            call, ranks = x, even_shards(x, inputs)
            if not ranks:
                call = {**x, **{n: torch.cat([x[n], other[n]], a) for n, a in inputs.items()
                                if a is not None and isinstance(x.get(n), torch.Tensor)}}
                ranks = 2
            strategy = next((s for s in sharding_strategies(spec.op, call) if s[0] == name), None)
            if strategy is not None and even_shards(call, strategy[1]) == ranks:
                check_sharded_call(spec.op, call, spec.outputs, strategy, ranks,
                                   f"{spec.name} sample {i}{'' if call is x else ' joined with a copy'}")
                exercised.add(name)
    missing = [n for n in spec.sharding if n not in exercised]
    assert not missing, (f"{spec.name}: no sample exercises the sharding strategies {missing}: add a sample "
                         "where they hold")


def check_no_grad(spec: OpSpec) -> None:
    """The inference path of the Autograd kernel (no input needs a gradient: it redispatches with the
    caller's arguments, saving nothing) gives every output of the training path bit for bit, under
    torch.no_grad() and with inputs that do not require grad, and its outputs have no grad_fn."""
    for i, x in enumerate(samples(spec, _first_dtype(spec))):
        names = _differentiable(spec, x)
        trained = _outputs(spec.op(**{**x, **{n: x[n].detach().requires_grad_() for n in names}}), spec.outputs)
        plain = {**x, **{n: x[n].detach() for n in names}}
        with torch.no_grad():
            under_no_grad = _outputs(spec.op(**plain), spec.outputs)
        for label, got in (("under torch.no_grad()", under_no_grad),
                           ("with no input requiring grad", _outputs(spec.op(**plain), spec.outputs))):
            for name, want in trained.items():
                if isinstance(want, torch.Tensor):
                    assert got[name].grad_fn is None, f"{spec.name} sample {i} {label}: {name} has a grad_fn"
                    torch.testing.assert_close(got[name], want.detach(), rtol=0, atol=0, equal_nan=True,
                                               msg=lambda m: f"{spec.name} sample {i} {label}, {name}: {m}")
                else:
                    assert got[name] == want, f"{spec.name} sample {i} {label}: {name} {got[name]} != {want}"


# The Python an eager call may run: torch's entry point of a torch.ops call (OpOverload.__call__),
# which every op called through torch.ops pays.
_TORCH_ENTRY_FILES = ("torch/_ops.py",)


def _python_calls(fn: Callable[[], Any]) -> tuple[Any, list[str]]:
    """fn()'s result and the Python functions it entered, outside torch's entry points."""
    seen: list[str] = []

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is not fn.__code__:
            code = frame.f_code
            where = code.co_filename.replace("\\", "/")
            if not where.endswith(_TORCH_ENTRY_FILES):
                seen.append(f"{code.co_qualname} ({where}:{code.co_firstlineno})")

    sys.setprofile(hook)
    try:
        result = fn()
    finally:
        sys.setprofile(None)
    return result, seen


def check_eager_path(spec: OpSpec) -> None:
    """Every sample's eager call, its differentiable inputs requiring grad, and its backward run
    no Python function besides torch's entry point: the Autograd kernel, the binding, the shape
    rules of forward_overrides, the formula gradients and the kernels are all C++."""
    for i, x in enumerate(samples(spec, _first_dtype(spec))):
        names = _differentiable(spec, x)
        x.update({n: x[n].detach().requires_grad_() for n in names})
        spec.op(**x)  # the first call may load or register things lazily; the steady state is checked
        out, forward_calls = _python_calls(lambda: spec.op(**x))
        assert not forward_calls, f"{spec.name} sample {i}: the eager forward ran Python: {forward_calls}"
        if not names or not spec.differentiable_outputs:
            continue
        outs = _outputs(out, spec.outputs)
        loss = sum(outs[n].sum() for n in spec.differentiable_outputs)
        leaves = [x[n] for n in names]
        # The engine's C++ entry (what torch.autograd.grad calls after its Python argument handling).
        engine = torch.autograd.Variable._execution_engine
        _, backward_calls = _python_calls(lambda: engine.run_backward(
            (loss,), (torch.ones_like(loss),), False, False, tuple(leaves), True, False))
        assert not backward_calls, f"{spec.name} sample {i}: the eager backward ran Python: {backward_calls}"


# ---- failing calls --------------------------------------------------------------------------------

def _dims_changed(t: torch.Tensor) -> Iterator[list[int]]:
    yield [1, *t.shape]
    if t.dim() > 0:
        yield list(t.shape[1:])
    yield [*t.shape, 1]


def _sizes_changed(t: torch.Tensor, ints: list[int]) -> Iterator[list[int]]:
    for d in range(t.dim()):
        for size in (t.shape[d] + 1, t.shape[d] - 1, *[c + k for c in ints for k in (1, -1, 0)], 1, 2 * t.shape[d]):
            if 0 <= size <= 20000 and size != t.shape[d]:
                shape = list(t.shape)
                shape[d] = size
                if math.prod(shape) <= 1 << 24:
                    yield shape


def _new_like(t: torch.Tensor, shape: list[int], gen: torch.Generator, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    dtype = dtype or t.dtype
    if dtype == torch.bool:
        return torch.zeros(shape, dtype=dtype)
    if not dtype.is_floating_point:
        return torch.zeros(shape, dtype=dtype)
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)


def _values(kind: str, value: Any, check: CheckSpec) -> Iterator[Any]:
    base = kind.rstrip("?")
    if kind.endswith("?") and value is not None:
        yield None
    if base == "int":
        v = value if isinstance(value, int) else 0
        for c in [*check.ints, v]:
            yield from (c + 1, c - 1, c)
        yield from (-2, -1, 0, 1, 2, 5, 2 * v + 1, 1 << 31)
    elif base == "float":
        yield from (math.nan, math.inf, -math.inf, 0.0, -1.0, 2.0, 0.5, 1e-3)
    elif base == "bool":
        yield not value
    elif base == "str":
        for s in check.strs:
            yield from (s, s.lower())
        if isinstance(value, str):
            yield from (value.lower(), value + "X")
        yield ""
    elif base == "int[]":
        v = list(value or [])
        yield from (v[:-1], v + v[-1:], [], v + [v[-1] + 1] if v else [1])


def _variants(spec: OpSpec, x: dict[str, Any], check: CheckSpec, others: list[dict[str, Any]]
              ) -> Iterator[dict[str, Any]]:
    """Calls that differ from ``x`` in one argument, as the check's mutations say."""
    gen = torch.Generator().manual_seed(SEED)
    if check.strict or check.warn:  # a valid sample may already be past a device limit, or warn
        yield x
    for kind, name in check.mutations:
        value = x.get(name)
        if kind == "value":
            for v in _values(spec.kinds[name], value, check):
                if v != value or type(v) is not type(value):
                    yield {**x, name: v}
        elif kind == "none":
            if value is not None:
                yield {**x, name: None}
            else:
                given = [o[name] for o in others if isinstance(o.get(name), torch.Tensor)]
                if spec.kinds[name].rstrip("?") == "Tensor":
                    yield from ({**x, name: t} for t in given[:1])
                    reference = next((v for v in x.values() if isinstance(v, torch.Tensor)), None)
                    for shape in ([1], [2, 2]):
                        for dtype in (reference.dtype if reference is not None else torch.float32, torch.int32):
                            yield {**x, name: torch.zeros(shape, dtype=dtype)}
                else:
                    yield from ({**x, name: v} for v in _values(spec.kinds[name].rstrip("?"), None, check))
        elif isinstance(value, torch.Tensor):
            if kind == "dtype":
                for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64,
                              torch.bool, torch.uint8):
                    if dtype != value.dtype:
                        yield {**x, name: _new_like(value, list(value.shape), gen, dtype)}
            elif kind == "dim":
                yield from ({**x, name: _new_like(value, s, gen)} for s in _dims_changed(value))
            elif kind in ("size", "empty"):
                if kind == "empty" and value.dim() > 0:
                    yield {**x, name: _new_like(value, [0, *value.shape[1:]], gen)}
                if kind == "size":
                    yield from ({**x, name: _new_like(value, s, gen)} for s in _sizes_changed(value, check.ints))


@contextlib.contextmanager
def _stderr_lines() -> Iterator[list[str]]:
    """The lines written to file descriptor 2 inside the block: a C++ TORCH_WARN goes there."""
    import os
    import tempfile

    lines: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+") as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            lines += capture.read().splitlines()


def _fires(spec: OpSpec, x: dict[str, Any], check: CheckSpec) -> Optional[str]:
    """The check's text if calling ``x`` gives it (as the error, or the warning of a warn check)."""
    if check.warn:  # TORCH_WARN prints "[W... file:line] Warning: <text> (function ...)"
        with _strict(check.strict), _stderr_lines() as lines:
            try:
                spec.op(**x)
            except Exception:  # noqa: BLE001 - an error is not the warning
                return None
        for line in lines:
            found = re.search(f"Warning: ({check.pattern}) \\(function", line)
            if found:
                return found.group(1)
        return None
    with _strict(check.strict):
        try:
            spec.op(**x)
        except Exception as e:  # noqa: BLE001 - any error text is compared below
            text = str(e).splitlines()[0] if str(e) else ""
            return text if re.fullmatch(check.pattern, text) else None
    return None


@contextlib.contextmanager
def _strict(enabled: bool) -> Iterator[None]:
    if not enabled:
        yield
        return
    import op_plugin

    with op_plugin.strict():
        yield


def _fake_text(spec: OpSpec, x: dict[str, Any], check: CheckSpec) -> str:
    """What the same call says in fake mode: its error (or warning) text."""
    with _strict(check.strict), warnings.catch_warnings(record=True) as caught, FakeTensorMode() as mode:
        warnings.simplefilter("always")
        try:
            spec.op(**_fake(mode, x))
        except Exception as e:  # noqa: BLE001
            return str(e).splitlines()[0] if str(e) else ""
    texts = [str(w.message).splitlines()[0] for w in caught if re.fullmatch(check.pattern, str(w.message).splitlines()[0])]
    return texts[0] if texts else "(no error)"


def failing_call(spec: OpSpec, index: int) -> tuple[Optional[dict[str, Any]], str]:
    """A call that fires check ``index`` (a mutated sample, else one of bad_calls:) and its text."""
    check = spec.checks[index]
    calls = samples(spec, _first_dtype(spec))
    for x in calls:
        for variant in _variants(spec, x, check, calls):
            text = _fires(spec, variant, check)
            if text is not None:
                return variant, text
    for bad in spec.bad_calls:
        x = _bad_call(spec, bad)
        text = _fires(spec, x, check)
        if text is not None:
            return x, text
    return None, ""


def check_error(spec: OpSpec, index: int) -> None:
    """Check ``index`` of the registry fires with its text, in eager and fake mode alike."""
    check = spec.checks[index]
    x, text = failing_call(spec, index)
    assert x is not None, (f"{spec.name}: no mutation of the samples fires the check at line {check.line} "
                           f"(/{check.pattern}/); give a call that does under bad_calls:")
    fake = _fake_text(spec, x, check)
    assert fake == text, f"{spec.name}: line {check.line}: eager says {text!r}, fake mode {fake!r}"
