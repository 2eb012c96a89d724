"""The test keys of an entry: ``samples:``, ``reference:`` and ``bad_calls:`` (docs/generated_tests.md).

They are parsed here (not in parse.py) and kept as plain data: the generated tests
(codegen/dest/tests.py) hand them to op_plugin.testing, which builds the tensors at test time.

    samples:                     # a list of calls; each maps argument -> value
      - dims: {S: 8, D: 16}      # named sizes, for shapes (and int arguments) to share
        q: [2, S, 2, D]          # a tensor argument: a shape (normal values, the dtype under test)
        k: {shape: [2, 8, 2, 16], range: [-1, 1]}   # uniform values in [lo, hi)
        cu: {values: [0, 3, 8], dtype: int32}      # literal values
        mask: {like: q, dtype: bool_}              # q's shape (and dtype unless given)
        softmax_scale: 0.5       # any other argument: its value
    reference: pkg.module.fn(q, k, v, softmax_scale=softmax_scale)   # float64-capable composite
      # pkg.module.fn alone: called with every argument by name;
      # or {call: ..., returns: [outputs it returns, in order]} (default: every Tensor output)
    bad_calls:                   # explicit failing calls for checks no mutation reaches
      - {sample: 0, dims: {D: 64}, args: {mask_mode: 4}, dtype: float64}   # a sample, changed
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Callable, Optional

from torchgen.model import FunctionSchema

from codegen import expr as E
from codegen.yaml_loader import KEY_LINES, LINE_KEY

TEST_KEYS = {"samples", "reference", "bad_calls"}
TENSOR_SPEC_KEYS = {"shape", "dtype", "range", "values", "like"}
REFERENCE_KEYS = {"call", "returns"}
BAD_CALL_KEYS = {"sample", "args", "dims", "dtype", "forward_args"}
DIMS = "dims"  # a sample's named sizes: shapes (and int arguments) may be expressions of them


@dataclass(frozen=True)
class Reference:
    """A float64 Python composite of the op: ``call`` is a Python call whose names are the op's
    arguments; ``module`` is what the generated test imports for it."""

    call: str
    module: str
    returns: tuple[str, ...]


@dataclass(frozen=True)
class TestSpec:
    samples: str  # a Python literal: a list of {argument: value} dicts, as the registry writes them, or None
    reference: Optional[Reference]
    bad_calls: str  # a Python literal: a list of {"sample": i, "args": {argument: value}}
    line: int


def _clean(value: Any) -> Any:
    """The YAML value without the loader's line bookkeeping."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if k not in (LINE_KEY, KEY_LINES)}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _line(d: Any, key: str, default: int) -> int:
    return int(d.get(KEY_LINES, {}).get(key, default)) if isinstance(d, dict) else default


def parse_tests(e: dict[str, Any], func: FunctionSchema, op: str, add_error: Callable[[int, str, str], None]
                ) -> Optional[TestSpec]:
    """The entry's test keys, or None without ``samples:``; errors go to ``add_error(line, op, text)``."""
    if not any(k in e for k in TEST_KEYS):
        return None
    entry_line = int(e.get(LINE_KEY, 0))
    kinds = {a.name: E.kind_of_type(a.type) for a in func.arguments.flat_all}
    required = [a.name for a in func.arguments.flat_all if a.default is None and not E.kind_of_type(a.type).endswith("?")]
    outputs = [r.name or f"result{i}" for i, r in enumerate(func.returns) if str(r.type) == "Tensor"]
    samples = _clean(e.get("samples", []))
    line = _line(e, "samples", entry_line)
    if not isinstance(samples, list) or not all(isinstance(s, dict) for s in samples):
        add_error(line, op, "'samples:' must be a list of calls, each a mapping argument -> value")
        samples = []
    raw = e.get("samples", [])
    for i, sample in enumerate(samples):
        at = int(raw[i].get(LINE_KEY, line)) if isinstance(raw, list) and isinstance(raw[i], dict) else line
        for problem in _sample_problems(sample, kinds, required):
            add_error(at, op, f"samples[{i}]: {problem}")
    bad_calls = _clean(e.get("bad_calls", []))
    if not isinstance(bad_calls, list):
        add_error(_line(e, "bad_calls", entry_line), op, "'bad_calls:' must be a list of {sample: i, args: {...}}")
        bad_calls = []
    for i, bad in enumerate(bad_calls):
        where = _line(e, "bad_calls", entry_line)
        if not isinstance(bad, dict) or set(bad) - BAD_CALL_KEYS or not isinstance(bad.get("args", {}), dict):
            add_error(where, op, f"bad_calls[{i}]: must be {{sample: INDEX, args: {{argument: value}}, dims: {{NAME: size}}, "
                      "dtype: DTYPE}} (a backward op's forward_args: change its forward's sample)")
            continue
        if "dtype" in bad and bad["dtype"] not in E.DTYPES:
            add_error(where, op, f"bad_calls[{i}]: dtype {bad['dtype']!r} is none of {', '.join(E.DTYPES)}")
        count = len(samples) if "samples" in e else float("inf")  # a backward op's are its forward's
        if not isinstance(bad.get("sample", 0), int) or not 0 <= bad.get("sample", 0) < count:
            add_error(where, op, f"bad_calls[{i}]: sample {bad.get('sample')!r} is not an index of samples")
        for problem in _sample_problems({**bad.get("args", {}), **({DIMS: bad[DIMS]} if DIMS in bad else {})},
                                        kinds, []):
            add_error(where, op, f"bad_calls[{i}]: {problem}")
    reference = None
    if "reference" in e:
        ref_line = _line(e, "reference", entry_line)
        try:
            reference = _parse_reference(_clean(e["reference"]), kinds, outputs)
        except ValueError as ex:
            add_error(ref_line, op, f"reference: {ex}")
    # Without samples: (a backward op's bad_calls:) the samples are the forward's: None here.
    return TestSpec(samples=repr(samples) if "samples" in e else "None", reference=reference,
                    bad_calls=repr(bad_calls), line=line)


