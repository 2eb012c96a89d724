"""The registry's data model: frozen dataclasses, built only by the parser (``parse.py``), each once."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from torchgen.model import FunctionSchema

from codegen.expr import Expr, Message
from codegen.samples import TestSpec


@dataclass(frozen=True)
class Location:
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Check:
    """A restriction: ``expr`` must hold, else ``message`` is raised (eager and fake alike).

    ``strict`` restrictions are device limits, enforced only in strict device-compat mode.
    ``when`` (optional) limits the check to calls where it holds. A ``warn`` check does not fail
    the call: it warns (TORCH_WARN in C++, warnings.warn in the fake) with its message.
    """

    expr: Expr
    message: Message
    strict: bool
    when: Optional[Expr]
    loc: Location
    warn: bool = False


@dataclass(frozen=True)
class Let:
    """A named value (``T = partial_block.size(0)``) usable by later rules and messages."""

    name: str
    expr: Expr
    loc: Location


Rule = Union[Check, Let]


@dataclass(frozen=True)
class EnumDef:
    """An IntEnum of the Python API (``MaskMode``): the wrappers of the ops whose arguments name it
    take a member, its int value or its name in any case; the registered op takes the int."""

    name: str
    members: tuple[tuple[str, int], ...]  # (NAME, value), in registry order
    doc: str
    loc: Location

    def listing(self) -> str:
        """``NO_MASK = 0, CAUSAL = 3, ...``, as errors and docs list the members."""
        return ", ".join(f"{n} = {v}" for n, v in self.members)


@dataclass(frozen=True)
class OutputRule:
    """How the binding allocates an output and what the fake returns for it."""

    name: str
    shape: Expr  # kind shape: a list literal or ``x.shape``
    dtype: Expr  # kind dtype
    loc: Location


@dataclass(frozen=True)
class IntOutputRule:
    """An ``int`` return: the kernel writes it; ``value`` is what the fake function returns
    (``data_dependent()`` when only the kernel can know it)."""

    name: str
    value: Expr  # kind int
    loc: Location


@dataclass(frozen=True)
class BackwardInput:
    """Where one backward argument comes from: a forward ``input``, ``output``, or ``grad`` of an output."""

    source: str  # "input" | "output" | "grad"
    name: str


@dataclass(frozen=True)
class Formula:
    """A gradient the backward op does not return, computed by a C++ function of
    csrc/bindings/autograd_formulas.h (as derivatives.yaml formulas call FunctionsManual helpers)."""

    function: str
    args: tuple[BackwardInput, ...]


@dataclass(frozen=True)
class AutogradPair:
    backward: str
    inputs: tuple[tuple[str, BackwardInput], ...]  # backward argument -> source, in backward order
    grads: tuple[tuple[str, str], ...]  # forward input -> backward output giving its gradient
    non_differentiable: tuple[str, ...]  # forward outputs with no gradient
    loc: Location
    formulas: tuple[tuple[str, Formula], ...] = ()  # forward input -> formula giving its gradient
    # Forward argument -> Python literal: the autograd kernel runs the forward with these values
    # (e.g. return_softmax_lse=True, so the backward gets the full lse); outputs whose shape rule
    # depends on them are handed back zero-filled in the shape the caller's arguments give.
    forward_overrides: tuple[tuple[str, str], ...] = ()

    def saved_sources(self) -> tuple[BackwardInput, ...]:
        """Forward inputs and outputs the backward op and the formulas read."""
        srcs = [src for _, src in self.inputs] + [a for _, f in self.formulas for a in f.args]
        return tuple(src for src in srcs if src.source != "grad")

    def grad_sources(self) -> tuple[str, ...]:
        """Outputs whose incoming gradient the backward op or a formula reads."""
        srcs = [src for _, src in self.inputs] + [a for _, f in self.formulas for a in f.args]
        return tuple(dict.fromkeys(src.name for src in srcs if src.source == "grad"))


def outputs_shaped_by(rules: tuple[Rule, ...], outputs: tuple[OutputRule, ...], args: set[str]) -> list[str]:
    """The outputs whose shape or dtype rule reads one of ``args``, directly or through lets."""
    depends = set(args)
    for rule in rules:
        if isinstance(rule, Let) and rule.expr.names() & depends:
            depends.add(rule.name)
    return [o.name for o in outputs if (o.shape.names() | o.dtype.names()) & depends]


@dataclass(frozen=True)
class Axis:
    """Where the vmapped dim goes in one tensor (registry ``vmap:``): ``axis`` (an int expression)
    when ``when`` holds or is None, else nowhere: an input that stays shared, an output every
    sample has alike."""

    axis: Optional[Expr]  # None: never
    when: Optional[Expr] = None


@dataclass(frozen=True)
class VmapRule:
    """How torch.vmap folds its dim into the op's own batch (registry ``vmap:``): where ``when``
    holds and every tensor input without an axis is unbatched, one call with the vmapped dim merged
    into each input's axis (ahead of it) and split out of each output's; otherwise one call per
    sample. ``replays`` (a condition and a tensor argument): where the condition holds, the op
    replays random draws of the forward that made that argument, so it folds exactly when that
    argument is batched (its forward folded) and calls per sample when it is not."""

    when: Optional[Expr]
    inputs: tuple[tuple[str, Axis], ...]  # tensor argument -> its axis; the others are shared
    outputs: tuple[tuple[str, Axis], ...]  # every Tensor return -> its axis
    replays: Optional[tuple[Expr, str]]
    loc: Location


@dataclass(frozen=True)
class AutocastRule:
    """What torch.autocast on the CPU casts before the op runs (registry ``autocast:``): the listed
    tensor arguments, by one of torch's cast policies (lower_precision_fp, fp32, promote)."""

    policy: str
    inputs: tuple[str, ...]
    loc: Location


