"""torch tests: skipped, with the reason shown, when torch is not installed; every job
runs local ranks in a subprocess with a hard timeout, and /dev/shm is compared before
and after each test."""

import sys
from pathlib import Path

import pytest

HERE = str(Path(__file__).parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from support.segments import leftovers, segments  # noqa: E402
from support.shared_work import once  # noqa: E402
from torchjobs import TWO_RANK_JOB, launch  # noqa: E402


@pytest.fixture(autouse=True)
def shm_unchanged():
    before = segments()
    yield
    assert leftovers(before) == set(), "an arborcc shared-memory segment was left in /dev/shm"


@pytest.fixture
def two_rank_job(tmp_path_factory):
    """:data:`torchjobs.TWO_RANK_JOB`'s (exit status, each rank's reports, the ranks'
    stderr, what it left in /dev/shm): run once in the session, whichever xdist worker
    the tests that read it go to."""
    def run():
        before = segments()
        env = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}  # the import of arborcc.torch registers the backend
        code, said, err = launch(tmp_path_factory.mktemp("two-ranks"), 2, TWO_RANK_JOB, hard_timeout=120, env=env)
        return code, said, err, leftovers(before)

    return once(tmp_path_factory, "torch-two-rank-job", run)


def pytest_collection_modifyitems(config, items):
    try:
        import torch  # noqa: F401
    except ImportError:
        skip = pytest.mark.skip(reason="torch is not installed (pip install 'arborcc[torch]')")
        for item in items:  # the in-process unit tests skip their torch parts themselves
            if item.path.is_relative_to(Path(HERE)) and item.path.name != "test_torch_units.py":
                item.add_marker(skip)