def _sample_problems(sample: dict[str, Any], kinds: dict[str, str], required: list[str]) -> list[str]:
    dims = sample.get(DIMS, {})
    problems = [] if isinstance(dims, dict) and all(isinstance(k, str) and isinstance(v, int) for k, v in dims.items()) \
        else [f"dims: must map NAME to a size, got {dims!r}"]
    problems += [f"{name!r} is not an argument" for name in sample if name not in kinds and name != DIMS]
    problems += [f"required argument {name!r} is missing" for name in required if name not in sample]
    for name, value in sample.items():
        kind = kinds.get(name)
        if isinstance(value, str) and kind is not None and E.base(kind) == E.INT:
            problems += [f"{name}: {p}" for p in _size_problems(value)]
            continue
        if kind is None or value is None:
            if value is None and kind is not None and not kind.endswith("?"):
                problems.append(f"{name}: None for a non-optional argument")
            continue
        base = E.base(kind)
        if base == E.TENSOR:
            problems += [f"{name}: {p}" for p in _tensor_problems(value, kinds)]
        elif base == E.INT_LIST:
            if not (isinstance(value, list) and all(isinstance(v, int) for v in value)):
                problems.append(f"{name}: an int[] value is a list of ints, got {value!r}")
        else:
            want = {E.INT: (int,), E.FLOAT: (int, float), E.BOOL: (bool,), E.STR: (str,)}[base]
            if not isinstance(value, want) or (base in (E.INT, E.FLOAT) and isinstance(value, bool)):
                problems.append(f"{name}: an {base} argument takes an {base}, got {value!r}" if base == E.INT
                                else f"{name}: a {base} argument takes a {base}, got {value!r}")
    return problems


def _tensor_problems(value: Any, kinds: dict[str, str]) -> list[str]:
    if isinstance(value, list):
        value = {"shape": value}
    if not isinstance(value, dict):
        return [f"a tensor is a shape [d0, d1, ...] or {{{', '.join(sorted(TENSOR_SPEC_KEYS))}}}, got {value!r}"]
    problems = [f"unknown tensor key {k!r}; known: {', '.join(sorted(TENSOR_SPEC_KEYS))}"
                for k in value if k not in TENSOR_SPEC_KEYS]
    if sum(k in value for k in ("shape", "values", "like")) != 1:
        problems.append("a tensor needs exactly one of shape:, values:, like:")
    shape = value.get("shape", [])
    if not isinstance(shape, list) or not all((isinstance(d, int) and d >= 0) or isinstance(d, str) for d in shape):
        problems.append(f"shape must be a list of sizes >= 0 (or expressions of dims:), got {shape!r}")
    else:
        problems += [p for d in shape if isinstance(d, str) for p in _size_problems(d)]
    if "dtype" in value and value["dtype"] not in E.DTYPES:
        problems.append(f"dtype {value['dtype']!r} is none of {', '.join(E.DTYPES)}")
    if "range" in value and not (isinstance(value["range"], list) and len(value["range"]) == 2
                                 and all(isinstance(v, (int, float)) for v in value["range"])):
        problems.append(f"range must be [lo, hi], got {value['range']!r}")
    if "like" in value and E.base(kinds.get(value["like"], "")) != E.TENSOR:
        problems.append(f"like: {value['like']!r} is not a tensor argument")
    return problems


def _size_problems(text: str) -> list[str]:
    """A size written as an expression of the sample's dims: names, ints, + - * //."""
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError:
        return [f"cannot parse the size {text!r}"]
    allowed = (ast.Name, ast.Constant, ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Load)
    if not all(isinstance(n, allowed) for n in ast.walk(tree)):
        return [f"a size is an expression of dims: names with + - * //, got {text!r}"]
    return []


def _parse_reference(spec: Any, kinds: dict[str, str], outputs: list[str]) -> Reference:
    if isinstance(spec, str):
        spec = {"call": spec}
    if not isinstance(spec, dict) or "call" not in spec or set(spec) - REFERENCE_KEYS:
        raise ValueError("write 'module.function(arguments...)' or {call: ..., returns: [outputs]}")
    call = str(spec["call"]).strip()
    if "(" not in call:  # a function's dotted path: called with every argument by name
        call += "(" + ", ".join(f"{name}={name}" for name in kinds) + ")"
    try:
        node = ast.parse(call, mode="eval").body
    except SyntaxError as ex:
        raise ValueError(f"cannot parse {call!r}: {ex.msg}") from None
    dotted = node.func if isinstance(node, ast.Call) else None
    parts = []
    while isinstance(dotted, ast.Attribute):
        parts.insert(0, dotted.attr)
        dotted = dotted.value
    if not isinstance(dotted, ast.Name) or not parts:
        raise ValueError(f"{call!r} must call a function by its dotted path (package.module.function(...))")
    parts.insert(0, dotted.id)
    names = {n.id for a in [*node.args, *(k.value for k in node.keywords)] for n in ast.walk(a)
             if isinstance(n, ast.Name)}
    unknown = sorted(names - set(kinds) - {"torch"})
    if unknown:
        raise ValueError(f"{call!r} reads {', '.join(unknown)}, which are not arguments of the op")
    returns = spec.get("returns", outputs)
    if not isinstance(returns, list) or not returns or any(r not in outputs for r in returns):
        raise ValueError(f"returns must list some of the Tensor outputs {', '.join(outputs)}, got {returns!r}")
    return Reference(call=call, module=".".join(parts[:-1]), returns=tuple(returns))
