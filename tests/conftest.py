"""Test-wide settings: property tests are derandomized under CI (CI=true), so a CI run
is repeatable; locally they keep exploring new examples. The cyclic collector runs as in
the arborcc command (:func:`arborcc.collector.collect_less_often`)."""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

# the suite's processes collect cyclic garbage as the arborcc command does
from arborcc.collector import collect_less_often  # noqa: E402

collect_less_often()


# --- running the suite in parallel (``make test``: pytest -n auto) ---------------------
#
# Test modules that look at /dev/shm - compare it before and after
# (tests/support/segments.py), plant segments of dead processes there, kill ranks - run on
# one worker, one after another: a segment another worker's test planted, or of a rank it
# just killed, would otherwise look like this test's leftover. Every other test, ranks
# included, runs wherever a worker is free. (pytest-xdist's own ``xdist_group`` marks
# rename test ids, which pytest 9.2 ignores; a scheduler that groups by module is stable.)

import functools  # noqa: E402
from pathlib import Path  # noqa: E402

#: what a test module that looks at /dev/shm says in its source (or its folder's conftest)
SHARED_MEMORY_WORDS = ("/dev/shm", "SEGMENT_PREFIX", "leftovers(")
SHARED_MEMORY_SCOPE = "shared-memory"


@functools.cache
def looks_at_shared_memory(path: Path) -> bool:
    """Whether the test module at ``path`` (or its folder's conftest) looks at /dev/shm."""
    return any(p.is_file() and any(w in p.read_text() for w in SHARED_MEMORY_WORDS)
               for p in (path, path.parent / "conftest.py"))


#: the module whose tests are the steps of the docs, ``...[docs/torch.md:25:command:...]``
DOC_STEPS_MODULE = "tests/docs/test_documented_commands.py"


def doc_of_step(nodeid: str) -> str | None:
    """The doc whose step the test ``nodeid`` runs, or None for any other test."""
    module, _, rest = nodeid.partition("::")
    if module != DOC_STEPS_MODULE or "[" not in rest:
        return None
    return rest.split("[", 1)[1].split(":", 1)[0]


def pytest_xdist_make_scheduler(config, log):
    """Under ``-n``: each test its own unit of work, except the modules that look at
    /dev/shm, which are one unit (see above), handed out first since it is the longest,
    and the steps of one doc, one unit each: a step runs its doc's earlier steps first
    (tests/docs), so a doc's steps spread over workers would run them once per worker."""
    from xdist.scheduler import LoadScopeScheduling

    class SharedMemoryTestsInTurn(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            if looks_at_shared_memory(config.rootpath / module):
                return SHARED_MEMORY_SCOPE
            doc = doc_of_step(nodeid)
            return f"{DOC_STEPS_MODULE}::{doc}" if doc is not None else nodeid

    return SharedMemoryTestsInTurn(config, log)
