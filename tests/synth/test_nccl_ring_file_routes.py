"""The nccl-ring strategy's rings as its MSCCL file runs them: a file names no route, so
every hop takes its pair's own route; the hop leaving a node must then leave through the
NICs of different GPUs, not all through one (DGX H100 clusters, where NCCL's chains all
end at one GPU and reach the channel's NIC over NVLink)."""

from __future__ import annotations

from collections import Counter

import pytest

from arborcc.sim.simulate import simulate
from arborcc.synth import synthesize
from arborcc.synth.nccl_rings import file_rings, nccl_rings
from arborcc.topology.cluster import build_cluster
from arborcc.topology.machines import build_machine
from arborcc.topology.model import DeviceKind
from arborcc.tune.nccl import NcclBaseline


def exit_nics(topology, rings) -> Counter:
    """How many rings leave a node through each NIC, on every pair's own route."""
    used: Counter = Counter()
    for ring in rings:
        for a, b in zip(ring, ring[1:] + ring[:1]):
            path = topology.route(topology.ranks[a], topology.ranks[b]).path
            nics = [d for d in path if topology.devices[d].kind is DeviceKind.NIC]
            if nics:
                used[nics[0]] += 1
    return used


@pytest.fixture(scope="module")
def h100_pair():
    return build_cluster("dgx-h100", 2)


def test_file_rings_leave_every_node_through_every_nic_once(h100_pair):
    schedule = nccl_rings(h100_pair)
    assert max(exit_nics(h100_pair, schedule.rings).values()) > 1  # NCCL's own chains share a NIC
    rings = file_rings(h100_pair, schedule)
    used = exit_nics(h100_pair, rings.rings)
    assert set(used.values()) == {1} and len(used) == 16
    assert rings.hops == [] and rings.nodes == 2
    rings.validate(h100_pair.num_ranks)


def test_file_rings_keep_each_chain_entering_where_nccls_does(h100_pair):
    schedule = nccl_rings(h100_pair)
    rings = file_rings(h100_pair, schedule)
    for before, after in zip(schedule.rings, rings.rings):
        assert before[0] == after[0] and before[8] == after[8]


def test_file_rings_leave_a_single_machine_alone():
    topology = build_machine("dgx-h100")
    schedule = nccl_rings(topology)
    assert file_rings(topology, schedule) is schedule


def test_nccl_ring_reducescatter_file_runs_near_nccl_on_two_dgx_h100(h100_pair):
    """Its file (no routes) was a quarter of NCCL's busbw: every channel left through NIC 7."""
    size = 1 << 30
    ours = synthesize(h100_pair, "reducescatter", "nccl-ring")
    assert ours.routes == {}
    file_time = simulate(ours.algorithm, h100_pair, size, "Simple").time
    nccl_time = NcclBaseline(h100_pair).call(size, "reducescatter").result.time
    assert file_time < 1.25 * nccl_time


@pytest.mark.parametrize("collective", ["allreduce", "allgather", "reducescatter", "broadcast"])
def test_nccl_ring_file_is_the_program_nccl_runs_on_a_dgx1v(collective):
    """The strategy writes NCCL's ring kernel (all-reduce too, once lowered differently and
    6% slower): its file takes exactly the time of NCCL's ring at NCCL's protocol."""
    topology = build_machine("dgx1v")
    size = 64 << 20
    call = NcclBaseline(topology).call(size, collective)
    ours = synthesize(topology, collective, "nccl-ring")
    assert call.algorithm == "ring"
    assert simulate(ours.algorithm, topology, size, call.protocol).time == pytest.approx(call.result.time, rel=1e-12)


@pytest.mark.parametrize("machine", ["dgx1v", "dgx1p", "dgx2", "dgx-a100", "dgx-h100"])
def test_file_rings_never_run_slower_on_their_own_routes(machine):
    """On every built-in machine's 2-node cluster the rings a file gets are NCCL's rings or
    faster when every hop takes its pair's own route, and still visit every rank once."""
    from arborcc.synth.nccl_rings import fair_share

    topology = build_cluster(machine, 2)
    schedule = nccl_rings(topology)
    rings = file_rings(topology, schedule)
    rings.validate(topology.num_ranks)

    def own_routes(rs):
        return sum(fair_share(topology, [[topology.route(topology.ranks[a], topology.ranks[b]).path
                                          for a, b in zip(r, r[1:] + r[:1])] for r in rs]))

    assert own_routes(rings.rings) >= own_routes(schedule.rings)
    assert sum(rings.bandwidths) == pytest.approx(own_routes(rings.rings))
