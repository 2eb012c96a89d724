"""Codegen tests: pure Python, no compiled extension.

Puts the repository root on sys.path (so ``import codegen`` works from a plain checkout) and adds
``--update-golden`` (or ``OP_PLUGIN_UPDATE_GOLDEN=1``), which rewrites tests/codegen/golden/ from
the current generator instead of comparing against it (and fails, so that a run with the switch
left on never passes):

    python -m pytest tests/codegen --update-golden
"""
from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite tests/codegen/golden/ from the current generator")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    option = bool(request.config.getoption("--update-golden", default=False))
    return option or os.environ.get("OP_PLUGIN_UPDATE_GOLDEN") == "1"
