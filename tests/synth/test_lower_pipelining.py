"""Tree programs that pipeline: rounds fitted to the runtimes' steps per thread block,
and NVLink-only trees where the simulator says the all-links trees cannot pipeline."""

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.execution import assert_executes
from support.topologies import nvlink_pcie_box

from arborcc.ir.limits import check_dialect_limits
from arborcc.synth.lower_emit import lower_broadcast
from arborcc.synth.lower_search import PIPELINE_ROUNDS, more_rounds
from arborcc.synth.synthesis import synthesize
from arborcc.topology.allocation import induced
from arborcc.topology.machines import build_machine
from arborcc.verify.pieces import deadlock_free


def _rounds(notes) -> int:
    found = [int(m.group(1)) for n in notes for m in [re.search(r"in (\d+) pipelined transfers", n)] if m]
    return found[0] if found else 1


def _longest(algo) -> int:
    return max(len(tb.steps) for p in algo.ranks for tb in p.threadblocks)


def test_rounds_grow_into_the_step_budget_and_stay_within_the_limits(monkeypatch):
    """DGX A100 reduce-scatter, the trees at full precision (at 64 MiB a coarser candidate
    runs faster): 8 rounds fill 29 of the executor's 64 steps per thread block; the
    lowering raises them (17 rounds, simulated 188 -> 231 GB/s busbw at 1 GiB) and what
    it returns still fits and is free of deadlock."""
    monkeypatch.setattr("arborcc.synth.strategies.trees.PIPELINED_MARGIN", 0.0)
    r = synthesize(build_machine("dgx-a100"), "reducescatter", "trees")
    assert _rounds(r.notes) > PIPELINE_ROUNDS[0], r.notes
    assert not check_dialect_limits(r.algorithm, "executor")
    assert deadlock_free(r.algorithm) and r.report.ok
    assert_executes(r.algorithm, elems=1)


def test_rounds_are_not_raised_past_the_chunks_a_block_has():
    """Trees of one chunk each have one transfer per hop whatever the rounds: the version
    with more rounds has no longer thread block, so the rounds stay where they were."""
    topo = induced(build_machine("dgx1v"), ["gpu0", "gpu1", "gpu2", "gpu3"])
    r = synthesize(topo, "broadcast", "trees", 0)
    trees, counts = r.trees, [1] * len(r.trees)
    fitting = lower_broadcast(topo, trees, counts, "b", rounds=2)
    kept, rounds = more_rounds(lower_broadcast, (topo, trees, counts, "b"), fitting, 2, 0, None, "executor")
    assert kept is fitting and rounds == 2
    assert _longest(kept.algorithm) <= 64


def _packed_rate(notes) -> float:
    """The rate (B/s) of the packing the trees were apportioned from, as their note states it."""
    return float(re.search(r"\(Blink 3\.3\) at ([0-9.]+) GB/s", notes[0]).group(1)) * 1e9


def test_raised_rounds_keep_the_lowering_within_every_dialect():
    topo = induced(build_machine("dgx1v"), ["gpu1", "gpu4", "gpu5", "gpu6"])
    r = synthesize(topo, "allreduce", "trees")
    rounds = _rounds(r.notes)
    assert rounds > PIPELINE_ROUNDS[0]
    assert _longest(r.algorithm) <= 64 and not check_dialect_limits(r.algorithm, "executor")
    # the same trees and chunks: only the transfers are cut finer (the trees on the
    # runtime's routes, below the bound that relays reach, are the faster file here)
    assert r.algbw >= 0.99 * _packed_rate(r.notes)
    assert_executes(r.algorithm, elems=1)


def test_allreduce_takes_the_candidate_that_pipelines_where_the_precise_trees_cannot():
    """DGX A100: the trees apportioned to within 0.5% need 1024 chunks per loop and run the
    loop once at 1 GiB (129.5 GB/s busbw simulated); a candidate that pipelines is taken
    and reaches at least 85% of the rate the calibrated links allow (239 of 264 GB/s)."""
    from arborcc.sim.bandwidth import attainable_algbw, steady_state_bandwidth
    from arborcc.sim.fidelity import fidelity_for
    from arborcc.sim.simulate import simulate

    dgx = build_machine("dgx-a100")
    r = synthesize(dgx, "allreduce", "trees")
    assert any("faster than the trees at full precision" in n for n in r.notes), r.notes
    assert r.algorithm.chunks_per_loop < 1024 and 0.9 < r.ratio <= 1 + 1e-9
    assert r.report.ok and not check_dialect_limits(r.algorithm, "executor") and deadlock_free(r.algorithm)
    rate = attainable_algbw(steady_state_bandwidth(r.algorithm, dgx, r.routes), dgx, fidelity_for(dgx).efficiency)
    assert simulate(r.algorithm, dgx, 1 << 30, "Simple", routes=r.routes).algbw >= 0.85 * rate
    assert_executes(r.algorithm, elems=1)


