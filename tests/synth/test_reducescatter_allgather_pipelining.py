"""Reduce-scatter and all-gather on trees pipeline as the halves of the trees all-reduce
do: where the trees at full precision need so many chunks per loop that a large call runs
the loop once, the coarse or NVLink-only candidate the simulator times faster is taken."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.execution import assert_executes
from support.topologies import nvlink_pcie_box

from arborcc.ir.limits import check_dialect_limits
from arborcc.synth.synthesis import synthesize
from arborcc.topology.machines import build_machine
from arborcc.verify.pieces import deadlock_free

FASTER = "faster than the trees at full precision"


def test_dgx2_reducescatter_takes_a_candidate_that_pipelines_and_nears_the_calibrated_rate():
    """DGX-2: the per-root in-trees at full precision need 512 chunks per rank (8192 per
    loop) and simulated 30.7 GB/s busbw at 1 GiB; the candidate taken runs the loop
    many times, computes the reduce-scatter and reaches at least 85% of the rate the
    calibrated links allow for its own schedule."""
    from arborcc.sim.bandwidth import attainable_algbw, steady_state_bandwidth
    from arborcc.sim.fidelity import fidelity_for
    from arborcc.sim.simulate import simulate

    dgx2 = build_machine("dgx2")
    r = synthesize(dgx2, "reducescatter", "trees", size=1 << 30)
    assert any(FASTER in n for n in r.notes), r.notes
    assert r.algorithm.chunks_per_loop <= 256
    assert r.report.ok and not check_dialect_limits(r.algorithm, "executor") and deadlock_free(r.algorithm)
    rate = attainable_algbw(steady_state_bandwidth(r.algorithm, dgx2), dgx2, fidelity_for(dgx2).efficiency)
    assert simulate(r.algorithm, dgx2, 1 << 30, "Simple").algbw >= 0.85 * rate
    assert_executes(r.algorithm, elems=1)


@pytest.mark.parametrize("collective", ["reducescatter", "allgather"])
def test_halves_on_dgx_a100_verify_fit_and_compute(collective, dgx_a100_trees):
    """Whatever version the choice keeps on DGX A100, it is proven, within the executor's
    limits, free of deadlock and computes the collective."""
    r = dgx_a100_trees(collective)
    assert r.report.ok and not check_dialect_limits(r.algorithm, "executor") and deadlock_free(r.algorithm)
    assert_executes(r.algorithm, elems=1)


@settings(max_examples=4, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(nvlink_pcie_box(5, 6), st.sampled_from(["reducescatter", "allgather"]))
def test_a_half_taken_as_a_candidate_is_correct_and_simulates_faster_than_the_precise_trees(t, collective):
    """On any NVLink + PCIe box the reduce-scatter or all-gather returned verifies and
    computes the collective, and where it is a candidate (a note says so) it simulates
    faster at 64 MiB than the trees at full precision (their files as written,
    each with its fastest protocol, as the choice times them)."""
    from arborcc.sim.protocol_choice import protocol_sweep

    r = synthesize(t, collective, "trees")
    assert r.report.ok and deadlock_free(r.algorithm)
    assert_executes(r.algorithm, elems=1)
    if any(FASTER in n for n in r.notes):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("arborcc.synth.strategies.trees.PIPELINED_MARGIN", 0.0)
            precise = synthesize(t, collective, "trees")
        size = 64 << 20
        assert protocol_sweep(r.algorithm, t, [size])[0].time < protocol_sweep(precise.algorithm, t, [size])[0].time
