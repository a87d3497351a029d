"""NCCL's rings across nodes leave each node as NCCL does (PXN over NVLink to the NIC's
GPU), never through the CPUs, and so reach the NICs' bandwidth on 2 x DGX H100."""

import pytest

from arborcc.synth.nccl_rings import nccl_rings
from arborcc.topology.cluster import build_cluster
from arborcc.topology.model import DeviceKind


@pytest.mark.parametrize("machine", ["dgx-h100", "dgx-a100", "dgx2", "dgx1v", "dgx1p"])
def test_no_ring_hop_between_nodes_passes_a_cpu(machine):
    t = build_cluster(machine, 2)
    s = nccl_rings(t)
    crossing = [path for hops in s.hops for path in hops
                if t.devices[path[0]].host != t.devices[path[-1]].host]
    assert crossing
    for path in crossing:
        assert not any(t.devices[d].kind is DeviceKind.CPU for d in path), path


def test_two_dgx_h100_rings_each_get_a_nic():
    t = build_cluster("dgx-h100", 2)
    s = nccl_rings(t)
    assert len(s.rings) == 8
    # every ring's bottleneck is its own NIC's PCIe link (48 GB/s), not a shared inter-socket link
    assert min(s.bandwidths) == pytest.approx(48e9)


def test_two_dgx_h100_baseline_allreduce_reaches_the_nics():
    from arborcc.tune.nccl import NcclBaseline

    t = build_cluster("dgx-h100", 2)
    call = NcclBaseline(t).call(1 << 30, "allreduce")
    # published: 8 x 400 Gb/s NICs per node give about 400 GB/s busbw (380+ tuned)
    assert 300 < call.result.busbw / 1e9 < 420
