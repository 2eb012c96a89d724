"""The YAML structure of one registry entry: its schema, outputs, python and random keys, tags and
doc (its checks: parse_checks.py; its autograd: pairing, which needs the other entries:
parse_autograd.py), and the ``- enum:`` items."""
from __future__ import annotations

import ast
from typing import Any, Optional

from torchgen.model import BaseTy, BaseType, FunctionSchema

from codegen import expr as E
from codegen import torch_version as TV
from codegen.model import Check, EnumDef, IntOutputRule, Location, OutputRule, Rule
from codegen.parse_checks import parse_checks, parse_dtypes
from codegen.parse_common import Errors, Invalid, at_key, expr_text, keys_of, line_of, name_hint, see
from codegen.parse_autocast import parse_autocast
from codegen.parse_sharding import parse_sharding
from codegen.parse_vmap import parse_vmap
from codegen.samples import TEST_KEYS, parse_tests

ENTRY_KEYS = {"func", "kernel", "dtypes", "checks", "outputs", "python", "autograd", "random", "vmap", "autocast",
              "sharding", "strided", "tags", "doc", "torch", *TEST_KEYS}
ENUM_KEYS = {"enum", "members", "doc"}
OUTPUT_KEYS = {"shape", "dtype", "like", "value"}
PYTHON_KEYS = {"returns"}
KNOWN_TAGS = {"pt2_compliant_tag", "nondeterministic_seeded", "needs_fixed_stride_order"}


def parse_enums(data: list[Any], path: str, errors: Errors) -> dict[str, EnumDef]:
    """The ``- enum: Name`` items: ``members: {NAME: int, ...}`` and an optional ``doc:``."""
    enums: dict[str, EnumDef] = {}
    for item in data:
        if not isinstance(item, dict) or "enum" not in item:
            continue
        line, name = line_of(item), item["enum"]
        for k in keys_of(item):
            if k not in ENUM_KEYS:
                errors.add(line_of(item, k), "", f"enum {name}: unknown key {k!r}; known: {', '.join(sorted(ENUM_KEYS))}{see('enums')}")
        if not isinstance(name, str) or not name.isidentifier() or not name[0].isupper():
            errors.add(line, "", f"'enum:' must name the enum class (a CamelCase identifier), got {name!r}")
            continue
        if name in enums:
            errors.add(line, "", f"enum {name} is defined twice (first at line {enums[name].loc.line})")
            continue
        members = item.get("members")
        member_line = line_of(item, "members", line)
        if not isinstance(members, dict) or not keys_of(members):
            errors.add(member_line, "", f"enum {name}: 'members:' must map NAME to an int value")
            continue
        pairs = [(k, members[k]) for k in keys_of(members)]
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
            errors.add(line_of(item, "doc", line), "", f"enum {name}: 'doc:' must be text")
            doc = ""
        enums[name] = EnumDef(name, tuple(pairs), doc.strip(), Location(path, line))
    return enums


