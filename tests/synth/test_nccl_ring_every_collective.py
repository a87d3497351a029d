"""``nccl-ring`` builds every collective NCCL runs with NCCL's ring kernel on NCCL's rings,
one MSCCL channel per channel NCCL runs; each algorithm verifies and computes what numpy
computes, and ``auto`` takes it where it is the fastest candidate."""

import pytest

from arborcc.ir.limits import DIALECTS
from arborcc.ir.model import Protocol
from arborcc.sim.fidelity import fidelity_for
from arborcc.sim.nccl_channels import nccl_channel_count
from arborcc.sim.simulate import predict_time
from arborcc.synth.nccl_rings import nccl_rings
from arborcc.synth.synthesis import synthesize
from arborcc.topology.cluster import build_cluster
from arborcc.topology.machines import build_machine
from tests.support.execution import assert_executes

RING_KERNEL_COLLECTIVES = ["allgather", "reducescatter", "broadcast", "reduce"]


@pytest.mark.parametrize("collective", RING_KERNEL_COLLECTIVES)
def test_nccl_ring_of_every_collective_verifies_and_equals_numpy(collective):
    topology = build_machine("dgx1v")
    root = 3 if collective in ("broadcast", "reduce") else 0
    result = synthesize(topology, collective, "nccl-ring", root=root, timed=False)
    assert result.strategy == "nccl-ring" and result.algorithm.collective == collective
    assert not [v for v in result.report.violations if v.kind != "limit"]
    assert_executes(result.algorithm)


def test_nccl_ring_runs_as_many_channels_as_nccl():
    topology = build_machine("dgx1v")
    distinct = len(nccl_rings(topology).rings)
    result = synthesize(topology, "allgather", "nccl-ring", timed=False)
    channels = {tb.channel for rank in result.algorithm.ranks for tb in rank.threadblocks}
    assert len(channels) == nccl_channel_count(distinct, fidelity_for(topology).nccl_channels) == 2 * distinct


@pytest.mark.usefixtures("each_strategy_builds_once_per_request")  # auto builds the ring and trees too
@pytest.mark.parametrize("machine,collective,size", [("dgx1v", "allgather", 64 << 20), ("dgx1p", "allgather", 1 << 20)])
def test_auto_takes_the_nccl_ring_where_it_is_the_fastest(machine, collective, size):
    topology = build_machine(machine)
    best = synthesize(topology, collective, size=size)
    ring = synthesize(topology, collective, "nccl-ring", size=size)
    trees = synthesize(topology, collective, "trees", size=size)
    assert ring.time < trees.time  # on DGX-1 NCCL's rings beat the tree packing for these
    assert best.strategy == "auto:nccl-ring" and best.time == pytest.approx(ring.time, rel=1e-9)
    assert best.time == pytest.approx(predict_time(best.algorithm, topology, size), rel=1e-9)


def test_nccl_ring_refuses_alltoall_naming_the_collectives_it_builds():
    with pytest.raises(Exception, match="nccl-ring builds .*reduce only"):
        synthesize(build_machine("dgx1v"), "alltoall", "nccl-ring", timed=False)


def test_nccl_ring_file_is_written_with_the_fastest_protocol_at_a_small_size():
    topology = build_machine("dgx1v")
    result = synthesize(topology, "allgather", "nccl-ring", size=1 << 20)
    assert result.algorithm.protocol is not Protocol.SIMPLE
    assert result.time < predict_time(result.algorithm, topology, 1 << 20, "Simple")


@pytest.mark.parametrize("collective", ["allreduce", "reducescatter"])
def test_nccl_ring_over_the_executors_steps_deals_its_rings_over_data_lanes(collective):
    topology = build_cluster("dgx-a100", 5)  # 40 ranks: an all-reduce ring holds 79 steps
    result = synthesize(topology, collective, "nccl-ring")
    limit = DIALECTS["executor"].max_steps_per_threadblock
    assert result.report.ok
    assert max(len(tb.steps) for rank in result.algorithm.ranks for tb in rank.threadblocks) <= limit
    dealt = [note for note in result.notes if "data lanes" in note]
    timed = [note for note in result.notes if "variants" in note]
    if collective == "allreduce":  # both dealings are timed, the faster written (module doc of the strategy)
        assert len(dealt) == 1 and len(timed) == 1
        assert result.variant in ("interleaved lanes", "contiguous lanes")
        assert f"written as {result.variant}, the fastest of its 2 variants" in timed[0]
        assert f"{result.time * 1e6:.1f} us (" in timed[0]
        assert ("contiguous" if result.variant.startswith("interleaved") else "interleaved") in timed[0]
    else:  # 40 steps fit
        assert not dealt and not timed and not result.variant
    assert_executes(result.algorithm)
    legacy = synthesize(topology, collective, "nccl-ring", timed=False, dialect="legacy")
    assert not any("data lanes" in note for note in legacy.notes)
