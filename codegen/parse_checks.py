"""The registry's restrictions: ``dtypes:`` and ``checks:`` items, the sugar forms
(values/range/equals/enum) desugared into expressions, and ``let:`` names."""
from __future__ import annotations

import keyword
from typing import Any

from codegen import expr as E
from codegen import torch_version as TV
from codegen.model import Check, EnumDef, Let, Location, Rule
from codegen.parse_common import Errors, Invalid, at_key, in_torch_range, keys_of, line_of, literal, see

CHECK_KEYS = {"expr", "arg", "values", "range", "equals", "enum", "error", "strict", "when", "let", "warn", "torch"}


def parse_dtypes(e: dict[str, Any], op: str, env: dict[str, str], path: str, errors: Errors) -> list[Rule]:
    spec = e.get("dtypes", {})
    line = line_of(e, "dtypes")
    if not isinstance(spec, dict):
        errors.add(line, op, "'dtypes:' must map tensor arguments to lists of dtypes")
        return []
    rules: list[Rule] = []
    for arg in keys_of(spec):
        allowed = spec[arg]
        arg_line = line_of(spec, arg)
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


def parse_checks(e: dict[str, Any], op: str, env: dict[str, str], path: str, errors: Errors,
                  version: TV.Version, enums: dict[str, EnumDef], enum_args: dict[str, str]) -> list[Rule]:
    """The checks, in order; ``{arg: A, enum: E}`` checks also record A -> E in ``enum_args``."""
    items = e.get("checks", [])
    if not isinstance(items, list):
        errors.add(line_of(e, "checks"), op, "'checks:' must be a list")
        return []
    rules: list[Rule] = []
    item_lines = getattr(items, "lines", [])
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            line = item_lines[index] if index < len(item_lines) else line_of(e, "checks")
            errors.add(line, op, f"a check must be a mapping, got {item!r}")
            continue
        line = line_of(item)
        loc = Location(path, line)
        for k in keys_of(item):
            if k not in CHECK_KEYS:
                errors.add(line_of(item, k), op, f"unknown check key {k!r}; known: {', '.join(sorted(CHECK_KEYS))}{see('checks')}")
        if not in_torch_range(item, version, op, errors):
            continue
        if "let" in item:
            lets = item["let"]
            if not isinstance(lets, dict) or len(set(keys_of(item)) - {"torch"}) != 1:
                errors.add(line, op, "'let:' must be a mapping of names to expressions, alone in its item")
                continue
            for let_name in keys_of(lets):
                let_line = line_of(lets, let_name)
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
            rules.append(parse_one_check(item, env, loc, enums))
            if "enum" in item:
                arg = str(item["arg"])
                if arg in enum_args:
                    raise Invalid(f"{arg} already takes enum {enum_args[arg]}", line_of(item, "enum"))
                enum_args[arg] = str(item["enum"])
    return rules


def parse_one_check(item: dict[str, Any], env: dict[str, str], loc: Location, enums: dict[str, EnumDef]) -> Check:
    sugar = [k for k in ("values", "range", "equals", "enum") if k in item]
    if "expr" in item:
        if sugar or "arg" in item:
            raise Invalid("a check has either 'expr:' or 'arg:' with one of values/range/equals/enum")
        cond = str(item["expr"])
        if "error" not in item:
            raise Invalid("an 'expr:' check needs an 'error:' text")
        default_text = ""
        cond_line = line_of(item, "expr")
    elif "arg" in item and len(sugar) == 1:
        arg = str(item["arg"])
        if arg not in env:
            raise Invalid(f"check names unknown argument or let {arg!r}", line_of(item, "arg"))
        if E.base(env[arg]) not in (E.INT, E.FLOAT, E.BOOL, E.STR):
            raise Invalid(f"values/range/equals apply to int, float, bool and str values; {arg!r} is a {env[arg]} "
                           "(write an 'expr:' check)", line_of(item, "arg"))
        kind = sugar[0]
        value = item[kind]
        cond_line = line_of(item, kind)
        if kind == "enum":  # the enum's values; the Python wrappers also take its members and names
            if value not in enums:
                raise Invalid(f"enum {value!r} is not defined (a '- enum: {value}' item with its members)", cond_line)
            if E.base(env[arg]) != E.INT:
                raise Invalid(f"enum: {arg!r} is a {env[arg]}; an enum names the values of an int argument", cond_line)
            enum = enums[value]
            cond = f"{arg} in ({', '.join(str(v) for _, v in enum.members)},)"
            default_text = f"{arg} must be a {enum.name} ({enum.listing()}), but got {{{arg}}}"
        elif kind == "values":
            if not isinstance(value, list) or not value:
                raise Invalid("'values:' must be a non-empty list", cond_line)
            subject = arg
            if E.base(env[arg]) == E.STR:
                subject = f"upper({arg})"
                lower = [v for v in value if not isinstance(v, str) or v != v.upper()]
                if lower:
                    raise Invalid(f"values of str argument {arg!r} are compared with upper({arg}), so they must be "
                                   f"upper-case strings: {', '.join(repr(v) for v in lower)}", cond_line)
            cond = f"{subject} in ({', '.join(literal(v) for v in value)},)"
            default_text = f"{arg} must be one of {', '.join(str(v) for v in value)}, but got {{{arg}}}"
        elif kind == "range":
            if not isinstance(value, list) or len(value) != 2:
                raise Invalid("'range:' must be [low, high] (null for unbounded)", cond_line)
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
        raise Invalid("a check needs 'expr:' and 'error:', or 'arg:' with exactly one of values/range/equals/enum")
    with at_key(cond_line):
        check_expr = E.parse_expr(cond, env)
    if check_expr.kind != E.BOOL:
        raise Invalid(f"check {cond!r} must be a condition (bool), but it is {check_expr.kind}", cond_line)
    when = None
    if "when" in item:
        with at_key(line_of(item, "when")):
            when = E.parse_expr(str(item["when"]), env)
        if when.kind != E.BOOL:
            raise Invalid(f"'when:' must be a condition (bool), but it is {when.kind}", line_of(item, "when"))
    strict = item.get("strict", False)
    if not isinstance(strict, bool):
        raise Invalid("'strict:' must be true or false", line_of(item, "strict"))
    warn = item.get("warn", False)
    if not isinstance(warn, bool) or (warn and strict):
        raise Invalid("'warn:' must be true or false, and a warning is never strict", line_of(item, "warn"))
    with at_key(line_of(item, "error")):
        message = E.parse_message(str(item.get("error", default_text)), env)
    return Check(check_expr, message, strict, when, loc, warn=warn)