def as_written(algo, topology, size=64 << 20) -> float:
    """The time of ``algo``'s file at ``size``: no routes, its fastest protocol (what the
    trees' choice among candidates goes by, and what synth reports)."""
    from arborcc.sim.protocol_choice import protocol_sweep

    return protocol_sweep(algo, topology, [size])[0].time


def test_dgx1v_allreduce_takes_the_candidate_whose_file_is_fastest(dgx1v_allreduce_trees,
                                                                   dgx1v_allreduce_trees_precise):
    """DGX-1V, 8 GPUs: the trees at full precision need a loop too long to pipeline; the
    candidate taken is the one whose file (no routes: the runtime takes each pair's own
    link) runs fastest, faster than the precise trees' file, and it is cut
    into rounds, verifies and computes the sum."""
    dgx = build_machine("dgx1v")
    r = dgx1v_allreduce_trees
    assert any("faster than the trees at full precision" in n for n in r.notes), r.notes
    assert _rounds(r.notes) >= PIPELINE_ROUNDS[0]
    precise = dgx1v_allreduce_trees_precise  # PIPELINED_MARGIN 0: the trees at full precision
    assert as_written(r.algorithm, dgx) < as_written(precise.algorithm, dgx)
    assert r.report.ok and deadlock_free(r.algorithm)
    assert_executes(r.algorithm, elems=1)


def test_no_candidate_is_tried_where_the_loop_pipelines():
    """DGX-1V GPUs 1,4,5,6: 512 chunks per loop, so a 1 GiB call runs the loop twice:
    the trees at full precision stay (and reach their packing's rate)."""
    topo = induced(build_machine("dgx1v"), ["gpu1", "gpu4", "gpu5", "gpu6"])
    r = synthesize(topo, "allreduce", "trees")
    assert r.algorithm.chunks_per_loop == 512
    assert not any("full precision" in n for n in r.notes)
    assert r.algbw >= 0.99 * _packed_rate(r.notes)


@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 48), min_size=1, max_size=4), st.sampled_from([1, 2, 8]))
def test_raised_rounds_of_any_counts_fit_and_compute_the_broadcast(counts, rounds):
    """Whatever the trees' counts and the starting rounds, the version more_rounds returns
    fits the executor's limits, is free of deadlock and broadcasts what the root holds."""
    topo = induced(build_machine("dgx1v"), ["gpu0", "gpu1", "gpu2", "gpu3"])
    trees = list(broadcast_trees(topo))[:len(counts)]
    counts = counts[:len(trees)]
    fitting = lower_broadcast(topo, trees, counts, "b", rounds=rounds)
    if check_dialect_limits(fitting.algorithm, "executor") or not deadlock_free(fitting.algorithm):
        return  # more_rounds starts from a version that fits
    kept, more = more_rounds(lower_broadcast, (topo, trees, counts, "b"), fitting, rounds, 0, None, "executor")
    assert more >= rounds
    assert not check_dialect_limits(kept.algorithm, "executor") and deadlock_free(kept.algorithm)
    assert_executes(kept.algorithm, elems=1)


def broadcast_trees(topo, kept={}):
    """The broadcast trees of ``topo`` (synthesized once per test session)."""
    if "trees" not in kept:
        kept["trees"] = synthesize(topo, "broadcast", "trees", 0).trees
    return kept["trees"]


@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(nvlink_pcie_box(5, 6))
def test_a_candidate_taken_is_correct_and_simulates_faster_than_the_precise_trees(t):
    """On any NVLink + PCIe box the all-reduce returned verifies and computes the sum,
    and where it is a candidate (a note says so) it simulates faster at
    64 MiB than the trees at full precision, both as their files run."""
    r = synthesize(t, "allreduce", "trees")
    assert r.report.ok and deadlock_free(r.algorithm)
    assert_executes(r.algorithm, elems=1)
    if any("full precision" in n for n in r.notes):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("arborcc.synth.strategies.trees.PIPELINED_MARGIN", 0.0)
            precise = synthesize(t, "allreduce", "trees")
        assert as_written(r.algorithm, t) < as_written(precise.algorithm, t)
