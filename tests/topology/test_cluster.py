"""Clusters over a network and BlueConnect's generic hierarchy."""

import pytest

from arborcc.errors import TopologyError
from arborcc.topology.cluster import build_cluster, build_hierarchy, parse_hierarchy
from arborcc.topology.model import GB, DeviceKind, LinkKind


def test_two_node_fat_tree_single_leaf():
    t = build_cluster("dgx-a100", 2)
    assert t.num_ranks == 16 and t.hosts == (0, 1)
    assert [d.id for d in t.devices_of_kind(DeviceKind.NET_SWITCH)] == ["leaf0"]
    r = t.route("n0.gpu0", "n1.gpu0")
    assert "leaf0" in r.path and r.bandwidth == pytest.approx(24 * GB)  # PCIe gen4 is the bottleneck


def test_fat_tree_with_spine_and_oversubscription():
    t = build_cluster("dgx-a100", 8, leaf_ports=16, oversubscription=2)  # 64 NICs -> 4 leaves
    leaves = [d for d in t.devices_of_kind(DeviceKind.NET_SWITCH) if d.id.startswith("leaf")]
    assert len(leaves) == 4
    assert t.link("leaf0", "spine0").bandwidth == pytest.approx(16 * 25 * GB / 2)


def test_rail_optimized_connects_nic_i_to_leaf_i():
    t = build_cluster("dgx-h100", 3, network="rail")
    for node in range(3):
        for i in range(8):
            assert t.link(f"n{node}.nic{i}", f"leaf{i}").kind is LinkKind.NETWORK
    assert t.route("n0.gpu3", "n2.gpu3").path[3] == "leaf3"


def test_cluster_errors():
    with pytest.raises(TopologyError, match="node count"):
        build_cluster("dgx1v", 0)
    with pytest.raises(TopologyError, match="unknown network"):
        build_cluster("dgx1v", 2, network="torus")
    with pytest.raises(TopologyError, match="oversubscription"):
        build_cluster("dgx1v", 2, oversubscription=0.5)


def test_hierarchy_blueconnect_fig1():
    t = build_hierarchy(parse_hierarchy("4@100,2@25,2@12.5"))
    assert t.num_ranks == 16 and len(t.hosts) == 4
    assert t.route("n0.gpu0", "n0.gpu1").bandwidth == pytest.approx(100 * GB)
    assert t.route("n0.gpu0", "n1.gpu0").bandwidth == pytest.approx(25 * GB)
    assert t.route("n0.gpu0", "n3.gpu0").bandwidth == pytest.approx(12.5 * GB)


@pytest.mark.parametrize("spec", ["4x100", "4@0", "a@1", "0@10"])
def test_hierarchy_parse_errors(spec):
    with pytest.raises(TopologyError, match="level 0"):
        parse_hierarchy(spec)
