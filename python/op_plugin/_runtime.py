"""What the generated Python (fakes, wrappers) shares with the C++ bindings' rules."""
from __future__ import annotations

import enum
from collections.abc import Sequence

import torch

_DTYPE_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32",
                torch.float64: "float64", torch.int8: "int8", torch.uint8: "uint8", torch.int32: "int32",
                torch.int64: "int64", torch.bool: "bool"}


def _fmt(value: object) -> str:
    """Values in error messages, printed like op_plugin::fmt in csrc/bindings/torch_glue.h."""
    if isinstance(value, torch.dtype):
        return _DTYPE_NAMES.get(value, str(value))
    if isinstance(value, torch.Size):
        return str(list(value))
    return str(value)


def _stats_dtype(t: torch.Tensor) -> torch.dtype:
    """Statistics outputs are float32, float64 for float64 inputs (SPEC Decision 2)."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _same_device(op: str, **tensors: torch.Tensor | None) -> None:
    """Every tensor argument on one device. The dispatcher sends a call that mixes meta and CPU
    tensors to the fake (Meta outranks CPU), which would otherwise answer it with meta outputs."""
    first: tuple[str, torch.device] | None = None
    for name, t in tensors.items():
        if t is None:
            continue
        if first is None:
            first = (name, t.device)
            continue
        torch._check(t.device == first[1], lambda: (f"{op}: {name} is on {t.device} but {first[0]} is on "
                                                    f"{first[1]}; all tensor arguments must be on one device"))


def _enum_arg(enum_type: type[enum.IntEnum], value: object, op: str, arg: str) -> object:
    """A wrapper's enum argument as the int the registered op takes: a member of ``enum_type``
    or its name in any case (``"causal"``); other ints as plain ints. Anything else (None for an
    optional argument, a float) goes on unchanged, for the op's own argument parsing to judge."""
    if isinstance(value, str):
        member = enum_type.__members__.get(value.upper())
        if member is None:
            listing = ", ".join(f"{m.name} = {m.value}" for m in enum_type)
            raise ValueError(f"{op}: {arg} must be a {enum_type.__name__} ({listing}), its int value or its name "
                             f"in any case, but got {value!r}")
        return int(member)
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    return value


def _upper(s: str) -> str:
    return s.upper()


def strict_mode() -> bool:
    """Whether device-compat limits are enforced; one flag, kept by the C++ extension."""
    from op_plugin import _C

    return bool(_C.strict_mode())


def _varlen_batches(cumulative: Sequence[int]) -> int:
    """The sequences of cumulative lengths without a leading 0 (op_plugin::varlen_batches): a
    trailing run of zeros drops batches ([2, 5, 9, 0, 0] is 3), as the kernel reads them."""
    n = len(cumulative)
    while n > 0 and cumulative[n - 1] == 0:
        n -= 1
    return n


def _varlen_numels(q_cumulative: Sequence[int], kv_cumulative: Sequence[int]) -> int:
    """sum over sequences of Sq*Skv for cumulative lengths without a leading 0, trailing zeros
    dropped (op_plugin::varlen_numels)."""
    batches = min(_varlen_batches(q_cumulative), _varlen_batches(kv_cumulative))
    total, q_prev, kv_prev = 0, 0, 0
    for q, kv in zip(q_cumulative[:batches], kv_cumulative[:batches]):
        total += (q - q_prev) * (kv - kv_prev)
        q_prev, kv_prev = q, kv
    return total
