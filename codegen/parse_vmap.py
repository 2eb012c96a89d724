"""An entry's ``vmap:`` key: how torch.vmap folds its dim into the op's own batch (bindings/<op>_vmap.cpp).

    vmap:
      when: layout_q != "TND" and metadata is None      # fold only then (default: always)
      inputs: {q: 0, k: 0, v: 0, seqused_q: 0}          # tensor argument -> its batch axis
      outputs: {attn_out: 0, softmax_lse: "0 if return_softmax_lse else None"}
      replays: {when: keep_prob < 1.0, of: attention_in}  # random draws of another call, see VmapRule

Axes are int expressions of the arguments (not of lets: the rule runs before the checks), or
``X if COND else None`` / ``None``: no axis there (an input that must stay unbatched, an output
alike for every sample)."""
from __future__ import annotations

import ast
from typing import Any, Optional

from codegen import expr as E
from codegen.model import Axis, Location, VmapRule
from codegen.parse_common import Errors, Invalid, at_key, expr_text, keys_of, known_keys_only, line_of, see

VMAP_KEYS = {"when", "inputs", "outputs", "replays"}
REPLAYS_KEYS = {"when", "of"}


def parse_vmap(e: dict[str, Any], op: str, func: Any, path: str, errors: Errors) -> Optional[VmapRule]:
    if "vmap" not in e:
        return None
    spec, line = e["vmap"], line_of(e, "vmap")
    if not isinstance(spec, dict):
        errors.add(line, op, f"'vmap:' takes {', '.join(sorted(VMAP_KEYS))}{see('vmap')}")
        return None
    known_keys_only(spec, VMAP_KEYS, "vmap", "vmap", line, op, errors)
    # Arguments only: the rule is evaluated before the checks, where no let is computed yet.
    env = {a.name: E.kind_of_type(a.type) for a in func.arguments.flat_all}
    tensors = [n for n, k in env.items() if E.base(k) == E.TENSOR]
    returns = [r.name or f"result{i}" for i, r in enumerate(func.returns)]
    tensor_returns = [n for n, r in zip(returns, func.returns) if str(r.type) == "Tensor"]
    ok = True

    when = None
    if "when" in spec:
        with errors.collect(line_of(spec, "when", line), op):
            when = parse_condition(spec["when"], env, "vmap.when", line_of(spec, "when", line))
        ok = ok and when is not None

    inputs = _axes(spec, "inputs", tensors, "a tensor argument", env, op, line, errors)
    outputs = _axes(spec, "outputs", tensor_returns, "a Tensor return", env, op, line, errors)
    ok = ok and inputs is not None and outputs is not None
    missing = [n for n in tensor_returns if isinstance(spec.get("outputs"), dict) and n not in spec["outputs"]]
    if missing:
        errors.add(line_of(spec, "outputs", line), op, f"vmap.outputs: no axis for {', '.join(missing)} "
                   "(write None for an output every sample has alike)")
        ok = False

    replays = None
    if "replays" in spec:
        r, r_line = spec["replays"], line_of(spec, "replays", line)
        if not isinstance(r, dict) or set(keys_of(r)) != REPLAYS_KEYS or r.get("of") not in tensors:
            errors.add(r_line, op, "vmap.replays takes {when: <condition>, of: <the tensor argument a forward "
                       f"that drew the random numbers made>}}{see('vmap')}")
            ok = False
        else:
            with errors.collect(line_of(r, "when", r_line), op):
                cond = parse_condition(r["when"], env, "vmap.replays.when", line_of(r, "when", r_line))
                replays = (cond, str(r["of"]))
            ok = ok and replays is not None
    if not ok or inputs is None or outputs is None:
        return None
    return VmapRule(when, tuple(inputs), tuple(outputs), replays, Location(path, line))


def parse_condition(text: Any, env: dict[str, str], key: str, line: int) -> E.Expr:
    with at_key(line, f"{key}: "):
        cond = E.parse_expr(expr_text(text), env)
    if cond.kind != E.BOOL:
        raise Invalid(f"{key} must be a condition, but it is {cond.kind}", line)
    return cond


def _axes(spec: dict[str, Any], key: str, allowed: list[str], what: str, env: dict[str, str], op: str,
          line: int, errors: Errors) -> Optional[list[tuple[str, Axis]]]:
    table, t_line = spec.get(key), line_of(spec, key, line)
    if not isinstance(table, dict):
        errors.add(t_line, op, f"vmap.{key} must map each {what[2:]} to its batch axis{see('vmap')}")
        return None
    out: list[tuple[str, Axis]] = []
    for name in keys_of(table):
        n_line = line_of(table, name, t_line)
        if name not in allowed:
            errors.add(n_line, op, f"vmap.{key}: {name!r} is not {what} of {op} ({', '.join(allowed)})")
            continue
        with errors.collect(n_line, op):
            out.append((name, parse_axis(table[name], env, f"vmap.{key}.{name}", n_line)))
    return out if len(out) == len(keys_of(table)) else None


def parse_axis(text: Any, env: dict[str, str], key: str, line: int) -> Axis:
    """``X``, ``None``, or ``X if COND else None`` (or ``None if COND else X``)."""
    source = expr_text(text)
    try:
        tree = ast.parse(source.strip(), mode="eval").body
    except SyntaxError as ex:
        raise Invalid(f"{key}: cannot parse {source!r}: {ex.msg}", line) from None

    def is_none(node: ast.expr) -> bool:
        return isinstance(node, ast.Constant) and node.value is None

    if is_none(tree):
        return Axis(None)
    when = None
    if isinstance(tree, ast.IfExp) and (is_none(tree.body) or is_none(tree.orelse)):
        test = ast.unparse(tree.test)
        when = parse_condition(test if is_none(tree.orelse) else f"not ({test})", env, key, line)
        tree = tree.orelse if is_none(tree.body) else tree.body
    with at_key(line, f"{key}: "):
        axis = E.parse_expr(ast.unparse(tree), env)
    if axis.kind != E.INT:
        raise Invalid(f"{key} must be an int axis, None, or `AXIS if COND else None`, but it is {axis.kind}", line)
    return Axis(axis, when)
