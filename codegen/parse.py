"""Loads op_plugin_functions.yaml into the model, strictly, reporting every error at once."""
from __future__ import annotations

import ast
import dataclasses
import hashlib
import keyword
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Optional

import yaml
from torchgen.model import BaseTy, BaseType, FunctionSchema

from codegen import expr as E
from codegen import torch_version as TV
from codegen.model import (AutogradPair, BackwardInput, Check, EnumDef, Formula, IntOutputRule, Let, Location,
                           OpEntry, OutputRule, Registry, Rule)
from codegen.yaml_loader import KEY_LINES, LINE_KEY, load_document

ENTRY_KEYS = {"func", "kernel", "dtypes", "checks", "outputs", "python", "autograd", "random", "tags", "doc", "torch"}
CHECK_KEYS = {"expr", "arg", "values", "range", "equals", "enum", "error", "strict", "when", "let", "warn", "torch"}
ENUM_KEYS = {"enum", "members", "doc"}
OUTPUT_KEYS = {"shape", "dtype", "like", "value"}
AUTOGRAD_KEYS = {"backward", "inputs", "grads", "non_differentiable", "forward_overrides"}
PYTHON_KEYS = {"returns"}
KNOWN_TAGS = {"pt2_compliant_tag", "nondeterministic_seeded", "needs_fixed_stride_order"}
META_KEYS = {LINE_KEY, KEY_LINES}


class RegistryError(Exception):
    """Every problem found in a registry, one ``file:LINE: op: message`` per line."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = errors


class _Errors:
    def __init__(self, path: str) -> None:
        self.path = path
        self.items: list[tuple[int, str]] = []

    def add(self, line: int, op: str, message: str) -> None:
        prefix = f"{self.path}:{line}: " + (f"{op}: " if op else "")
        self.items.append((line, prefix + message))

    @contextmanager
    def collect(self, line: int, op: str) -> Iterator[None]:
        """Records an expression error at ``line`` (or the line an ``_At`` names) and goes on."""
        try:
            yield
        except _Invalid as e:
            self.add(e.line or line, op, str(e))
        except E.ExprError as e:
            self.add(line, op, str(e))


class _Invalid(Exception):
    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.line = line


@contextmanager
def _at(line: int, prefix: str = "") -> Iterator[None]:
    """Errors raised inside name ``line`` (the key they are about), not the enclosing item's."""
    try:
        yield
    except E.ExprError as e:
        raise _Invalid(prefix + str(e), line) from None


def _line(d: Any, key: Optional[str] = None, default: int = 0) -> int:
    if not isinstance(d, dict):
        return default
    if key is not None:
        return int(d.get(KEY_LINES, {}).get(key, d.get(LINE_KEY, default)))
    return int(d.get(LINE_KEY, default))


def _keys(d: dict[str, Any]) -> list[str]:
    return [k for k in d if k not in META_KEYS]


def load_registry(path: str, display_path: Optional[str] = None, torch_version: Optional[str] = None) -> Registry:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return parse_registry(text, display_path or path, torch_version)


