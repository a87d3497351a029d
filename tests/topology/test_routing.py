"""Routing: direct links first, else the widest, then shortest path through relays."""

import pytest

from arborcc.errors import TopologyError
from arborcc.topology.machines import build_machine
from arborcc.topology.model import GB, Device, DeviceKind, LinkKind, TopologyBuilder


def test_direct_nvlink_beats_pcie():
    t = build_machine("dgx1v")
    r = t.route("gpu0", "gpu3")
    assert r.path == ("gpu0", "gpu3") and r.bandwidth == pytest.approx(50 * GB)


def test_same_switch_goes_through_pcie_switch_only():
    # gpu0 and gpu1 share pcie0 but have an NVLink; nic0 sits on pcie0 too
    t = build_machine("dgx1v")
    assert t.route("gpu0", "nic0").path == ("gpu0", "pcie0", "nic0")


def test_cross_socket_route_goes_through_both_cpus():
    t = build_machine("dgx1v")
    r = t.route("gpu0", "gpu5")
    assert r.path == ("gpu0", "pcie0", "cpu0", "cpu1", "pcie2", "gpu5")
    assert r.bandwidth == pytest.approx(10 * GB)  # inter-socket default is the bottleneck
    assert r.latency == pytest.approx(sum(t.links[p].latency for p in r.pairs()))


def test_same_socket_route_through_cpu():
    t = build_machine("dgx1v", pcie_gbps=11)
    # gpu1 -> gpu2 have NVLink; take an allocation-free pair over PCIe on one socket: gpu1 -> nic2
    r = t.route("gpu1", "nic2")
    assert r.path == ("gpu1", "pcie0", "cpu0", "pcie1", "nic2")
    assert r.bandwidth == pytest.approx(11 * GB)


def test_routes_never_pass_through_gpus():
    # a chain a - b - c of GPUs: a cannot reach c, since b does not forward
    b = TopologyBuilder("chain")
    for i in range(3):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, 0, i))
    b.connect("gpu0", "gpu1", LinkKind.NVLINK, 25 * GB)
    b.connect("gpu1", "gpu2", LinkKind.NVLINK, 25 * GB)
    t = b.build()
    assert not t.can_route("gpu0", "gpu2")
    with pytest.raises(TopologyError, match="no route from gpu0 to gpu2"):
        t.route("gpu0", "gpu2")


def test_widest_path_wins_over_shorter_one():
    b = TopologyBuilder("wide")
    for i in range(2):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, 0, i))
    for s in ("sw0", "sw1", "sw2"):
        b.add_device(Device(s, DeviceKind.PCIE_SWITCH, 0))
    b.connect("gpu0", "sw0", LinkKind.PCIE, 5 * GB)  # narrow, 2 hops
    b.connect("sw0", "gpu1", LinkKind.PCIE, 5 * GB)
    b.connect("gpu0", "sw1", LinkKind.PCIE, 20 * GB)  # wide, 3 hops
    b.connect("sw1", "sw2", LinkKind.PCIE, 20 * GB)
    b.connect("sw2", "gpu1", LinkKind.PCIE, 20 * GB)
    r = b.build().route("gpu0", "gpu1")
    assert r.path == ("gpu0", "sw1", "sw2", "gpu1") and r.bandwidth == 20 * GB


def test_routes_inside_a_node_never_use_the_network():
    from arborcc.topology.cluster import build_cluster

    t = build_cluster("dgx1v", 2)
    r = t.route("n0.gpu0", "n0.gpu5")
    assert r.path == ("n0.gpu0", "n0.pcie0", "n0.cpu0", "n0.cpu1", "n0.pcie2", "n0.gpu5")


def test_cross_rail_routes_do_not_bounce_through_a_third_node():
    from arborcc.topology.cluster import build_cluster

    t = build_cluster("dgx-h100", 3, network="rail")
    for a, b in [("n0.gpu0", "n1.gpu5"), ("n2.gpu7", "n0.gpu1")]:
        hosts = [t.devices[d].host for d in t.route(a, b).path]
        assert {h for h in hosts if h is not None} == {t.devices[a].host, t.devices[b].host}
        # once in the network, the route never goes back to the source host
        first_out = hosts.index(None)
        assert t.devices[a].host not in hosts[first_out:]


def test_gpu_i_uses_nic_i_at_both_ends_when_nics_are_equally_close():
    from arborcc.topology.cluster import build_cluster

    t = build_cluster("dgx-a100", 2)  # each PCIe switch holds 2 GPUs and 2 NICs
    assert t.route("n0.gpu1", "n1.gpu1").path == (
        "n0.gpu1", "n0.pcie0", "n0.nic1", "leaf0", "n1.nic1", "n1.pcie0", "n1.gpu1")
    assert t.route("n0.gpu1", "n1.gpu0").path[2:5] == ("n0.nic1", "leaf0", "n1.nic0")
