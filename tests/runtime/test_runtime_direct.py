"""The built-in direct algorithms verify and match the numpy reference executor for every
collective, rank count, root and mode."""

from __future__ import annotations

import pytest

from arborcc.library.direct import DIRECT_COLLECTIVES, owner_allreduce
from arborcc.runtime.direct import direct_algorithm
from support.execution import assert_executes
from arborcc.verify import verify_algorithm

CASES = [(c, n, ip, root) for c in DIRECT_COLLECTIVES for n in (1, 2, 3, 5, 8) for ip in (False, True)
         for root in ({0, n - 1} if c in ("broadcast", "reduce", "gather", "scatter") else {0})]


@pytest.mark.parametrize("collective, n, inplace, root", CASES)
def test_direct_algorithm(collective, n, inplace, root):
    algo = direct_algorithm(collective, n, inplace, root)
    assert (algo.inplace, algo.outofplace) == (inplace, not inplace)
    assert verify_algorithm(algo).ok
    assert_executes(algo, elems=2)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("inplace", [False, True])
def test_owner_allreduce(n, inplace):
    algo = owner_allreduce(n, inplace)
    assert verify_algorithm(algo).ok
    assert_executes(algo, elems=2)
    # one thread block per peer, four steps each: every byte moves once
    expected = n - 1 if n > 1 else (0 if inplace else 1)  # alone: nothing, or one copy
    assert all(len(p.threadblocks) == expected for p in algo.ranks)