def parse_entry(e: dict[str, Any], path: str, errors: Errors,
                 version: TV.Version, enums: dict[str, EnumDef]) -> Optional[dict[str, Any]]:
    """The fields of the entry's OpEntry but its autograd pairing (parse_autograd.py adds it), or None
    when its schema is unusable (reported)."""
    line = line_of(e)
    func_text = e.get("func")
    if not isinstance(func_text, str):
        errors.add(line, "", "every entry needs a 'func:' schema string")
        return None
    func_line = line_of(e, "func")
    try:
        func = FunctionSchema.parse(func_text)
    except Exception as ex:  # torchgen raises AssertionError/RuntimeError with its reason
        errors.add(func_line, name_hint(e), f"cannot parse schema {func_text!r}: {ex}")
        return None
    name = str(func.name)
    problem = _unsupported_schema(func)
    if problem:
        errors.add(func_line, name, problem)
        return None
    for k in keys_of(e):
        if k not in ENTRY_KEYS:
            errors.add(line_of(e, k), name, f"unknown key {k!r}; known keys: {', '.join(sorted(ENTRY_KEYS))}{see('entry-keys')}")

    kernel = e.get("kernel")
    if not isinstance(kernel, str) or not kernel.isidentifier():
        errors.add(line_of(e, "kernel") if "kernel" in e else line, name,
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
    rules += parse_dtypes(e, name, env, path, errors)
    enum_args: dict[str, str] = {}
    rules += parse_checks(e, name, env, path, errors, version, enums, enum_args)
    outputs, int_outputs = _parse_outputs(e, func, name, env, path, errors)
    random_when = _parse_random(e, name, env, errors)
    vmap = parse_vmap(e, name, func, path, errors)
    autocast = parse_autocast(e, name, func, path, errors)
    sharding = parse_sharding(e, name, func, path, errors)
    for rule in rules:
        if isinstance(rule, Check) and any(isinstance(n, ast.Call) and getattr(n.func, "id", "") == "data_dependent"
                                           for n in ast.walk(rule.expr.tree)):
            errors.add(rule.loc.line, name, "data_dependent() is only for the value of an int output")
    for arg in enum_args:
        if arg not in {a.name for a in func.arguments.flat_all}:
            errors.add(line, name, f"enum: {arg!r} is not an argument of {name} (only arguments take enums)")
    python_returns = _parse_python(e, func, name, errors)
    strided = _parse_strided(e, name, env, errors)
    tags = e.get("tags", [])
    if not isinstance(tags, list) or any(t not in KNOWN_TAGS for t in tags):
        errors.add(line_of(e, "tags"), name, f"'tags:' must be a list of {sorted(KNOWN_TAGS)}")
        tags = []
    doc = e.get("doc", "")
    if not isinstance(doc, str):
        errors.add(line_of(e, "doc"), name, "'doc:' must be text")
        doc = ""
    spec = e.get("dtypes", {})
    dtypes = tuple((str(k), tuple(spec[k])) for k in keys_of(spec) if isinstance(spec[k], list)) if isinstance(
        spec, dict) else ()
    return dict(func=func, kernel=kernel, rules=tuple(rules), outputs=tuple(outputs), dtypes=dtypes,
                python_returns=python_returns, tags=tuple(tags), doc=doc.strip(), loc=Location(path, line),
                int_outputs=tuple(int_outputs), random_when=random_when, vmap=vmap, autocast=autocast,
                sharding=sharding, enums=tuple(enum_args.items()), strided=strided,
                tests=parse_tests(e, func, name, errors.add))


def _parse_strided(e: dict[str, Any], op: str, env: dict[str, str], errors: Errors) -> tuple[str, ...]:
    """``strided: [ARG, ...]``: Tensor inputs the kernel reads through their strides (the binding
    copies one only when its last dimension is not contiguous)."""
    spec = e.get("strided", [])
    tensors = [a for a, kind in env.items() if kind in (E.TENSOR, E.TENSOR + E.OPTIONAL)]
    if not isinstance(spec, list) or any(a not in tensors for a in spec):
        errors.add(line_of(e, "strided"), op, f"'strided:' must list Tensor arguments of {op} ({', '.join(tensors)}), "
                                              f"but got {spec!r}{see('strided')}")
        return ()
    return tuple(spec)



def _parse_random(e: dict[str, Any], op: str, env: dict[str, str], errors: Errors) -> Optional[E.Expr]:
    """``random: {when: COND}``: the kernel takes a (seed, offset) drawn by the binding when COND holds."""
    if "random" not in e:
        return None
    spec, line = e["random"], line_of(e, "random")
    if not isinstance(spec, dict) or set(keys_of(spec)) != {"when"}:
        errors.add(line, op, "'random:' takes only 'when: <condition under which the kernel draws random numbers>'")
        return None
    with errors.collect(line_of(spec, "when", line), op):
        with at_key(line_of(spec, "when", line), "random.when: "):
            when = E.parse_expr(expr_text(spec["when"]), env)
        if when.kind != E.BOOL:
            raise Invalid(f"random.when must be a condition, but it is {when.kind}", line_of(spec, "when", line))
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


def _parse_outputs(e: dict[str, Any], func: FunctionSchema, op: str, env: dict[str, str], path: str,
                   errors: Errors) -> tuple[list[OutputRule], list[IntOutputRule]]:
    spec = e.get("outputs", {})
    line = line_of(e, "outputs")
    if not isinstance(spec, dict):
        errors.add(line, op, "'outputs:' must map each returned tensor to its shape and dtype")
        return [], []
    names = [r.name or f"result{i}" for i, r in enumerate(func.returns)]
    int_names = {n for n, r in zip(names, func.returns) if isinstance(r.type, BaseType) and r.type.name == BaseTy.int}
    rules: list[OutputRule] = []
    int_rules: list[IntOutputRule] = []
    for out in keys_of(spec):
        if out not in names:
            errors.add(line_of(spec, out), op, f"outputs: {out!r} is not a return of the schema ({', '.join(names)})")
    for out in names:
        if out not in spec:
            errors.add(line, op, f"outputs: no shape rule for return {out!r}")
            continue
        rule = spec[out]
        out_line = line_of(spec, out)
        with errors.collect(out_line, op):
            if not isinstance(rule, dict):
                raise Invalid(f"outputs: {out} takes 'like: ARG' or 'shape:' and 'dtype:', got {rule!r}")
            unknown = [k for k in keys_of(rule) if k not in OUTPUT_KEYS]
            if unknown:
                raise Invalid(f"outputs: {out}: unknown key {unknown[0]!r}; known: {', '.join(sorted(OUTPUT_KEYS))}"
                              f"{see('outputs')}",
                               line_of(rule, unknown[0]))
            if out in int_names or "value" in rule:
                if out not in int_names or set(keys_of(rule)) != {"value"}:
                    raise Invalid(f"outputs: {out}: an int return takes only 'value:' (what the fake returns) "
                                   "and only int returns take it")
                with at_key(line_of(rule, "value"), f"outputs: {out}: "):
                    value = E.parse_expr(expr_text(rule["value"]), env)
                if value.kind != E.INT:
                    raise Invalid(f"outputs: {out}: value must be an int, but it is {value.kind}", line_of(rule, "value"))
                int_rules.append(IntOutputRule(out, value, Location(path, out_line)))
                continue
            if "like" in rule:
                like = str(rule["like"])
                if E.base(env.get(like, "")) != E.TENSOR:
                    raise Invalid(f"outputs: {out}: 'like: {like}' does not name a tensor argument",
                                   line_of(rule, "like"))
                shape_text = expr_text(rule.get("shape", f"{like}.shape"))
                dtype_text = expr_text(rule.get("dtype", f"{like}.dtype"))
            else:
                if "shape" not in rule or "dtype" not in rule:
                    raise Invalid(f"outputs: {out} needs both 'shape:' and 'dtype:' (or 'like:')")
                shape_text = expr_text(rule["shape"])
                dtype_text = expr_text(rule["dtype"])
            if dtype_text in env and E.base(env[dtype_text]) == E.TENSOR:
                dtype_text += ".dtype"  # `dtype: q` means q's dtype
            with at_key(line_of(rule, "shape"), f"outputs: {out}: "):
                shape = E.parse_expr(shape_text, env)
            if shape.kind not in (E.SHAPE, E.INT_LIST):
                raise Invalid(f"outputs: {out}: shape {shape_text!r} must be a shape ([d0, d1, ...], x.shape, "
                               "x.shape[:-1] + [1], an int[] argument), "
                               f"but it is {shape.kind}", line_of(rule, "shape"))
            with at_key(line_of(rule, "dtype"), f"outputs: {out}: "):
                dtype = E.parse_expr(dtype_text, env)
            if dtype.kind != E.DTYPE:
                raise Invalid(f"outputs: {out}: dtype {dtype_text!r} must be a dtype, a tensor argument or "
                               f"stats_dtype(x), but it is {dtype.kind}", line_of(rule, "dtype"))
            rules.append(OutputRule(out, shape, dtype, Location(path, out_line)))
    return rules, int_rules


def _parse_python(e: dict[str, Any], func: FunctionSchema, op: str, errors: Errors) -> tuple[str, ...]:
    names = tuple(r.name or f"result{i}" for i, r in enumerate(func.returns))
    spec = e.get("python", {})
    if not isinstance(spec, dict):
        errors.add(line_of(e, "python"), op, "'python:' takes only 'returns: [outputs the wrapper returns]'")
        return names
    unknown = [k for k in keys_of(spec) if k not in PYTHON_KEYS]
    for k in unknown:
        errors.add(line_of(spec, k), op, f"unknown python key {k!r}; known: {', '.join(sorted(PYTHON_KEYS))}{see('python')}")
    if unknown:
        return names
    returns = spec.get("returns", list(names))
    if not isinstance(returns, list) or not returns or any(r not in names for r in returns):
        errors.add(line_of(spec, "returns", line_of(e, "python")), op,
                   f"python.returns must list some of {', '.join(names)}, got {returns!r}")
        return names
    return tuple(returns)

