"""``switch-direct``: on a switch machine, reduce-scatter, all-gather and all-reduce as
direct transfers between every pair of ranks on several thread blocks. Its programs verify in
both call forms within the runtimes' limits and compute what numpy computes; on DGX H100
at 64 MiB its reduce-scatter beats the trees and its all-reduce BlueConnect's stages,
`auto` picks it, and it is within 3% of what the switch ports allow any file (launch and
base latency plus (n-1)/n of the buffer through one port at its calibrated rate, twice
for all-reduce)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arborcc.errors import SynthesisError
from arborcc.ir.aliasing import Mode
from arborcc.ir.limits import EXECUTOR, LEGACY
from arborcc.sim.fidelity import fidelity_for
from arborcc.sim.protocols import PROTOCOL_MODELS
from arborcc.sim.simulate import predict_time
from arborcc.synth.strategies.switch_direct import (
    SWITCH_DIRECT_COLLECTIVES,
    allgather_program,
    allreduce_program,
    lanes_for,
    reducescatter_program,
)
from arborcc.synth.trees import one_switch
from arborcc.synth.synthesis import synthesize
from arborcc.topology.cluster import build_cluster, build_hierarchy, parse_hierarchy
from arborcc.topology.machines import build_machine
from arborcc.verify import verify_algorithm
from tests.support.execution import assert_executes

MIB = 1 << 20
BUILDERS = {"reducescatter": reducescatter_program, "allgather": allgather_program, "allreduce": allreduce_program}


@pytest.fixture(scope="module")
def dgx_h100():
    return build_machine("dgx-h100")


@pytest.mark.parametrize("collective", SWITCH_DIRECT_COLLECTIVES)
def test_switch_direct_verifies_in_both_forms_within_the_limits_and_equals_numpy(collective, dgx_h100):
    result = synthesize(dgx_h100, collective, "switch-direct", size=MIB)
    assert result.report.ok and not result.report.violations
    assert set(result.report.modes) == {"in-place", "out-of-place"}
    for program in result.algorithm.ranks:
        assert len(program.threadblocks) <= EXECUTOR.max_threadblocks_per_rank
        assert all(len(tb.steps) <= EXECUTOR.max_steps_per_threadblock for tb in program.threadblocks)
        assert all(tb.channel < EXECUTOR.max_channels for tb in program.threadblocks)
    assert_executes(result.algorithm, modes=list(Mode), seed=4)


def test_switch_direct_reduce_scatter_beats_the_trees_at_64_mib_on_dgx_h100(dgx_h100):
    direct = synthesize(dgx_h100, "reducescatter", "switch-direct", size=64 * MIB)
    trees = synthesize(dgx_h100, "reducescatter", "trees", size=64 * MIB)
    assert direct.time < 0.95 * trees.time


@pytest.mark.parametrize("collective", SWITCH_DIRECT_COLLECTIVES)
def test_switch_direct_is_within_three_percent_of_the_port_limit_at_64_mib(collective, dgx_h100):
    size, n = 64 * MIB, dgx_h100.num_ranks
    fidelity = fidelity_for(dgx_h100)
    port = next(l for l in dgx_h100.links.values() if l.src == dgx_h100.ranks[0])
    rate = port.bandwidth * fidelity.efficiency(port.kind)
    passes = 2 if collective == "allreduce" else 1
    floor = fidelity.launch_latency + PROTOCOL_MODELS["Simple"].base_latency + passes * size * (n - 1) / n / rate
    result = synthesize(dgx_h100, collective, "switch-direct", size=size)
    assert floor <= result.time <= 1.03 * floor


def test_switch_direct_all_reduce_beats_blueconnect_at_64_mib_on_dgx_h100(dgx_h100):
    direct = synthesize(dgx_h100, "allreduce", "switch-direct", size=64 * MIB)
    stages = synthesize(dgx_h100, "allreduce", "blueconnect", size=64 * MIB)
    assert direct.time < 0.98 * stages.time


@pytest.mark.parametrize("collective", ["reducescatter", "allreduce"])
def test_auto_takes_switch_direct_at_64_mib_on_dgx_h100(collective, dgx_h100):
    result = synthesize(dgx_h100, collective, size=64 * MIB)
    assert result.strategy == "auto:switch-direct"
    assert result.time == pytest.approx(predict_time(result.algorithm, dgx_h100, 64 * MIB), rel=1e-2)


@pytest.mark.parametrize("topology", [build_machine("dgx1v"), build_cluster("dgx-a100", 2),
                                      build_hierarchy(parse_hierarchy("2@100,2@25"))], ids=lambda t: t.name)
def test_switch_direct_refuses_ranks_not_behind_one_switch_saying_so(topology):
    assert one_switch(topology) is None
    with pytest.raises(SynthesisError, match="one switch"):
        synthesize(topology, "allgather", "switch-direct", timed=False)


@pytest.mark.parametrize("collective,ranks,lanes", [
    ("reducescatter", 8, 4), ("allgather", 16, 2), ("allgather", 2, 31), ("reducescatter", 33, 0),
    ("allreduce", 8, 2), ("allreduce", 16, 1), ("allreduce", 2, 16), ("allreduce", 17, 1), ("allreduce", 18, 0)])
def test_lanes_fit_the_thread_blocks_and_channels(collective, ranks, lanes):
    assert lanes_for(collective, ranks, EXECUTOR.max_threadblocks_per_rank, EXECUTOR.max_channels) == lanes


@settings(max_examples=12, deadline=None)
@given(st.sampled_from(SWITCH_DIRECT_COLLECTIVES), st.integers(2, 6), st.integers(1, 3), st.integers(1, 4))
def test_any_lane_and_chunk_count_verifies_and_equals_numpy(collective, ranks, lanes, per_lane):
    algorithm = BUILDERS[collective](ranks, lanes, per_lane, "switch-direct-test")
    report = verify_algorithm(algorithm, dialect=LEGACY.name)
    assert report.ok and not report.violations
    assert_executes(algorithm, modes=list(Mode), seed=ranks + lanes + per_lane)


def test_switch_direct_runs_on_the_shared_memory_runtime_as_numpy_computes():
    from tests.support.runtime_execution import RuntimeCase, runtime_failures

    box = build_hierarchy(parse_hierarchy("4@100"))
    cases = [RuntimeCase(f"{collective}-{mode.value}", synthesize(box, collective, "switch-direct", size=MIB).algorithm,
                         mode)
             for collective in SWITCH_DIRECT_COLLECTIVES for mode in Mode]
    verdicts = runtime_failures(cases, box.num_ranks, timeout=120)
    assert verdicts and not any(verdicts.values()), verdicts
