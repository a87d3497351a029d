"""The verifier accepts correct algorithms (and the numeric interpreter agrees they are)."""

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.algorithms import (
    allpairs_allreduce,
    chain_broadcast,
    direct_alltoall,
    ring_allgather,
    ring_allreduce,
    ring_allreduce_split,
    ring_reducescatter,
    tree_broadcast,
)
from support.execution import assert_executes
from arborcc.errors import VerificationError
from arborcc.verify import check_algorithm, verify_algorithm

CORRECT = [
    ("ring_allreduce_2", lambda: ring_allreduce(2)),
    ("ring_allreduce_5", lambda: ring_allreduce(5)),
    ("ring_allreduce_4x3ch", lambda: ring_allreduce(4, channels=3)),
    ("ring_allgather_6x2ch", lambda: ring_allgather(6, channels=2)),
    ("ring_reducescatter_5x2ch", lambda: ring_reducescatter(5, channels=2)),
    ("tree_broadcast_9_root3", lambda: tree_broadcast(9, chunks=3, root=3)),
    ("tree_broadcast_10_arity3", lambda: tree_broadcast(10, chunks=2, arity=3)),
    ("chain_broadcast_5", lambda: chain_broadcast(5, chunks=4, root=4)),
    ("direct_alltoall_5x2", lambda: direct_alltoall(5, per_peer=2)),
    ("allpairs_allreduce_5", lambda: allpairs_allreduce(5)),
    ("ring_allreduce_split_6", lambda: ring_allreduce_split(6)),
]


@pytest.mark.parametrize("name,build", CORRECT, ids=[c[0] for c in CORRECT])
def test_correct_algorithms_verify(name, build):
    algo = build()
    assert_executes(algo)  # independent evidence that the builder is right
    report = verify_algorithm(algo)
    assert report.ok, [str(v) for v in report.violations]
    assert report.postcondition_checked
    assert report.violations == []
    check_algorithm(algo)  # does not raise


@pytest.mark.parametrize("build", [lambda: ring_allreduce(4, inplace=True), lambda: ring_allgather(5, 2, inplace=True)])
def test_in_place_algorithms_verify_with_aliasing(build):
    algo = build()
    assert_executes(algo)
    report = verify_algorithm(algo)
    assert report.ok, [str(v) for v in report.violations]
    assert any("in-place call" in n for n in report.notes)


def test_in_place_only_algorithm_fails_when_also_declared_out_of_place():
    algo = ring_allreduce(4, inplace=True)
    algo.outofplace = True  # out-of-place, 'o' starts empty: the ring reads garbage
    report = verify_algorithm(algo)
    assert not report.ok
    assert all(v.message.startswith("out-of-place call: ") for v in report.violations)
    assert {v.kind for v in report.violations} >= {"uninitialized", "postcondition"}


def test_custom_collective_checks_structure_only():
    algo = ring_allreduce(3)
    algo.collective = "custom"
    report = verify_algorithm(algo)
    assert report.ok and not report.postcondition_checked
    assert any("no postcondition" in n for n in report.notes)


def test_a_wrong_custom_algorithm_still_fails_structurally():
    algo = copy.deepcopy(ring_allreduce(3))
    algo.collective = "custom"
    algo.ranks[0].threadblocks[0].steps.pop()
    assert not verify_algorithm(algo).ok


def test_check_algorithm_raises_with_the_first_violation():
    algo = copy.deepcopy(ring_allreduce(3))
    algo.ranks[1].threadblocks[0].steps[0] = copy.copy(algo.ranks[1].threadblocks[0].steps[0])
    algo.ranks[1].threadblocks[0].steps[0].src_off = 2
    with pytest.raises(VerificationError) as e:
        check_algorithm(algo)
    assert "rank" in str(e.value) and "\n" not in str(e.value)


def test_large_ring_is_verified_quickly():
    # 64 ranks x 2 channels = 32k steps; the 1024-rank figure is measured outside the suite
    report = verify_algorithm(ring_allreduce(64, channels=2))
    assert report.ok and report.postcondition_checked


def test_report_str_and_dict():
    algo = copy.deepcopy(ring_allreduce(3))
    algo.ranks[2].threadblocks[0].steps[0] = copy.copy(algo.ranks[2].threadblocks[0].steps[0])
    algo.ranks[2].threadblocks[0].steps[0].src_off = 0
    report = verify_algorithm(algo)
    v = report.violations[0]
    assert str(v).startswith(f"rank {v.rank}")
    d = report.to_dict()
    assert d["ok"] is False and d["violations"][0]["kind"] == v.kind
    assert report.summary().startswith("INCORRECT")


def test_order_through_the_whole_ring_is_not_a_race():
    # in the split ring a partial sum is overwritten by the final value; only the ring
    # (other ranks) orders the overwrite after the send that read the partial
    algo = ring_allreduce_split(24)
    report = verify_algorithm(algo)
    assert report.ok, [str(v) for v in report.violations]


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 9), st.integers(1, 3), st.sampled_from(["allreduce", "allgather", "reducescatter"]))
def test_rings_of_any_size_verify(n, channels, which):
    build = {"allreduce": ring_allreduce, "allgather": ring_allgather, "reducescatter": ring_reducescatter}[which]
    algo = build(n, channels)
    assert_executes(algo, seed=n * 10 + channels)
    assert verify_algorithm(algo).ok


def test_modes_tried_alongside_are_claimed_exactly_when_their_own_run_proves_them():
    """``also`` runs further kinds of call in the declared modes' symbolic run: a mode is
    added to the report exactly when verifying it alone succeeds, and the declared
    modes' report is the same as without it (corpus, library and MSCCL samples)."""
    from support.msccl_samples import MSCCL_SAMPLES

    from arborcc.ir.aliasing import Mode, declared_modes
    from arborcc.ir.load import load_algorithm
    from arborcc.library import LIBRARY

    algos = [build() for _, build in CORRECT] + [load_algorithm(p) for p in MSCCL_SAMPLES]
    algos += [LIBRARY["ring-allgather"](ranks=4)[0], LIBRARY["hd-allreduce"](ranks=8)[0]]
    claimed = refused = 0
    for algo in algos:
        declared = declared_modes(algo)
        others = tuple(m for m in Mode if m not in declared)
        alone = verify_algorithm(algo)
        both = verify_algorithm(algo, also=others)
        assert [str(v) for v in both.violations] == [str(v) for v in alone.violations], algo.name
        for m in others:
            proved = verify_algorithm(algo, modes=(m,)).ok and alone.ok
            assert (m.label in both.modes) == proved, (algo.name, m.label)
            claimed += proved
            refused += not proved
    assert claimed and refused  # both outcomes occur in the corpus