@dataclass(frozen=True)
class ShardingStrategy:
    """One way a DTensor call of the op runs as independent calls on each rank's shards (registry
    ``sharding:``): where ``when`` holds, each listed input is split along its axis (an axis rule
    as vmap's: ``X``, ``X if COND else None``, ``None``) and the rest are whole on every rank;
    each output is then split along its axis, whole on every rank (no axis), or a partial sum
    (``partial``: the ranks' outputs add up to the whole one)."""

    name: str
    when: Optional[Expr]
    inputs: tuple[tuple[str, Axis], ...]  # tensor argument -> its split axis; the others are whole
    outputs: tuple[tuple[str, Axis], ...]  # every Tensor return but the partial ones -> its axis
    partial: tuple[str, ...]  # Tensor returns each rank holds a partial sum of
    loc: Location


@dataclass(frozen=True)
class OpEntry:
    func: FunctionSchema  # as documented (the user-facing call)
    kernel: str  # the kernel's two stage functions: <kernel>GetWorkspaceSize and <kernel>
    rules: tuple[Rule, ...]  # dtype rules first, then the registry's checks, in order
    outputs: tuple[OutputRule, ...]  # the Tensor returns
    python_returns: tuple[str, ...]  # outputs the Python wrapper returns (all by default)
    autograd: Optional[AutogradPair]
    tags: tuple[str, ...]
    doc: str
    loc: Location
    int_outputs: tuple[IntOutputRule, ...] = ()  # the int returns, after the Tensor ones
    # random: the binding draws (rng_seed, rng_offset) from torch's default CPU generator when this
    # holds (else passes 0, 0), so torch.manual_seed reproduces a call and the kernel stays pure.
    random_when: Optional[Expr] = None
    # The registry's dtypes: (tensor argument, allowed dtypes), in order; the first one's dtypes
    # are the typed entry points the generated stage 2 dispatches to.
    dtypes: tuple[tuple[str, tuple[str, ...]], ...] = ()
    enums: tuple[tuple[str, str], ...] = ()  # int argument -> the EnumDef naming its values
    tests: Optional[TestSpec] = None  # samples:, reference:, bad_calls: (codegen/samples.py)
    vmap: Optional[VmapRule] = None  # how torch.vmap folds into the op's batch; None: one call per sample
    autocast: Optional[AutocastRule] = None  # what torch.autocast casts; None: autocast leaves the op alone
    sharding: tuple[ShardingStrategy, ...] = ()  # DTensor's strategies besides every tensor whole on each rank
    # Tensor inputs the kernel reads through their strides: the binding passes them as they are
    # when their last dimension is contiguous, instead of a contiguous copy.
    strided: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return str(self.func.name)

    def outputs_shaped_by(self, args: set[str]) -> list[str]:
        """The outputs whose shape or dtype rule reads one of ``args``, directly or through lets."""
        return outputs_shaped_by(self.rules, self.outputs, args)

    @property
    def source(self) -> str:
        # No line number, no hash: editing another entry must not touch this op's files, and an
        # edit of this entry rewrites only the files whose text it changes (a check's message: the
        # binding and the checks, not the kernel header every kernel source includes).
        return f"{self.loc.file} entry {self.name}"


@dataclass(frozen=True)
class Registry:
    path: str
    ops: tuple[OpEntry, ...]
    registry_hash: str
    enums: tuple[EnumDef, ...] = ()

    @property
    def source(self) -> str:
        # No hash: a file made from every entry is rewritten only when its own text changes, so
        # editing one op's doc does not recompile register_schema.cpp and helpers_module.cpp.
        return f"{self.path} (every entry)"

    def op(self, name: str) -> OpEntry:
        for o in self.ops:
            if o.name == name:
                return o
        raise KeyError(name)

    def enum(self, name: str) -> EnumDef:
        for e in self.enums:
            if e.name == name:
                return e
        raise KeyError(name)
