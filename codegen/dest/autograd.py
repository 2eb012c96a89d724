"""python/autograd.py: register_autograd for every forward with an 'autograd:' pairing."""
from __future__ import annotations

from typing import Any

from codegen import expr as E
from codegen.file_manager import FileManager
from codegen.model import OpEntry, Registry


def _outputs(op: OpEntry) -> list[str]:
    return [r.name or f"result{i}" for i, r in enumerate(op.func.returns)]


def _pair_context(op: OpEntry, backward: OpEntry) -> dict[str, Any]:
    pair = op.autograd
    assert pair is not None
    kinds = {a.name: E.kind_of_type(a.type) for a in op.registered_func.arguments.flat_all}
    kinds.update({name: E.TENSOR for name in _outputs(op)})
    saved = [src.name for src in pair.saved_tensors()]
    saved_tensors = [n for n in dict.fromkeys(saved) if E.base(kinds[n]) == E.TENSOR]
    saved_values = [n for n in dict.fromkeys(saved) if E.base(kinds[n]) != E.TENSOR]
    call_args = []
    for bwd_arg, src in pair.inputs:
        if src.source == "grad":
            call_args.append((bwd_arg, f"grad_{src.name}"))
        elif src.name in saved_tensors:
            call_args.append((bwd_arg, src.name))
        else:
            call_args.append((bwd_arg, f"ctx.{src.name}"))
    bwd_outputs = _outputs(backward)
    grads = dict(pair.grads)
    returns = []
    for a in op.registered_func.arguments.flat_all:
        out = grads.get(a.name)
        returns.append(f"grads[{bwd_outputs.index(out)}]" if out is not None else "None")
    return {
        "forward": op.name,
        "backward": backward.name,
        "loc": pair.loc,
        "input_names": [a.name for a in op.registered_func.arguments.flat_all],
        "output_names": _outputs(op),
        "saved_tensors": saved_tensors,
        "saved_values": saved_values,
        "non_differentiable": list(pair.non_differentiable),
        "grad_params": [f"grad_{n}" for n in _outputs(op)],
        "grad_outputs": list(dict.fromkeys(src.name for _, src in pair.inputs if src.source == "grad")),
        "call_args": call_args,
        "single_output": len(bwd_outputs) == 1,  # the op returns a Tensor, not a tuple
        "returns": "(" + ", ".join(returns) + ("," if len(returns) == 1 else "") + ")",
    }


def emit(registry: Registry, fm: FileManager) -> None:
    pairs = [_pair_context(op, registry.op(op.autograd.backward)) for op in registry.ops if op.autograd]
    fm.write("python/autograd.py", "autograd.py.j2", registry.source, pairs=pairs)
