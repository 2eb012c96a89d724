"""An entry's ``sharding:`` key: how a call on DTensors (torch.distributed.tensor) runs as one call
per rank on that rank's shards (python/sharding.py, registered with DTensor's register_sharding).

    sharding:
      heads:                                              # a strategy's name, for docs and tests
        when: metadata is None                            # offered only then (default: always)
        inputs: {q: "1 if layout_q != 'BSND' else 2", sinks: 0}  # tensor argument -> its split axis
        outputs: {attn_out: 2, softmax_lse: None}         # every Tensor return: axis, None, partial

An input not listed is whole on every rank (Replicate); an output's axis is where the ranks'
outputs join, ``None`` means every rank computes the whole output (Replicate), ``partial`` that
the ranks' outputs add up to it (Partial: a weight's gradient over a split batch). Axes are
vmap's axis rules over the arguments. Every op also runs with every tensor whole on each rank, so
a strategy is only needed where that would waste the mesh. DTensor combines the strategies over
a mesh's dimensions; a combination is kept only where every axis it splits divides evenly by the
ranks splitting it (python/op_plugin/_sharding.py)."""
from __future__ import annotations

from typing import Any

from codegen import expr as E
from codegen.model import Axis, Location, ShardingStrategy
from codegen.parse_common import Errors, keys_of, known_keys_only, line_of, see
from codegen.parse_vmap import parse_axis, parse_condition

STRATEGY_KEYS = {"when", "inputs", "outputs"}
PARTIAL = "partial"


def parse_sharding(e: dict[str, Any], op: str, func: Any, path: str, errors: Errors) -> tuple[ShardingStrategy, ...]:
    if "sharding" not in e:
        return ()
    spec, line = e["sharding"], line_of(e, "sharding")
    if not isinstance(spec, dict) or not keys_of(spec):
        errors.add(line, op, f"'sharding:' maps each strategy's name to {{when, inputs, outputs}}{see('sharding')}")
        return ()
    env = {a.name: E.kind_of_type(a.type) for a in func.arguments.flat_all}
    tensors = [n for n, k in env.items() if E.base(k) == E.TENSOR]
    returns = [r.name or f"result{i}" for i, r in enumerate(func.returns)]
    tensor_returns = [n for n, r in zip(returns, func.returns) if str(r.type) == "Tensor"]
    strategies = []
    for name in keys_of(spec):
        s_line = line_of(spec, name, line)
        strategy = _strategy(name, spec[name], s_line, env, tensors, tensor_returns, op, path, errors)
        if strategy is not None:
            strategies.append(strategy)
    return tuple(strategies)


def _strategy(name: str, spec: Any, line: int, env: dict[str, str], tensors: list[str], tensor_returns: list[str],
              op: str, path: str, errors: Errors) -> ShardingStrategy | None:
    key = f"sharding.{name}"
    if not name.isidentifier() or not isinstance(spec, dict):
        errors.add(line, op, f"{key}: a strategy is `NAME: {{when, inputs, outputs}}` (NAME an identifier)"
                   f"{see('sharding')}")
        return None
    ok = known_keys_only(spec, STRATEGY_KEYS, key, "sharding", line, op, errors)
    when = None
    if "when" in spec:
        w_line = line_of(spec, "when", line)
        with errors.collect(w_line, op):
            when = parse_condition(spec["when"], env, f"{key}.when", w_line)
        ok = ok and when is not None
    inputs = _table(spec, "inputs", key, tensors, "a tensor argument", env, op, line, errors, partial=False)
    outputs = _table(spec, "outputs", key, tensor_returns, "a Tensor return", env, op, line, errors, partial=True)
    if inputs is None or outputs is None:
        return None
    if not inputs:
        errors.add(line_of(spec, "inputs", line), op, f"{key}.inputs: no tensor is split (every op already runs "
                   "with every tensor whole on each rank)")
        ok = False
    missing = [n for n in tensor_returns if n not in dict(outputs)]
    if missing:
        errors.add(line_of(spec, "outputs", line), op, f"{key}.outputs: nothing for {', '.join(missing)} (write "
                   f"None for an output each rank computes whole, {PARTIAL} for one the ranks' outputs add up to)")
        ok = False
    if not ok:
        return None
    return ShardingStrategy(name, when, tuple((n, a) for n, a in inputs),
                            tuple((n, a) for n, a in outputs if a is not None),
                            tuple(n for n, a in outputs if a is None), Location(path, line))


def _table(spec: dict[str, Any], table_key: str, key: str, allowed: list[str], what: str, env: dict[str, str],
           op: str, line: int, errors: Errors, partial: bool) -> list[tuple[str, Axis | None]] | None:
    """``{name: axis rule}``; with ``partial``, the value ``partial`` gives (name, None)."""
    table, t_line = spec.get(table_key), line_of(spec, table_key, line)
    if not isinstance(table, dict):
        errors.add(t_line, op, f"{key}.{table_key} must map each {what[2:]} to its split axis{see('sharding')}")
        return None
    out: list[tuple[str, Axis | None]] = []
    for name in keys_of(table):
        n_line = line_of(table, name, t_line)
        if name not in allowed:
            errors.add(n_line, op, f"{key}.{table_key}: {name!r} is not {what} of {op} ({', '.join(allowed)})")
            continue
        if partial and table[name] == PARTIAL:
            out.append((name, None))
            continue
        with errors.collect(n_line, op):
            out.append((name, parse_axis(table[name], env, f"{key}.{table_key}.{name}", n_line)))
    return out if len(out) == len(keys_of(table)) else None