def parse_registry(text: str, path: str, torch_version: Optional[str] = None) -> Registry:
    """``torch_version`` (default: the installed torch) resolves the ``torch:`` ranges: entries and
    checks outside their range are left out, as if they were not written."""
    errors = _Errors(path)
    try:
        version = TV.parse_version(torch_version or TV.installed_torch_version())
    except ValueError as e:
        raise RegistryError([f"{path}: {e}"]) from None
    try:
        doc = load_document(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{path}:{mark.line + 1}" if mark is not None else path
        raise RegistryError([f"{where}: invalid YAML: {e.problem or e.context}"]) from None
    except yaml.YAMLError as e:
        raise RegistryError([f"{path}: invalid YAML: {e}"]) from None
    data = [] if doc.data is None else doc.data
    if not isinstance(data, list):
        raise RegistryError([f"{path}:1: the registry must be a list of op entries"])

    lines = text.splitlines(keepends=True)
    starts = doc.item_lines + [len(lines) + 1]
    for key, line in doc.duplicates:
        index = max((i for i, s in enumerate(doc.item_lines) if s <= line), default=-1)
        op = _name_hint(data[index]) if index >= 0 else ""
        errors.add(line, op, f"duplicate key {key!r}")
    enums = _parse_enums(data, path, errors)
    ops: list[OpEntry] = []
    autograd_lines: dict[str, dict[str, int]] = {}
    for index, entry in enumerate(data):
        if not isinstance(entry, dict):
            errors.add(starts[index], "", f"an entry must be a mapping with 'func:' (or 'enum:'), got {entry!r}")
            continue
        if "enum" in entry:
            continue
        entry_text = "".join(lines[starts[index] - 1: starts[index + 1] - 1])
        if not _in_torch_range(entry, version, _name_hint(entry), errors):
            continue
        op = _parse_entry(entry, entry_text, path, errors, version, enums)
        if op is not None:
            ops.append(op)
            autograd_lines.setdefault(op.name, _autograd_lines(entry))
    _check_across_entries(ops, errors, autograd_lines)
    for e in enums.values():
        if any(op.name == e.name for op in ops):
            errors.add(e.loc.line, "", f"enum {e.name} has the name of an op")
    if errors.items:
        raise RegistryError([m for _, m in sorted(errors.items, key=lambda x: x[0])])
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return Registry(path=path, ops=tuple(ops), registry_hash=digest, enums=tuple(enums.values()))


def _parse_enums(data: list[Any], path: str, errors: _Errors) -> dict[str, EnumDef]:
    """The ``- enum: Name`` items: ``members: {NAME: int, ...}`` and an optional ``doc:``."""
    enums: dict[str, EnumDef] = {}
    for item in data:
        if not isinstance(item, dict) or "enum" not in item:
            continue
        line, name = _line(item), item["enum"]
        for k in _keys(item):
            if k not in ENUM_KEYS:
                errors.add(_line(item, k), "", f"enum {name}: unknown key {k!r}; known: {', '.join(sorted(ENUM_KEYS))}")
        if not isinstance(name, str) or not name.isidentifier() or not name[0].isupper():
            errors.add(line, "", f"'enum:' must name the enum class (a CamelCase identifier), got {name!r}")
            continue
        if name in enums:
            errors.add(line, "", f"enum {name} is defined twice (first at line {enums[name].loc.line})")
            continue
        members = item.get("members")
        member_line = _line(item, "members", line)
        if not isinstance(members, dict) or not _keys(members):
            errors.add(member_line, "", f"enum {name}: 'members:' must map NAME to an int value")
            continue
        pairs = [(k, members[k]) for k in _keys(members)]
        bad = [k for k, v in pairs if not (isinstance(k, str) and k.isidentifier() and k == k.upper()
                                          and isinstance(v, int) and not isinstance(v, bool))]
        values = [v for _, v in pairs]
        if bad:
            errors.add(member_line, "", f"enum {name}: members are UPPER_CASE names with int values, not {bad[0]!r}")
            continue
        if len(set(values)) != len(values):
            errors.add(member_line, "", f"enum {name}: two members have the same value")
            continue
        doc = item.get("doc", "")
        if not isinstance(doc, str):
            errors.add(_line(item, "doc", line), "", f"enum {name}: 'doc:' must be text")
            doc = ""
        enums[name] = EnumDef(name, tuple(pairs), doc.strip(), Location(path, line))
    return enums


def _in_torch_range(item: dict[str, Any], version: TV.Version, op: str, errors: _Errors) -> bool:
    """False when ``item`` has a ``torch:`` range that ``version`` is outside of; an invalid range
    is an error (at its line) and keeps the item, so the rest of it is checked too."""
    if "torch" not in item:
        return True
    try:
        return TV.contains(TV.parse_range(item["torch"]), version)
    except ValueError as e:
        errors.add(_line(item, "torch"), op, str(e))
        return True


def _name_hint(entry: Any) -> str:
    """The op name an entry's ``func:`` starts with, for errors found before (or without) parsing it."""
    func = entry.get("func") if isinstance(entry, dict) else None
    if not isinstance(func, str):
        return ""
    name = func.split("(", 1)[0].strip()
    return name if name.replace(".", "_").isidentifier() else ""


def _autograd_lines(entry: dict[str, Any]) -> dict[str, int]:
    """Lines of the autograd keys and of each name under inputs/grads, for the cross-entry checks."""
    spec = entry.get("autograd")
    if not isinstance(spec, dict):
        return {}
    out = {k: _line(spec, k) for k in _keys(spec)}
    for sub in ("inputs", "grads"):
        if isinstance(spec.get(sub), dict):
            out.update({f"{sub}.{k}": _line(spec[sub], k, out[sub]) for k in _keys(spec[sub])})
    out[""] = _line(entry, "autograd")
    return out


def _parse_entry(e: dict[str, Any], entry_text: str, path: str, errors: _Errors,
                 version: TV.Version, enums: dict[str, EnumDef]) -> Optional[OpEntry]:
    line = _line(e)
    func_text = e.get("func")
    if not isinstance(func_text, str):
        errors.add(line, "", "every entry needs a 'func:' schema string")
        return None
    func_line = _line(e, "func")
    try:
        func = FunctionSchema.parse(func_text)
    except Exception as ex:  # torchgen raises AssertionError/RuntimeError with its reason
        errors.add(func_line, _name_hint(e), f"cannot parse schema {func_text!r}: {ex}")
        return None
    name = str(func.name)
    problem = _unsupported_schema(func)
    if problem:
        errors.add(func_line, name, problem)
        return None
    for k in _keys(e):
        if k not in ENTRY_KEYS:
            errors.add(_line(e, k), name, f"unknown key {k!r}; known keys: {', '.join(sorted(ENTRY_KEYS))}")

    kernel = e.get("kernel")
    if not isinstance(kernel, str) or not kernel.isidentifier():
        errors.add(_line(e, "kernel") if "kernel" in e else line, name,
                   "'kernel:' must name the kernel (a C++ identifier, e.g. FlashAttnGrad)")
        kernel = ""

    env: dict[str, str] = {}
    for a in func.arguments.flat_all:
        try:
            env[a.name] = E.kind_of_type(a.type)
        except E.ExprError as ex:
            errors.add(func_line, name, f"argument {a.name!r}: {ex}")
    kinds = [r.type.name if isinstance(r.type, BaseType) else None for r in func.returns]
    if any(k not in (BaseTy.Tensor, BaseTy.int) for k in kinds):
        errors.add(func_line, name, "returns must be Tensor or int, but got " + ", ".join(str(r.type) for r in func.returns))
    elif kinds[0] != BaseTy.Tensor or kinds != sorted(kinds, key=lambda k: k == BaseTy.int):
        errors.add(func_line, name, "int returns must follow the Tensor returns (at least one Tensor)")

    rules: list[Rule] = []
    rules += _parse_dtypes(e, name, env, path, errors)
    enum_args: dict[str, str] = {}
    rules += _parse_checks(e, name, env, path, errors, version, enums, enum_args)
    outputs, int_outputs = _parse_outputs(e, func, name, env, path, errors)
    random_when = _parse_random(e, name, env, errors)
    for rule in rules:
        if isinstance(rule, Check) and any(isinstance(n, ast.Call) and getattr(n.func, "id", "") == "data_dependent"
                                           for n in ast.walk(rule.expr.tree)):
            errors.add(rule.loc.line, name, "data_dependent() is only for the value of an int output")
    for arg in enum_args:
        if arg not in {a.name for a in func.arguments.flat_all}:
            errors.add(line, name, f"enum: {arg!r} is not an argument of {name} (only arguments take enums)")
    python_returns = _parse_python(e, func, name, errors)
    autograd = _parse_autograd(e, func, name, path, errors)
    tags = e.get("tags", [])
    if not isinstance(tags, list) or any(t not in KNOWN_TAGS for t in tags):
        errors.add(_line(e, "tags"), name, f"'tags:' must be a list of {sorted(KNOWN_TAGS)}")
        tags = []
    doc = e.get("doc", "")
    if not isinstance(doc, str):
        errors.add(_line(e, "doc"), name, "'doc:' must be text")
        doc = ""
    spec = e.get("dtypes", {})
    dtypes = tuple((str(k), tuple(spec[k])) for k in _keys(spec) if isinstance(spec[k], list)) if isinstance(
        spec, dict) else ()
    return OpEntry(func=func, kernel=kernel, rules=tuple(rules), outputs=tuple(outputs), dtypes=dtypes,
                   python_returns=python_returns, autograd=autograd, tags=tuple(tags),
                   doc=doc.strip(), loc=Location(path, line),
                   entry_hash=hashlib.sha256(entry_text.encode()).hexdigest()[:16],
                   int_outputs=tuple(int_outputs), random_when=random_when, enums=tuple(enum_args.items()))


def _parse_random(e: dict[str, Any], op: str, env: dict[str, str], errors: _Errors) -> Optional[E.Expr]:
    """``random: {when: COND}``: the kernel takes a (seed, offset) drawn by the binding when COND holds."""
    if "random" not in e:
        return None
    spec, line = e["random"], _line(e, "random")
    if not isinstance(spec, dict) or set(_keys(spec)) != {"when"}:
        errors.add(line, op, "'random:' takes only 'when: <condition under which the kernel draws random numbers>'")
        return None
    with errors.collect(_line(spec, "when", line), op):
        with _at(_line(spec, "when", line), "random.when: "):
            when = E.parse_expr(_expr_text(spec["when"]), env)
        if when.kind != E.BOOL:
            raise _Invalid(f"random.when must be a condition, but it is {when.kind}", _line(spec, "when", line))
        return when
    return None


def _unsupported_schema(func: FunctionSchema) -> str:
    """What op_plugin's generator cannot handle in a schema torchgen accepts, or ''."""
    if func.name.overload_name:
        return f"overload names are not supported ({func.name}); give the op its own name"
    if func.name.name.inplace or func.name.name.dunder_method:
        return f"in-place and dunder ops are not supported ({func.name})"
    if func.arguments.out:
        return "out= arguments are not supported; outputs are returned"
    names = [a.name for a in func.arguments.flat_all]
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        return f"argument names must be unique, {', '.join(dups)} repeats"
    if any(a.annotation is not None for a in func.arguments.flat_all) or any(
            r.annotation is not None for r in func.returns):
        return "alias annotations (Tensor(a), Tensor(a!)) are not supported; ops are functional"
    if not func.returns:
        return "an op must return at least one Tensor"
    return ""


def _parse_dtypes(e: dict[str, Any], op: str, env: dict[str, str], path: str, errors: _Errors) -> list[Rule]:
    spec = e.get("dtypes", {})
    line = _line(e, "dtypes")
    if not isinstance(spec, dict):
        errors.add(line, op, "'dtypes:' must map tensor arguments to lists of dtypes")
        return []
    rules: list[Rule] = []
    for arg in _keys(spec):
        allowed = spec[arg]
        arg_line = _line(spec, arg)
        if E.base(env.get(arg, "")) != E.TENSOR:
            errors.add(arg_line, op, f"dtypes: {arg!r} is not a tensor argument")
            continue
        if not isinstance(allowed, list) or not allowed or any(d not in E.DTYPES for d in allowed):
            errors.add(arg_line, op, f"dtypes: {arg} must list dtypes from {', '.join(E.DTYPES)}")
            continue
        optional = env[arg].endswith(E.OPTIONAL)
        cond = f"{arg}.dtype in ({', '.join(allowed)},)"
        text = f"{arg} must have dtype {', '.join(d.rstrip('_') for d in allowed)}, but got {{{arg}.dtype}}"
        with errors.collect(arg_line, op):
            rules.append(Check(E.parse_expr(cond, env), E.parse_message(text, env), strict=False,
                               when=E.parse_expr(f"{arg} is not None", env) if optional else None,
                               loc=Location(path, arg_line)))
    return rules


def _expr_text(v: Any) -> str:
    """An expression written as YAML: text, a number, or a flow list such as ``[T, H]``."""
    if isinstance(v, list):
        return "[" + ", ".join(_expr_text(x) for x in v) + "]"
    return str(v)


def _literal(v: Any) -> str:
    return repr(v) if isinstance(v, str) else str(v)


def _parse_checks(e: dict[str, Any], op: str, env: dict[str, str], path: str, errors: _Errors,
                  version: TV.Version, enums: dict[str, EnumDef], enum_args: dict[str, str]) -> list[Rule]:
    """The checks, in order; ``{arg: A, enum: E}`` checks also record A -> E in ``enum_args``."""
    items = e.get("checks", [])
    if not isinstance(items, list):
        errors.add(_line(e, "checks"), op, "'checks:' must be a list")
        return []
    rules: list[Rule] = []
    item_lines = getattr(items, "lines", [])
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            line = item_lines[index] if index < len(item_lines) else _line(e, "checks")
            errors.add(line, op, f"a check must be a mapping, got {item!r}")
            continue
        line = _line(item)
        loc = Location(path, line)
        for k in _keys(item):
            if k not in CHECK_KEYS:
                errors.add(_line(item, k), op, f"unknown check key {k!r}; known: {', '.join(sorted(CHECK_KEYS))}")
        if not _in_torch_range(item, version, op, errors):
            continue
        if "let" in item:
            lets = item["let"]
            if not isinstance(lets, dict) or len(set(_keys(item)) - {"torch"}) != 1:
                errors.add(line, op, "'let:' must be a mapping of names to expressions, alone in its item")
                continue
            for let_name in _keys(lets):
                let_line = _line(lets, let_name)
                name = str(let_name)
                if name in env or name in E.DTYPES or name in E.FUNCTIONS:
                    errors.add(let_line, op, f"let {name!r} clashes with an argument, let, dtype or function name")
                    continue
                if not name.isidentifier() or keyword.iskeyword(name):
                    errors.add(let_line, op, f"let {name!r} is not a name")
                    continue
                with errors.collect(let_line, op):
                    let_expr = E.parse_expr(str(lets[let_name]), env)
                    env[name] = let_expr.kind
                    rules.append(Let(name, let_expr, Location(loc.file, let_line)))
            continue
        with errors.collect(line, op):
            rules.append(_parse_one_check(item, env, loc, enums))
            if "enum" in item:
                arg = str(item["arg"])
                if arg in enum_args:
                    raise _Invalid(f"{arg} already takes enum {enum_args[arg]}", _line(item, "enum"))
                enum_args[arg] = str(item["enum"])
    return rules


def _parse_one_check(item: dict[str, Any], env: dict[str, str], loc: Location, enums: dict[str, EnumDef]) -> Check:
    sugar = [k for k in ("values", "range", "equals", "enum") if k in item]
    if "expr" in item:
        if sugar or "arg" in item:
            raise _Invalid("a check has either 'expr:' or 'arg:' with one of values/range/equals/enum")
        cond = str(item["expr"])
        if "error" not in item:
            raise _Invalid("an 'expr:' check needs an 'error:' text")
        default_text = ""
        cond_line = _line(item, "expr")
    elif "arg" in item and len(sugar) == 1:
        arg = str(item["arg"])
        if arg not in env:
            raise _Invalid(f"check names unknown argument or let {arg!r}", _line(item, "arg"))
        if E.base(env[arg]) not in (E.INT, E.FLOAT, E.BOOL, E.STR):
            raise _Invalid(f"values/range/equals apply to int, float, bool and str values; {arg!r} is a {env[arg]} "
                           "(write an 'expr:' check)", _line(item, "arg"))
        kind = sugar[0]
        value = item[kind]
        cond_line = _line(item, kind)
        if kind == "enum":  # the enum's values; the Python wrappers also take its members and names
            if value not in enums:
                raise _Invalid(f"enum {value!r} is not defined (a '- enum: {value}' item with its members)", cond_line)
            if E.base(env[arg]) != E.INT:
                raise _Invalid(f"enum: {arg!r} is a {env[arg]}; an enum names the values of an int argument", cond_line)
            enum = enums[value]
            cond = f"{arg} in ({', '.join(str(v) for _, v in enum.members)},)"
            default_text = f"{arg} must be a {enum.name} ({enum.listing()}), but got {{{arg}}}"
        elif kind == "values":
            if not isinstance(value, list) or not value:
                raise _Invalid("'values:' must be a non-empty list", cond_line)
            subject = arg
            if E.base(env[arg]) == E.STR:
                subject = f"upper({arg})"
                lower = [v for v in value if not isinstance(v, str) or v != v.upper()]
                if lower:
                    raise _Invalid(f"values of str argument {arg!r} are compared with upper({arg}), so they must be "
                                   f"upper-case strings: {', '.join(repr(v) for v in lower)}", cond_line)
            cond = f"{subject} in ({', '.join(_literal(v) for v in value)},)"
            default_text = f"{arg} must be one of {', '.join(str(v) for v in value)}, but got {{{arg}}}"
        elif kind == "range":
            if not isinstance(value, list) or len(value) != 2:
                raise _Invalid("'range:' must be [low, high] (null for unbounded)", cond_line)
            low, high = value
            parts = [f"{arg} >= {low}"] if low is not None else []
            parts += [f"{arg} <= {high}"] if high is not None else []
            cond = " and ".join(parts) or "True"
            bounds = f"[{'-inf' if low is None else low}, {'inf' if high is None else high}]"
            default_text = f"{arg} must be in {bounds}, but got {{{arg}}}"
        else:
            cond = f"{arg} == {value}"
            default_text = f"{arg} must equal {value} ({{{value}}}), but got {{{arg}}}"
        if env[arg].endswith(E.OPTIONAL):
            cond = f"{arg} is None or ({cond})"  # sugar constrains a value only when one is given
    else:
        raise _Invalid("a check needs 'expr:' and 'error:', or 'arg:' with exactly one of values/range/equals/enum")
    with _at(cond_line):
        check_expr = E.parse_expr(cond, env)
    if check_expr.kind != E.BOOL:
        raise _Invalid(f"check {cond!r} must be a condition (bool), but it is {check_expr.kind}", cond_line)
    when = None
    if "when" in item:
        with _at(_line(item, "when")):
            when = E.parse_expr(str(item["when"]), env)
        if when.kind != E.BOOL:
            raise _Invalid(f"'when:' must be a condition (bool), but it is {when.kind}", _line(item, "when"))
    strict = item.get("strict", False)
    if not isinstance(strict, bool):
        raise _Invalid("'strict:' must be true or false", _line(item, "strict"))
    warn = item.get("warn", False)
    if not isinstance(warn, bool) or (warn and strict):
        raise _Invalid("'warn:' must be true or false, and a warning is never strict", _line(item, "warn"))
    with _at(_line(item, "error")):
        message = E.parse_message(str(item.get("error", default_text)), env)
    return Check(check_expr, message, strict, when, loc, warn=warn)


def _parse_outputs(e: dict[str, Any], func: FunctionSchema, op: str, env: dict[str, str], path: str,
                   errors: _Errors) -> tuple[list[OutputRule], list[IntOutputRule]]:
    spec = e.get("outputs", {})
    line = _line(e, "outputs")
    if not isinstance(spec, dict):
        errors.add(line, op, "'outputs:' must map each returned tensor to its shape and dtype")
        return [], []
    names = [r.name or f"result{i}" for i, r in enumerate(func.returns)]
    int_names = {n for n, r in zip(names, func.returns) if isinstance(r.type, BaseType) and r.type.name == BaseTy.int}
    rules: list[OutputRule] = []
    int_rules: list[IntOutputRule] = []
    for out in _keys(spec):
        if out not in names:
            errors.add(_line(spec, out), op, f"outputs: {out!r} is not a return of the schema ({', '.join(names)})")
    for out in names:
        if out not in spec:
            errors.add(line, op, f"outputs: no shape rule for return {out!r}")
            continue
        rule = spec[out]
        out_line = _line(spec, out)
        with errors.collect(out_line, op):
            if not isinstance(rule, dict):
                raise _Invalid(f"outputs: {out} takes 'like: ARG' or 'shape:' and 'dtype:', got {rule!r}")
            unknown = [k for k in _keys(rule) if k not in OUTPUT_KEYS]
            if unknown:
                raise _Invalid(f"outputs: {out}: unknown key {unknown[0]!r}; known: {', '.join(sorted(OUTPUT_KEYS))}",
                               _line(rule, unknown[0]))
            if out in int_names or "value" in rule:
                if out not in int_names or set(_keys(rule)) != {"value"}:
                    raise _Invalid(f"outputs: {out}: an int return takes only 'value:' (what the fake returns) "
                                   "and only int returns take it")
                with _at(_line(rule, "value"), f"outputs: {out}: "):
                    value = E.parse_expr(_expr_text(rule["value"]), env)
                if value.kind != E.INT:
                    raise _Invalid(f"outputs: {out}: value must be an int, but it is {value.kind}", _line(rule, "value"))
                int_rules.append(IntOutputRule(out, value, Location(path, out_line)))
                continue
            if "like" in rule:
                like = str(rule["like"])
                if E.base(env.get(like, "")) != E.TENSOR:
                    raise _Invalid(f"outputs: {out}: 'like: {like}' does not name a tensor argument",
                                   _line(rule, "like"))
                shape_text = _expr_text(rule.get("shape", f"{like}.shape"))
                dtype_text = _expr_text(rule.get("dtype", f"{like}.dtype"))
            else:
                if "shape" not in rule or "dtype" not in rule:
                    raise _Invalid(f"outputs: {out} needs both 'shape:' and 'dtype:' (or 'like:')")
                shape_text = _expr_text(rule["shape"])
                dtype_text = _expr_text(rule["dtype"])
            if dtype_text in env and E.base(env[dtype_text]) == E.TENSOR:
                dtype_text += ".dtype"  # `dtype: q` means q's dtype
            with _at(_line(rule, "shape"), f"outputs: {out}: "):
                shape = E.parse_expr(shape_text, env)
            if shape.kind not in (E.SHAPE, E.INT_LIST):
                raise _Invalid(f"outputs: {out}: shape {shape_text!r} must be a shape ([d0, d1, ...], x.shape, "
                               "x.shape[:-1] + [1], an int[] argument), "
                               f"but it is {shape.kind}", _line(rule, "shape"))
            with _at(_line(rule, "dtype"), f"outputs: {out}: "):
                dtype = E.parse_expr(dtype_text, env)
            if dtype.kind != E.DTYPE:
                raise _Invalid(f"outputs: {out}: dtype {dtype_text!r} must be a dtype, a tensor argument or "
                               f"stats_dtype(x), but it is {dtype.kind}", _line(rule, "dtype"))
            rules.append(OutputRule(out, shape, dtype, Location(path, out_line)))
    return rules, int_rules


def _parse_python(e: dict[str, Any], func: FunctionSchema, op: str, errors: _Errors) -> tuple[str, ...]:
    names = tuple(r.name or f"result{i}" for i, r in enumerate(func.returns))
    spec = e.get("python", {})
    if not isinstance(spec, dict):
        errors.add(_line(e, "python"), op, "'python:' takes only 'returns: [outputs the wrapper returns]'")
        return names
    unknown = [k for k in _keys(spec) if k not in PYTHON_KEYS]
    for k in unknown:
        errors.add(_line(spec, k), op, f"unknown python key {k!r}; known: {', '.join(sorted(PYTHON_KEYS))}")
    if unknown:
        return names
    returns = spec.get("returns", list(names))
    if not isinstance(returns, list) or not returns or any(r not in names for r in returns):
        errors.add(_line(spec, "returns", _line(e, "python")), op,
                   f"python.returns must list some of {', '.join(names)}, got {returns!r}")
        return names
    return tuple(returns)


def _parse_autograd(e: dict[str, Any], func: FunctionSchema, op: str, path: str,
                    errors: _Errors) -> Optional[AutogradPair]:
    spec = e.get("autograd")
    if spec is None:
        return None
    line = _line(e, "autograd")
    if not isinstance(spec, dict):
        errors.add(line, op, "'autograd:' must be a mapping")
        return None
    for k in _keys(spec):
        if k not in AUTOGRAD_KEYS:
            errors.add(_line(spec, k), op, f"unknown autograd key {k!r}; known: {', '.join(sorted(AUTOGRAD_KEYS))}")
    backward = spec.get("backward")
    if not isinstance(backward, str):
        errors.add(line, op, "autograd needs 'backward: <op name>'")
        return None
    inputs_spec = spec.get("inputs", {}) or {}
    grads_spec = spec.get("grads", {}) or {}
    non_diff = spec.get("non_differentiable", []) or []
    if not isinstance(inputs_spec, dict) or not isinstance(grads_spec, dict) or not isinstance(non_diff, list):
        errors.add(line, op, "autograd: inputs and grads are mappings, non_differentiable a list")
        return None
    inputs = []
    for bwd_arg in _keys(inputs_spec):
        source = str(inputs_spec[bwd_arg]).strip()
        if source.startswith("grad(") and source.endswith(")"):
            inputs.append((bwd_arg, BackwardInput("grad", source[5:-1].strip())))
        else:
            inputs.append((bwd_arg, BackwardInput("?", source)))  # input or output: resolved later
    grads, formulas = [], []
    for k in _keys(grads_spec):
        value = str(grads_spec[k]).strip()
        if "(" in value:
            formula = _parse_formula(value)
            if formula is None:
                errors.add(_line(grads_spec, k, line), op, f"autograd.grads: {k}: {value!r} is neither a backward "
                           "output nor a call f(name, grad(output), ...) of csrc/bindings/autograd_formulas.h")
            else:
                formulas.append((str(k), formula))
        else:
            grads.append((str(k), value))
    overrides_spec = spec.get("forward_overrides", {}) or {}
    if not isinstance(overrides_spec, dict):
        errors.add(_line(spec, "forward_overrides", line), op, "autograd.forward_overrides must be a mapping")
        overrides_spec = {}
    overrides = []
    for k in _keys(overrides_spec):
        value = overrides_spec[k]
        if not isinstance(value, (bool, int, float, str)):
            errors.add(_line(overrides_spec, k, line), op,
                       f"autograd.forward_overrides: {k}: {value!r} must be a bool, int, float or str literal")
            continue
        overrides.append((str(k), repr(value)))
    return AutogradPair(backward=backward, inputs=tuple(inputs), grads=tuple(grads),
                        non_differentiable=tuple(str(x) for x in non_diff), loc=Location(path, line),
                        formulas=tuple(formulas), forward_overrides=tuple(overrides))


def _parse_formula(text: str) -> Optional[Formula]:
    """``f(a, grad(out), ...)`` with plain names: unresolved sources, checked across entries."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.keywords:
        return None
    args = []
    for a in node.args:
        if isinstance(a, ast.Name):
            args.append(BackwardInput("?", a.id))
        elif (isinstance(a, ast.Call) and isinstance(a.func, ast.Name) and a.func.id == "grad"
              and len(a.args) == 1 and isinstance(a.args[0], ast.Name) and not a.keywords):
            args.append(BackwardInput("grad", a.args[0].id))
        else:
            return None
    return Formula(node.func.id, tuple(args))


def _check_across_entries(ops: list[OpEntry], errors: _Errors,
                          autograd_lines: Optional[dict[str, dict[str, int]]] = None) -> None:
    """Names unique; autograd pairings name existing ops, arguments and outputs of the right kinds.

    ``autograd_lines`` (op -> key -> line, from ``_autograd_lines``) lets each error name the line of
    the key it is about; without it every error names the ``autograd:`` line."""
    by_name: dict[str, OpEntry] = {}
    kernels: dict[str, OpEntry] = {}
    for op in ops:
        if op.name in by_name:
            errors.add(op.loc.line, op.name, f"duplicate op (first defined at line {by_name[op.name].loc.line})")
        by_name.setdefault(op.name, op)
        if op.kernel and op.kernel in kernels:
            errors.add(op.loc.line, op.name, f"kernel {op.kernel} is already used by {kernels[op.kernel].name} "
                       f"(line {kernels[op.kernel].loc.line})")
        kernels.setdefault(op.kernel, op)
    for i, op in enumerate(ops):
        pair = op.autograd
        if pair is None:
            continue
        key_lines = (autograd_lines or {}).get(op.name, {})

        def at(*keys: str, pair_line: int = pair.loc.line, key_lines: dict[str, int] = key_lines) -> int:
            return next((key_lines[k] for k in keys if k in key_lines), pair_line)

        bwd = by_name.get(pair.backward)
        if bwd is None:
            errors.add(at("backward"), op.name, f"autograd: backward op {pair.backward!r} is not in the registry")
            continue
        fwd_kinds = {a.name: _kind(a.type) for a in op.func.arguments.flat_all}
        fwd_outputs = [r.name or f"result{j}" for j, r in enumerate(op.func.returns)]
        output_kinds = {n: _kind(r.type) for n, r in zip(fwd_outputs, op.func.returns)}
        bwd_args = [a for a in bwd.func.arguments.flat_all]
        bwd_outputs = [r.name or f"result{j}" for j, r in enumerate(bwd.func.returns)]
        explicit = dict(pair.inputs)
        resolved: list[tuple[str, BackwardInput]] = []
        for name in explicit:
            if name not in {a.name for a in bwd_args}:
                errors.add(at(f"inputs.{name}", "inputs"), op.name,
                           f"autograd.inputs: {name!r} is not an argument of {bwd.name}")
        for a in bwd_args:
            src = explicit.get(a.name)
            line = at(f"inputs.{a.name}", "inputs")
            if src is None:
                if a.name in fwd_kinds:
                    src = BackwardInput("input", a.name)
                elif a.name in fwd_outputs:
                    src = BackwardInput("output", a.name)
                elif a.default is not None:
                    continue  # the backward's default applies
                else:
                    errors.add(at("inputs", "backward"), op.name,
                               f"autograd: no source for {bwd.name} argument {a.name!r}; name it under autograd.inputs")
                    continue
            elif src.source == "grad":
                if src.name not in fwd_outputs:
                    errors.add(line, op.name, f"autograd.inputs: grad({src.name}) names no output of {op.name}")
                    continue
            elif src.name in fwd_kinds:
                src = BackwardInput("input", src.name)
            elif src.name in fwd_outputs:
                src = BackwardInput("output", src.name)
            else:
                errors.add(line, op.name,
                           f"autograd.inputs: {src.name!r} is neither an input nor an output of {op.name}")
                continue
            got = fwd_kinds[src.name] if src.source == "input" else (
                output_kinds[src.name] if src.source == "output" else E.TENSOR)
            want = _kind(a.type)
            if want and got and E.base(want) != E.base(got):
                what = f"grad({src.name})" if src.source == "grad" else f"{src.source} {src.name!r}"
                errors.add(line, op.name, f"autograd: {bwd.name} argument {a.name!r} is a {want}, "
                           f"but its source {what} is a {got}")
            resolved.append((a.name, src))
        for fwd_in, bwd_out in pair.grads:
            line = at(f"grads.{fwd_in}", "grads")
            if fwd_in not in fwd_kinds:
                errors.add(line, op.name, f"autograd.grads: {fwd_in!r} is not an input of {op.name}")
            elif E.base(fwd_kinds[fwd_in]) != E.TENSOR:
                errors.add(line, op.name, f"autograd.grads: {fwd_in!r} is a {fwd_kinds[fwd_in]}, not a tensor input")
            if bwd_out not in bwd_outputs:
                errors.add(line, op.name, f"autograd.grads: {bwd_out!r} is not an output of {bwd.name}")
        formulas = []
        for fwd_in, formula in pair.formulas:
            line = at(f"grads.{fwd_in}", "grads")
            if fwd_in not in fwd_kinds or E.base(fwd_kinds[fwd_in]) != E.TENSOR:
                errors.add(line, op.name, f"autograd.grads: {fwd_in!r} is not a tensor input of {op.name}")
            if fwd_in in dict(pair.grads):
                errors.add(line, op.name, f"autograd.grads: {fwd_in!r} has two gradients")
            args = []
            for src in formula.args:
                if src.source == "grad":
                    if src.name not in fwd_outputs:
                        errors.add(line, op.name, f"autograd.grads: grad({src.name}) names no output of {op.name}")
                    args.append(src)
                elif src.name in fwd_kinds:
                    args.append(BackwardInput("input", src.name))
                elif src.name in fwd_outputs:
                    args.append(BackwardInput("output", src.name))
                else:
                    errors.add(line, op.name, f"autograd.grads: {fwd_in}: {src.name!r} is neither an input "
                               f"nor an output of {op.name}")
            formulas.append((fwd_in, Formula(formula.function, tuple(args))))
        for name, value in pair.forward_overrides:
            kind = fwd_kinds.get(name)
            literal = ast.literal_eval(value)
            if kind is None:
                errors.add(at("forward_overrides"), op.name,
                           f"autograd.forward_overrides: {name!r} is not an argument of {op.name}")
            elif E.base(kind) not in (E.BOOL, E.INT, E.FLOAT, E.STR) or (
                    E.base(kind) != {bool: E.BOOL, int: E.INT, float: E.FLOAT, str: E.STR}[type(literal)]):
                errors.add(at("forward_overrides"), op.name,
                           f"autograd.forward_overrides: {name!r} is a {kind}, but {value} is not")
        for out in pair.non_differentiable:
            if out not in fwd_outputs:
                errors.add(at("non_differentiable"), op.name,
                           f"autograd.non_differentiable: {out!r} is not an output of {op.name}")
        for out in op.outputs_shaped_by({name for name, _ in pair.forward_overrides}):
            if out not in pair.non_differentiable:
                errors.add(at("forward_overrides"), op.name,
                           f"autograd.forward_overrides: output {out!r} depends on them, so it is returned "
                           "zero-filled to the caller; it must be listed under non_differentiable")
        ops[i] = dataclasses.replace(op, autograd=dataclasses.replace(pair, inputs=tuple(resolved),
                                                                      formulas=tuple(formulas)))


def _kind(t: Any) -> str:
    """An argument's expression kind, or '' for a type already reported as unsupported."""
    try:
        return E.kind_of_type(t)
    except E.ExprError:
        return ""

