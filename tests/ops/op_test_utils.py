"""Shared checks of the op tests: error budgets against PyTorch, fake-vs-eager, determinism."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

# The error budget is op_plugin.testing's, the one the registry's generated tests use.
from op_plugin.testing import assert_within_budget  # noqa: F401

LOW_PRECISION = (torch.float16, torch.bfloat16)
ALL_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def fake_shapes(op: Callable[..., object], *args: object, **kwargs: object) -> list[object]:
    """Output shapes and dtypes of ``op`` under FakeTensorMode for the same (real) arguments."""
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        fake_args = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
        fake_kwargs = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        out = op(*fake_args, **fake_kwargs)
    return eager_shapes(out)


def eager_shapes(out: object) -> list[object]:
    """(shape, dtype) of each tensor output; int outputs as they are."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [(o.shape, o.dtype) if isinstance(o, torch.Tensor) else o for o in outs]


def raises_same_in_eager_and_fake(op: Callable[..., object], args: Sequence[object], match: str) -> None:
    """The call fails with ``match`` in its message, in eager mode and in fake mode alike."""
    import pytest

    with pytest.raises(RuntimeError, match=match):
        op(*args)
    with FakeTensorMode() as mode:
        fake_args = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
        with pytest.raises(RuntimeError, match=match):
            op(*fake_args)


@contextlib.contextmanager
def num_threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def copies_made(fn: Callable[[], object]) -> set[str]:
    """The copy ops (contiguous, clone, copy_) a call of fn dispatches, from a profile of it: a
    binding that passes its strided: inputs as they are makes none."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return {e.name for e in prof.events()} & {"aten::contiguous", "aten::clone", "aten::copy_"}
