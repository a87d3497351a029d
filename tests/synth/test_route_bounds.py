"""The file bound (every transfer on its pair's route): equal to the proven bound where
every route is one direct link, never above it, and the hand counts of docs/against-nccl.md."""

from __future__ import annotations

import pytest

from arborcc.errors import SolverLimitError, SynthesisError
from arborcc.sim.fidelity import efficiency_adjusted
from arborcc.synth.bounds import collective_bound
from arborcc.synth.route_bounds import file_bound
from arborcc.topology.cluster import build_cluster
from arborcc.topology.machines import build_machine
from arborcc.topology.model import GB, Device, DeviceKind, LinkKind, TopologyBuilder

COLLECTIVES = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce", "gather", "scatter", "alltoall")


def ring(n: int, gbps: float = 10.0):
    b = TopologyBuilder(f"ring{n}")
    for i in range(n):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, 0, i))
    for i in range(n):
        b.connect(f"gpu{i}", f"gpu{(i + 1) % n}", LinkKind.NVLINK, gbps * GB * (1 + i % 2))
    return b.build()


def mesh(n: int):
    b = TopologyBuilder(f"mesh{n}")
    for i in range(n):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, 0, i))
    for i in range(n):
        for j in range(i + 1, n):
            b.connect(f"gpu{i}", f"gpu{j}", LinkKind.NVLINK, (10 + 5 * ((i + j) % 3)) * GB)
    return b.build()


@pytest.mark.parametrize("topology", [ring(5), mesh(4), mesh(6)], ids=lambda t: t.name)
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_equals_the_proven_bound_where_every_route_is_one_direct_link(topology, collective):
    assert file_bound(topology, collective).algbw == pytest.approx(
        collective_bound(topology, collective).algbw, rel=1e-6)


@pytest.mark.parametrize("machine", ["dgx1p", "dgx1v", "dgx2", "dgx-a100", "dgx-h100"])
@pytest.mark.parametrize("collective", ["allgather", "broadcast", "allreduce"])
def test_never_above_the_proven_bound(machine, collective):
    t = efficiency_adjusted(build_machine(machine))
    assert file_bound(t, collective).algbw <= collective_bound(t, collective).algbw * (1 + 1e-6)


@pytest.mark.parametrize("machine", ["dgx-a100", "dgx-h100"])
@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "broadcast", "allreduce"])
def test_switch_machines_reach_the_nvlink_only_bound(machine, collective):
    nominal = build_machine(machine)
    t = efficiency_adjusted(nominal)
    assert file_bound(t, collective, routed_on=nominal).algbw == pytest.approx(
        collective_bound(t, collective, links="nvlink").algbw, rel=1e-6)


def test_dgx1p_allgather_is_the_hand_count():
    """4 GPUs of a socket receive 7 shards each over 4 x 67.2 GB/s of NVLink and the one
    8.5 GB/s inter-socket link: busbw 7 x (4 x 67.2 + 8.5) / 28 = 69.3 GB/s."""
    nominal = build_machine("dgx1p")
    bound = file_bound(efficiency_adjusted(nominal), "allgather", routed_on=nominal)
    assert bound.busbw / GB == pytest.approx(7 * (4 * 67.2 + 8.5) / 28, rel=1e-4)


def test_refused_above_the_rank_limit():
    with pytest.raises(SolverLimitError, match="at most"):
        file_bound(build_cluster("dgx-a100", 4), "allgather")


def test_refused_for_an_unknown_collective():
    with pytest.raises(SynthesisError, match="no file bound"):
        file_bound(mesh(4), "custom")


@pytest.mark.parametrize("machine, gpus, collective, strategy", [
    ("dgx-a100", None, "reducescatter", "switch-direct"),  # within 2% of its file bound
    ("dgx1v", ["gpu1", "gpu4", "gpu5", "gpu6"], "allreduce", "trees"),  # its packing plans PCIe relays
    ("dgx1p", None, "broadcast", "trees"),
])
def test_no_written_file_simulates_faster_than_its_file_bound(machine, gpus, collective, strategy):
    # the simulator scales every link by its profile's efficiency: the file bound of the
    # efficiency-adjusted topology, routed on the nominal one, caps every file it times
    from arborcc.sim.fidelity import fidelity_for
    from arborcc.synth.synthesis import synthesize
    from arborcc.topology.allocation import induced

    topology = build_machine(machine)
    topology = induced(topology, gpus) if gpus else topology
    size = 1 << 30
    written = synthesize(topology, collective, strategy, size=size)
    bound = file_bound(efficiency_adjusted(topology, fidelity_for(topology)), collective, routed_on=topology)
    assert size / written.time <= bound.algbw * (1 + 1e-9), (size / written.time / GB, bound.algbw / GB)
    assert size / written.time >= 0.5 * bound.algbw  # a real file, not a degenerate one
