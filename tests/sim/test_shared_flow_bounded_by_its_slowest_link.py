"""A flow that shares one link with others is still bound by the slowest link of its
route: max-min fairness over the shared link gives it no more than its own slow port
carries (it once got an even share of the shared link, faster than its port - NCCL's
PXN rings on DGX H100 clusters ran above the PCIe links they cross)."""

from __future__ import annotations

import pytest

from arborcc.ir.model import Op, ThreadBlock
from arborcc.sim.fidelity import IDEAL
from arborcc.sim.simulate import simulate
from arborcc.topology.model import GB, Device, DeviceKind, LinkKind, TopologyBuilder

from sim_builders import algorithm, step

SLOW, FAST = 2 * GB, 10 * GB


def two_senders_one_receiver_topology():
    """gpu0 (a slow port) and gpu1 (a fast one) reach gpu2 through a switch whose port to
    gpu2 is fast: both flows share the switch -> gpu2 link, gpu0's also crosses its slow port."""
    b = TopologyBuilder("slow-port")
    b.add_device(Device("sw", DeviceKind.NVSWITCH, 0, 0))
    for i, bw in enumerate((SLOW, FAST, FAST)):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, 0, i))
        b.connect(f"gpu{i}", "sw", LinkKind.NVLINK, bw, 0.0)
    return b.build()


def two_senders_one_receiver(chunks: int):
    tbs = {0: [ThreadBlock(0, send=2, steps=[step(Op.SEND, 0, chunks)])],
           1: [ThreadBlock(0, send=2, steps=[step(Op.SEND, chunks, chunks)])],
           2: [ThreadBlock(0, recv=0, steps=[step(Op.RECV, 0, chunks)]),
               ThreadBlock(1, recv=1, steps=[step(Op.RECV, chunks, chunks)])]}
    return algorithm("two-into-one", 3, 2 * chunks, tbs)


def test_flow_over_a_shared_link_runs_no_faster_than_its_slow_port():
    size = 64 << 20
    r = simulate(two_senders_one_receiver(1), two_senders_one_receiver_topology(), size, "Simple", IDEAL, exact=True)
    # gpu0's half at its port's 2 GB/s; gpu1's half at 8 GB/s (the rest of the shared port) - the
    # makespan is gpu0's; an even 5 GB/s split of the shared port would finish at size/2/5 GB/s
    want = (size / 2) / SLOW
    assert r.makespan == pytest.approx(want, rel=0.02)
    assert r.makespan > (size / 2) / (FAST / 2) * 1.5
