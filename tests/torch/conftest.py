"""torch tests: skipped, with the reason shown, when torch is not installed; every job
runs local ranks in a subprocess with a hard timeout, and /dev/shm is compared before
and after each test."""

import os
import sys
from pathlib import Path

import pytest

HERE = str(Path(__file__).parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from support.segments import leftovers, segments  # noqa: E402


@pytest.fixture(autouse=True)
def shm_unchanged():
    before = segments()
    yield
    assert leftovers(before) == set(), "an arborcc shared-memory segment was left in /dev/shm"


def pytest_collection_modifyitems(config, items):
    try:
        import torch  # noqa: F401
    except ImportError:
        skip = pytest.mark.skip(reason="torch is not installed (pip install 'arborcc[torch]')")
        for item in items:  # the in-process unit tests skip their torch parts themselves
            if item.path.is_relative_to(Path(HERE)) and item.path.name != "test_torch_units.py":
                item.add_marker(skip)
