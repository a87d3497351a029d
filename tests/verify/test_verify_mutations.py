"""Mutation tests: each small corruption of a correct algorithm is rejected, with the right kind."""

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.algorithms import allpairs_allreduce, direct_alltoall, ring_allreduce, ring_allreduce_split, tree_broadcast
from arborcc.verify.semantics import OPS
from arborcc.ir.model import Dependency
from arborcc.verify import verify_algorithm


def kinds(algo):
    report = verify_algorithm(algo)
    assert not report.ok
    return {v.kind for v in report.violations}, report


def mutate(build):
    """A private copy: the builders share equal Step objects, mutations must not."""
    algo = copy.deepcopy(build())
    for prog in algo.ranks:
        for tb in prog.threadblocks:
            tb.steps = [copy.copy(s) for s in tb.steps]
    return algo


def test_drop_a_communication_step():
    algo = mutate(lambda: ring_allreduce(4))
    del algo.ranks[1].threadblocks[0].steps[3]  # the rrcs
    found, _ = kinds(algo)
    assert "connection" in found and "deadlock" in found


def test_drop_a_local_copy():
    algo = mutate(lambda: direct_alltoall(3))
    del algo.ranks[0].threadblocks[0].steps[0]
    found, report = kinds(algo)
    assert found == {"postcondition"}
    assert report.violations[0].rank == 0 and "never written" in report.violations[0].message


def test_swap_a_peer():
    algo = mutate(lambda: ring_allreduce(4))
    algo.ranks[2].threadblocks[0].send = 0
    found, _ = kinds(algo)
    assert "connection" in found


def test_change_an_offset():
    algo = mutate(lambda: ring_allreduce(4))
    algo.ranks[1].threadblocks[0].steps[0].src_off = 2  # sends chunk 2 where chunk 1 belongs
    found, report = kinds(algo)
    assert found == {"postcondition"}
    assert "misses chunk 1 of ranks {1}" in report.violations[0].message


def test_change_a_receive_offset():
    algo = mutate(lambda: ring_allreduce(4))
    algo.ranks[3].threadblocks[0].steps[-1].dst_off = 0  # the last receive lands on the wrong chunk
    found, _ = kinds(algo)
    assert "postcondition" in found


def test_remove_a_dependency_gives_a_race():
    algo = mutate(lambda: tree_broadcast(4, 2))
    algo.ranks[0].threadblocks[1].steps[0].dep = None  # send before the root's copy is known done
    found, report = kinds(algo)
    assert "race" in found
    race = next(v for v in report.violations if v.kind == "race")
    assert (race.rank, race.tb, race.step) == (0, 1, 0)


def test_remove_a_dependency_of_the_reduction():
    algo = mutate(lambda: allpairs_allreduce(4))
    red = algo.ranks[2].threadblocks[-1]
    first_re = next(i for i, s in enumerate(red.steps) if s.op.value == "re")
    red.steps[first_re].dep = None  # reduce before the last peer's chunk is known received
    found, _ = kinds(algo)
    assert "race" in found


def test_reorder_two_sends():
    algo = mutate(lambda: ring_allreduce(4))
    steps = algo.ranks[1].threadblocks[0].steps
    steps[1], steps[2] = steps[2], steps[1]
    found, _ = kinds(algo)
    assert found == {"postcondition"}


def test_reorder_receive_before_send_everywhere_deadlocks():
    algo = mutate(lambda: ring_allreduce(3))
    for prog in algo.ranks:
        steps = prog.threadblocks[0].steps
        steps[0], steps[1] = steps[1], steps[0]
    found, report = kinds(algo)
    assert "deadlock" in found
    assert "cycle" in report.violations[0].message


def test_duplicate_a_reduce():
    algo = mutate(lambda: allpairs_allreduce(4))
    red_id = len(algo.ranks[1].threadblocks) - 1
    red = algo.ranks[1].threadblocks[red_id]
    first_re = next(i for i, s in enumerate(red.steps) if s.op.value == "re")
    dup = copy.deepcopy(red.steps[first_re])
    dup.dep = None
    red.steps.insert(first_re + 1, dup)
    for tb in algo.ranks[1].threadblocks[:red_id]:  # keep the waits on the last reduction valid
        for step in tb.steps:
            if step.dep is not None and step.dep.tb == red_id:
                step.dep = Dependency(red_id, step.dep.step + 1)
    found, report = kinds(algo)
    assert found == {"postcondition"}
    assert "more than once" in report.violations[0].message


def test_duplicate_a_receive_reduce_breaks_the_connection():
    algo = mutate(lambda: ring_allreduce(4))
    steps = algo.ranks[2].threadblocks[0].steps
    steps.insert(2, copy.deepcopy(steps[1]))
    found, _ = kinds(algo)
    assert "connection" in found


@pytest.mark.parametrize("rank", [0, 1])
def test_drop_the_signal_a_dependency_waits_for(rank):
    algo = mutate(lambda: tree_broadcast(5, 2))
    algo.ranks[rank].threadblocks[0].steps[1].has_dep = False
    found, _ = kinds(algo)
    assert "dependency" in found


def test_split_ring_without_the_wait_for_the_receive_races():
    algo = mutate(lambda: ring_allreduce_split(5))
    algo.ranks[3].threadblocks[1].steps[2].dep = None  # forward a partial before it was received
    found, _ = kinds(algo)
    assert "race" in found


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_used_offset_changed_in_a_ring_is_rejected(data):
    """Every offset a ring all-reduce uses matters: changing any one must be caught."""
    n = data.draw(st.integers(2, 6), label="ranks")
    algo = mutate(lambda: ring_allreduce(n))
    r = data.draw(st.integers(0, n - 1), label="rank")
    steps = algo.ranks[r].threadblocks[0].steps
    i = data.draw(st.integers(0, len(steps) - 1), label="step")
    info = OPS[steps[i].op]
    field = data.draw(st.sampled_from([f for f, used in (("src_off", info.reads_src), ("dst_off", info.writes_dst)) if used]))
    old = getattr(steps[i], field)
    setattr(steps[i], field, data.draw(st.integers(0, n - 1).filter(lambda v: v != old), label="new offset"))
    assert not verify_algorithm(algo).ok
