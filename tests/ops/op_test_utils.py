"""Shared checks of the op tests: error budgets against PyTorch, fake-vs-eager, determinism."""
from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

LOW_PRECISION = (torch.float16, torch.bfloat16)
ALL_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def assert_within_budget(ours: torch.Tensor, torch_same_dtype: torch.Tensor, reference64: torch.Tensor,
                         name: str = "output", scale_floor: float = 1.0,
                         computed_in: torch.dtype | None = None, summed: int = 0) -> None:
    """op_plugin's error is at most 2x the error of the same-dtype PyTorch computation.

    Both are measured against a float64 reference. A floor of four ulps of the dtype at the
    output's scale (at least ``scale_floor``) keeps a near-exact PyTorch result from demanding
    more than exactness up to summation order; the ulps are those of the output's dtype or of
    ``computed_in`` (the inputs' dtype of a float32 statistic or gradient), whichever is coarser,
    plus sqrt(``summed``) float32 ulps for an output that sums that many cancelling terms (two
    valid summation orders differ by about that much).
    Where the same-dtype computation overflows (float16 inv_norm**3 of a tiny row) and the
    reference does not, only the floor is left. float64 outputs have no higher-precision
    reference: they must agree with it to 1e-10.
    """
    ref = reference64.double()
    if ours.dtype == torch.float64:  # no higher-precision reference: agree to summation order
        torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12, msg=lambda m: f"{name}: {m}")
        return
    our_err = (ours.double() - ref).abs().max().item() if ref.numel() else 0.0
    torch_err = (torch_same_dtype.double() - ref).abs().max().item() if ref.numel() else 0.0
    if not math.isfinite(torch_err):
        torch_err = 0.0
    scale = ref.abs().max().item() if ref.numel() else 0.0
    eps = max(torch.finfo(ours.dtype).eps, torch.finfo(computed_in or ours.dtype).eps)
    ulp = 4 * (eps + math.sqrt(summed) * torch.finfo(torch.float32).eps) * max(scale, scale_floor)
    budget = 2 * torch_err + ulp
    assert our_err <= budget, (f"{name}: error {our_err:.3g} exceeds 2x PyTorch's same-dtype error "
                               f"{torch_err:.3g} (+4 ulps {ulp:.3g})")


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
