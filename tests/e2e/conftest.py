"""tests/e2e run tiny models: one thread each (the tensors are too small to split, and on a loaded
2-core machine two spinning OpenMP threads per step make a 25 ms step take seconds)."""
from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
