"""DGX H100's NIC path (a GPU's PCIe gen5 link, its switch's link to the NIC, the NIC's
400 Gb/s port) carries what one NDR NIC is published to measure, 46-48 GB/s, in the h100
profile; and NCCL's ring all-reduce across two DGX H100 nodes, bound by its 8 NICs per
node, lands near the published 380+ GB/s busbw (about 400 peak) without exceeding what
8 NICs at that rate carry (docs/fidelity.md, "Across nodes")."""


from arborcc.sim.fidelity import efficiency_adjusted, fidelity_for
from arborcc.topology.cluster import build_cluster
from arborcc.topology.model import DeviceKind

GB = 1e9
ONE_NIC_MEASURED = (46 * GB, 48 * GB)
EIGHT_NICS_MEASURED = 380 * GB


def test_every_dgx_h100_nic_path_carries_the_one_nic_measurement():
    topology = build_cluster("dgx-h100", 2)
    adjusted = efficiency_adjusted(topology, fidelity_for(topology))
    nics = [d.id for d in topology.devices.values() if d.kind is DeviceKind.NIC]
    assert len(nics) == 16
    for nic in nics:
        host, number = nic.split(".nic")
        gpu = f"{host}.gpu{number}"
        path = adjusted.route(gpu, nic).path + (adjusted.route(nic, "leaf0").path[1:])
        rates = [adjusted.link(a, b).bandwidth for a, b in zip(path, path[1:])]
        low, high = ONE_NIC_MEASURED
        assert low <= min(rates) <= high, (path, rates)


def test_two_dgx_h100_ring_allreduce_lands_near_the_eight_nic_measurement():
    from arborcc.tune.nccl import NcclBaseline

    topology = build_cluster("dgx-h100", 2)
    call = NcclBaseline(topology).call(1 << 30, "allreduce")
    assert call.algorithm == "ring"
    # no more than 8 NICs at the one-NIC measurement's top carry; within 5% of 380
    assert 0.95 * EIGHT_NICS_MEASURED <= call.result.busbw <= 8 * ONE_NIC_MEASURED[1]
