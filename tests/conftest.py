"""Suite-wide order: the packaging tests (wheel builds, compiles, fresh venvs: up to two minutes
each) run first. Under pytest-xdist (ci/test.sh) the short tests then fill the cores around them;
collected last, the long ones ran together at the end of the run."""
from __future__ import annotations


def pytest_collection_modifyitems(items) -> None:
    items.sort(key=lambda item: not item.nodeid.startswith("tests/packaging/"))  # stable: order kept within
