"""Synthesis stops its solvers on budgets (rounds, oracle calls, simplex iterations,
branch-and-bound nodes), never on a clock: the same input gives the same trees and
bounds on any machine at any load. The clock here runs a thousand seconds per reading
(a machine as slow as it gets); every answer must equal the one under the real clock."""

from __future__ import annotations

import itertools
import time

import pytest
from test_bounds import dgx1, star

from arborcc.errors import SolverLimitError, SynthesisError
from arborcc.synth.bounds import allgather_bound, allreduce_bound, alltoall_bound, tree_allreduce_split
from arborcc.synth.flowgraph import flow_graph
from arborcc.synth.packing import pack_allgather, pack_broadcast, pack_reduce, pack_reducescatter
from arborcc.topology.machines import build_machine


@pytest.fixture
def crawling_clock(monkeypatch):
    """Every clock reading is 1,000 s after the previous one."""
    ticks = itertools.count()

    def reading() -> float:
        return 1000.0 * next(ticks)

    for name in ("perf_counter", "monotonic", "process_time"):
        monkeypatch.setattr(time, name, reading)


def trees(packing) -> tuple:
    return packing.rate, tuple((t.root, t.hops, t.weight) for t in packing.trees)


PACKINGS = {
    # the tree-count program (and its node limit) on a whole machine
    "dgx-a100 broadcast": lambda: pack_broadcast(build_machine("dgx-a100"), 0, threshold=0.005),
    "dgx-a100 reduce": lambda: pack_reduce(build_machine("dgx-a100"), 0, threshold=0.005),
    # relays and the integral dive, column generation per root, multiplicative weights
    "dgx1 broadcast": lambda: pack_broadcast(dgx1(), 0),
    "dgx1 allgather": lambda: pack_allgather(dgx1()),
    "star reducescatter fewest trees": lambda: pack_reducescatter(star(8), minimize_trees=True),
    "dgx1 broadcast mwu": lambda: pack_broadcast(dgx1(), 0, "nvlink", method="mwu"),
}


@pytest.mark.parametrize("case", PACKINGS)
def test_packing_is_the_same_under_a_crawling_clock(case, request):
    quiet = trees(PACKINGS[case]())
    request.getfixturevalue("crawling_clock")
    assert trees(PACKINGS[case]()) == quiet


def test_bounds_are_the_same_under_a_crawling_clock(request):
    t = dgx1()
    quiet = (allgather_bound(t).rate, allreduce_bound(t).tree_rates, alltoall_bound(star(4)).rate)
    request.getfixturevalue("crawling_clock")
    assert (allgather_bound(t).rate, allreduce_bound(t).tree_rates, alltoall_bound(star(4)).rate) == quiet


def test_round_budget_raises_or_returns_partial():
    t = dgx1()
    with pytest.raises(SolverLimitError, match="within 1 oracle calls"):
        pack_broadcast(t, 0, "all", method="mwu", max_rounds=1)
    p = pack_broadcast(t, 0, "all", method="mwu", max_rounds=1, allow_partial=True)
    assert p.limit_hit
    assert p.rate < p.bound.rate
    with pytest.raises(SolverLimitError, match="within 1 rounds of column generation"):
        pack_broadcast(t, 0, max_rounds=1)
    # the budget is a count: the same partial packing every time
    assert trees(pack_broadcast(t, 0, max_rounds=1, allow_partial=True)) == trees(
        pack_broadcast(t, 0, max_rounds=1, allow_partial=True))


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_round_budget_must_be_a_positive_integer(bad):
    with pytest.raises(SynthesisError, match="max_rounds must be a positive integer"):
        pack_broadcast(star(4), 0, max_rounds=bad)


def test_tree_allreduce_split_stops_after_its_rounds():
    g = flow_graph(dgx1())
    with pytest.raises(SolverLimitError, match="after 1 rounds"):
        tree_allreduce_split(g, int(g.ranks[0]), max_rounds=1)
