"""The error budget every op test uses (op_plugin.testing.assert_within_budget)."""
from __future__ import annotations

import pytest
import torch

from op_plugin.testing import assert_within_budget


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_floor_is_four_ulps_of_the_outputs_dtype(dtype: torch.dtype) -> None:
    ref = torch.full((4,), 2.0, dtype=torch.float64)
    exact = ref.to(dtype)  # PyTorch's same-dtype result is exact: only the floor is left
    ulp = torch.finfo(dtype).eps * 2.0
    assert_within_budget(exact + torch.tensor([0, 0, 0, 3 * ulp], dtype=dtype), exact, ref)
    with pytest.raises(AssertionError, match="exceeds 2x PyTorch's same-dtype error"):
        assert_within_budget(exact + torch.tensor([0, 0, 0, 5 * ulp], dtype=dtype), exact, ref)


def test_twice_pytorchs_error_is_allowed_and_more_is_not() -> None:
    ref = torch.zeros(3, dtype=torch.float64)
    same = torch.tensor([0.0, 1e-3, 0.0])
    assert_within_budget(torch.tensor([0.0, 0.0, 1.9e-3]), same, ref, scale_floor=1e-6)
    with pytest.raises(AssertionError):
        assert_within_budget(torch.tensor([0.0, 0.0, 2.1e-3]), same, ref, scale_floor=1e-6)


def test_inf_entries_must_match_and_int_outputs_are_exact() -> None:
    ref = torch.tensor([float("-inf"), 1.0], dtype=torch.float64)
    assert_within_budget(ref.float(), ref.float(), ref)
    with pytest.raises(AssertionError, match="inf entries"):
        assert_within_budget(torch.tensor([-3e38, 1.0]), ref.float(), ref)
    with pytest.raises(AssertionError):
        assert_within_budget(torch.tensor([1, 2]), torch.tensor([1, 2]), torch.tensor([1, 3]))
