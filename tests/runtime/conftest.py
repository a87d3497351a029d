"""Runtime tests: multi-process, every wait bounded; the rank pools live for the session."""

import pytest

from support.rankpool import RankPool


@pytest.fixture(scope="session")
def pools():
    """``pools(n)``: a pool of n rank processes, created on first use."""
    made: dict[int, RankPool] = {}

    def get(n: int) -> RankPool:
        if n not in made:
            made[n] = RankPool(n)
        return made[n]

    yield get
    for pool in made.values():
        pool.close()
