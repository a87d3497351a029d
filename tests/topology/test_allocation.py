"""Allocations: induced topologies and the Blink paper's unique-allocation counts."""

import itertools

import networkx as nx
import pytest

from arborcc.errors import TopologyError
from arborcc.topology.allocation import induced, resolve_gpus, unique_allocations
from arborcc.topology.machines import DGX1V_NVLINKS, build_machine
from arborcc.topology.model import DeviceKind, LinkKind


@pytest.mark.parametrize("machine,count", [("dgx1v", 46), ("dgx1p", 14)])
def test_blink_unique_allocation_counts(machine, count):
    classes = unique_allocations(build_machine(machine), 3, 8)
    assert len(classes) == count
    # members of all classes are exactly the NVLink-connected allocations
    g = nx.Graph([(i, j) for i in range(8) for j in range(8) if DGX1V_NVLINKS[i][j]])
    connected = sum(1 for k in range(3, 9) for s in itertools.combinations(range(8), k)
                    if nx.is_connected(g.subgraph(s)))
    assert sum(c.members for c in classes) == connected


def test_classes_are_pairwise_non_isomorphic_and_members_isomorphic_to_rep():
    t = build_machine("dgx1v")
    classes = unique_allocations(t, 4, 4)

    def graph(gpus):
        h = nx.Graph()
        h.add_nodes_from(gpus)
        for l in t.links.values():
            if l.kind is LinkKind.NVLINK and l.src in gpus and l.dst in gpus:
                h.add_edge(l.src, l.dst, w=l.count)
        return h

    em = lambda a, b: a["w"] == b["w"]  # noqa: E731
    reps = [graph(c.gpus) for c in classes]
    for a, b in itertools.combinations(reps, 2):
        assert not nx.is_isomorphic(a, b, edge_match=em)


def test_nvswitch_box_has_one_class_per_size():
    classes = unique_allocations(build_machine("dgx-a100"), 2, 8)
    assert [len(c.gpus) for c in classes] == [2, 3, 4, 5, 6, 7, 8]


def test_full_fabric_splits_classes_further():
    t = build_machine("dgx1v")
    assert len(unique_allocations(t, 3, 8, fabric="full")) > 46


def test_induced_keeps_pcie_routes_and_drops_other_gpus():
    t = build_machine("dgx1v")
    s = induced(t, resolve_gpus(t, "1,4,5,6"))
    assert s.ranks == ("gpu1", "gpu4", "gpu5", "gpu6")
    assert not any(d.is_gpu and d.id not in s.ranks for d in s.devices.values())
    assert s.route("gpu1", "gpu4").path == t.route("gpu1", "gpu4").path
    assert s.link("gpu1", "gpu5").count == 2
    assert len(s.devices_of_kind(DeviceKind.PCIE_SWITCH)) == 4


def test_rank_order_follows_the_allocation():
    t = build_machine("dgx1v")
    assert induced(t, resolve_gpus(t, "6,1")).ranks == ("gpu6", "gpu1")


@pytest.mark.parametrize("spec,msg", [("1,9", "GPU 9 does not exist"), ("1,1", "listed twice"),
                                      ("gpuX", "neither a GPU number"), ("", "an empty GPU list"),
                                      ("1,,2", "item 2 of .* is empty")])
def test_bad_gpu_lists(spec, msg):
    with pytest.raises(TopologyError, match=msg):
        resolve_gpus(build_machine("dgx1v"), spec)


def test_bad_size_range():
    with pytest.raises(TopologyError, match="min-gpus"):
        unique_allocations(build_machine("dgx1v"), 5, 3)
