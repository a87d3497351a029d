"""Runtime tests: multi-process, every wait bounded; the rank pools live for the session."""

import pytest

from support.rankpool import RankPool


@pytest.fixture(scope="session")
def pools():
    """``pools(n, **options)``: a pool of n rank processes whose communicators have these
    runtime options, created on first use."""
    made: dict[tuple, RankPool] = {}

    def get(n: int, **options) -> RankPool:
        key = (n, tuple(sorted(options.items())))
        if key not in made:
            made[key] = RankPool(n, **options)
        return made[key]

    yield get
    for pool in made.values():
        pool.close()
