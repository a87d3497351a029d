"""CPU-only topologies from sysfs: NUMA nodes, the CPUs ranks run on, hosts joined by a network."""

from __future__ import annotations

import os

import pytest

from arborcc.errors import TopologyError
from arborcc.topology.defaults import NIC_BANDWIDTH
from arborcc.topology.model import DeviceKind, LinkKind
from arborcc.topology.readers import read_topology
from arborcc.topology.sysfs import CpuHost, cpu_topology, detect_cpu_topology, read_cpu_host, read_numa
from arborcc.topology.topofile import write_topology_file


def fake_sysfs(tmp_path, nodes: dict[int, str], nics: dict[str, tuple[str, str]]):
    node_root, net_root = tmp_path / "node", tmp_path / "net"
    for n, cpus in nodes.items():
        (node_root / f"node{n}").mkdir(parents=True)
        (node_root / f"node{n}" / "cpulist").write_text(cpus + "\n")
    for name, (state, speed) in nics.items():
        (net_root / name).mkdir(parents=True)
        (net_root / name / "operstate").write_text(state + "\n")
        (net_root / name / "speed").write_text(speed + "\n")
    return node_root, net_root


def test_two_sockets_place_ranks_on_their_nodes(tmp_path):
    node_root, net_root = fake_sysfs(tmp_path, {0: "0-3", 1: "4-7"},
                                     {"lo": ("unknown", "-1"), "eth0": ("up", "25000"), "eth1": ("down", "100000")})
    host = read_cpu_host([0, 1, 2], "box", cpus=[2, 4, 5], node_root=node_root, net_root=net_root)
    assert host.numa == ((0, (0, 1, 2, 3)), (1, (4, 5, 6, 7)))
    assert host.cpus == (2, 4, 5)
    assert host.nic_bandwidth == 25000e6 / 8  # the up interface, not loopback or the one that is down
    topo = cpu_topology([host])
    assert topo.ranks == ("rank0", "rank1", "rank2")
    assert [(topo.devices[r].kind, topo.devices[r].index, topo.devices[r].numa) for r in topo.ranks] == [
        (DeviceKind.CORE, 2, 0), (DeviceKind.CORE, 4, 1), (DeviceKind.CORE, 5, 1)]
    assert topo.route("rank0", "rank1").path == ("rank0", "cpu0", "cpu1", "rank1")
    assert topo.route("rank1", "rank2").path == ("rank1", "cpu1", "rank2")
    assert topo.link("rank0", "cpu0").kind is LinkKind.MEMORY
    assert topo.hosts == (0,)


def test_no_numa_directory_means_one_node_of_every_online_cpu(tmp_path):
    online = tmp_path / "online"
    online.write_text("0-5\n")
    assert read_numa(tmp_path / "missing", online) == ((0, (0, 1, 2, 3, 4, 5)),)


def test_more_ranks_than_cpus_wrap_around(tmp_path):
    node_root, net_root = fake_sysfs(tmp_path, {0: "0-1"}, {})
    host = read_cpu_host(range(4), cpus=[0, 1], node_root=node_root, net_root=net_root)
    assert host.cpus == (0, 1, 0, 1)
    assert host.nic_bandwidth is None


def test_hosts_join_through_one_switch_and_keep_rank_order():
    a = CpuHost("a", ((0, (0, 1)),), (0, 2), (0, 1))
    b = CpuHost("b", ((0, (0, 1)),), (1, 3), (0, 1), nic_bandwidth=3e9)
    topo = cpu_topology([a, CpuHost.from_dict(b.to_dict())])
    assert topo.ranks == ("rank0", "rank1", "rank2", "rank3")
    assert [topo.devices[r].host for r in topo.ranks] == [0, 1, 0, 1]
    route = topo.route("rank0", "rank1")
    assert route.path == ("rank0", "n0.cpu0", "n0.nic0", "switch0", "n1.nic0", "n1.cpu0", "rank1")
    assert route.bandwidth == 3e9  # host b's NIC is the bottleneck
    assert topo.link("n0.nic0", "switch0").bandwidth == NIC_BANDWIDTH  # host a gave no speed


def test_ranks_must_be_numbered_from_zero():
    with pytest.raises(TopologyError, match=r"ranks \[0, 2\] are not 0..1"):
        cpu_topology([CpuHost("a", ((0, (0,)),), (0, 2), (0, 0))])


def test_file_round_trip_keeps_cores_and_memory_links(tmp_path):
    topo = cpu_topology([CpuHost("a", ((0, (0, 1)), (1, (2, 3))), (0, 1), (1, 2)),
                         CpuHost("b", ((0, (0, 1)),), (2, 3), (0, 1))])
    path = tmp_path / "cpu.yaml"
    write_topology_file(topo, path)
    assert "ranks:" not in path.read_text()  # every core in order is the default for a CPU-only job
    assert read_topology(path) == topo


def test_this_machine():
    topo = detect_cpu_topology(2)
    assert topo.num_ranks == 2
    cpus = sorted(os.sched_getaffinity(0))
    assert topo.devices["rank0"].index == cpus[0]
