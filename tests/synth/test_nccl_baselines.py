"""NCCL baselines: ring search and double binary trees (NCCL's cost model is tested in
tests/sim/test_models_nccl.py)."""

import itertools
import math

import pytest
from hypothesis import given, settings, strategies as st

from arborcc.errors import SynthesisError
from arborcc.synth.double_binary_tree import double_binary_tree, double_binary_tree_nodes
from arborcc.synth.nccl_rings import nccl_rings
from arborcc.topology.allocation import induced
from arborcc.topology.cluster import build_cluster, build_hierarchy
from arborcc.topology.machines import build_machine
from arborcc.topology.model import GB, Device, DeviceKind, LinkKind, TopologyBuilder


def assert_hamiltonian(rings, n):
    assert rings
    for ring in rings:
        assert sorted(ring) == list(range(n))


def hops(ring):
    return [(ring[k], ring[(k + 1) % len(ring)]) for k in range(len(ring))]


def link_loads(sched):
    load = {}
    for walk in sched.hops:
        for path in walk:
            for p in zip(path, path[1:]):
                load[p] = load.get(p, 0) + 1
    return load


def nvlink_pairs(t):
    n = t.num_ranks
    return {(i, j) for i in range(n) for j in range(n) if i != j
            and all(t.links[p].kind is LinkKind.NVLINK for p in t.route(t.ranks[i], t.ranks[j]).pairs())}


def nvlink_cycle_exists(t) -> bool:
    nv = nvlink_pairs(t)
    n = t.num_ranks
    for perm in itertools.permutations(range(1, n)):
        if all(h in nv for h in hops((0,) + perm)):
            return True
    return False


# ------------------------------------------------------------------------- rings ---
def test_dgx1v_rings_are_nvlink_only_and_fill_every_lane():
    t = build_machine("dgx1v")
    s = nccl_rings(t)
    assert s.link_kind is LinkKind.NVLINK and s.nodes == 1
    assert_hamiltonian(s.rings, 8)
    for ring in s.rings:
        for a, b in hops(ring):
            link = t.link(t.ranks[a], t.ranks[b])
            assert link is not None and link.kind is LinkKind.NVLINK
    # 24 lanes per direction, 8 per ring: six rings of one lane (25 GB/s) each
    assert len(s.rings) == 6
    assert s.bandwidths == pytest.approx([25 * GB] * 6)
    for (a, b), k in link_loads(s).items():
        assert k <= t.links[(a, b)].count


def test_dgx1p_four_rings_use_disjoint_links():
    # 16 single NVLinks: two edge-disjoint Hamiltonian cycles, each in both directions
    t = build_machine("dgx1p")
    s = nccl_rings(t)
    assert len(s.rings) == 4 and s.link_kind is LinkKind.NVLINK
    assert max(link_loads(s).values()) == 1
    assert s.bus_bandwidth == pytest.approx(4 * 20 * GB)


def test_allocation_1456_has_no_nvlink_ring_and_falls_back_to_pcie():
    m = build_machine("dgx1v")
    t = induced(m, ["gpu1", "gpu4", "gpu5", "gpu6"])
    assert not nvlink_cycle_exists(t)  # GPU1 has a single NVLink peer (GPU5) here
    s = nccl_rings(t)
    assert s.link_kind is LinkKind.PCIE
    assert_hamiltonian(s.rings, 4)
    for walk in s.hops:
        assert any(t.links[p].kind is not LinkKind.NVLINK for path in walk for p in zip(path, path[1:]))
    # the cross-socket hop is the bottleneck (10 GB/s inter-socket default)
    assert all(bw == pytest.approx(10 * GB) for bw in s.bandwidths)


def test_nvswitch_box_rings_go_through_the_switch():
    t = build_machine("dgx-a100")
    s = nccl_rings(t)
    assert s.link_kind is LinkKind.NVLINK
    assert_hamiltonian(s.rings, 8)
    for walk in s.hops:
        assert all(path[1] == "nvswitch0" and len(path) == 3 for path in walk)
    assert s.bus_bandwidth == pytest.approx(300 * GB)


def test_multi_node_rings_enter_and_leave_each_node_once_through_nics():
    t = build_cluster("dgx-a100", 2)
    s = nccl_rings(t)
    host = [t.devices[g].host for g in t.ranks]
    assert s.nodes == 2 and s.link_kind is LinkKind.NETWORK and s.intra_link_kind is LinkKind.NVLINK
    assert_hamiltonian(s.rings, 16)
    assert len(s.rings) == 8  # one channel per NIC
    nics_used = []
    for ring, walk in zip(s.rings, s.hops):
        crossings = [(k, (a, b)) for k, (a, b) in enumerate(hops(ring)) if host[a] != host[b]]
        assert len(crossings) == 2  # leaves each of the two nodes exactly once
        for k, _ in crossings:
            nics = [d for d in walk[k] if t.devices[d].kind is DeviceKind.NIC]
            assert len(nics) == 2
            nics_used.append(tuple(nics))
    assert len(set(nics_used)) == len(nics_used)  # channels do not share NICs
    assert s.bandwidths == pytest.approx([24 * GB] * 8)  # the PCIe gen4 hop to the NIC


def test_unreachable_gpus_raise():
    b = TopologyBuilder("split")
    for i in range(3):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, 0, i))
    b.connect("gpu0", "gpu1", LinkKind.NVLINK, 25 * GB)
    with pytest.raises(SynthesisError, match="cannot reach"):
        nccl_rings(b.build())


# ----------------------------------------------------------- double binary tree ---
def check_parent_tree(parent, nodes):
    assert sorted(parent) == list(nodes)
    roots = [v for v, p in parent.items() if p is None]
    assert len(roots) == 1
    for v in parent:
        seen = set()
        while parent[v] is not None:
            assert v not in seen
            seen.add(v)
            v = parent[v]
    kids = {}
    for v, p in parent.items():
        if p is not None:
            kids.setdefault(p, []).append(v)
    return roots[0], kids


@pytest.mark.parametrize("n", range(1, 34))
def test_node_trees_are_binary_and_complementary(n):
    first, second = double_binary_tree_nodes(n)
    r1, k1 = check_parent_tree(first, range(n))
    r2, k2 = check_parent_tree(second, range(n))
    assert r1 == 0
    assert all(len(k) <= 2 for k in k1.values()) and all(len(k) <= 2 for k in k2.values())
    depth = lambda par, v: 0 if par[v] is None else 1 + depth(par, par[v])
    assert max(depth(first, v) for v in range(n)) <= max(1, math.ceil(math.log2(n))) + 1
    if n % 2 == 0 and n > 2:
        assert not set(k1) & set(k2)  # no node is interior in both trees


def test_double_binary_tree_over_a_cluster():
    t = build_cluster("dgx1v", 4)
    dbt = double_binary_tree(t)
    assert dbt.nodes == 4
    host = [t.devices[g].host for g in t.ranks]
    for par in dbt.parents:
        root, kids = check_parent_tree(par, range(32))
        # inside a node the tree is a chain: a rank has at most one child on its own node
        for v, ks in kids.items():
            assert sum(1 for k in ks if host[k] == host[v]) <= 1
            assert sum(1 for k in ks if host[k] != host[v]) <= 2
    assert dbt.roots[0] != dbt.roots[1]
    assert all(bw > 0 for bw in dbt.bandwidths)


# ------------------------------------------------------------------ properties ---
@st.composite
def random_machines(draw):
    """Random single-node machines: GPUs on 1-2 PCIe switches joined by a CPU, random
    NVLinks (0-2 lanes), sometimes an NVSwitch holding some GPUs."""
    n = draw(st.integers(2, 6))
    b = TopologyBuilder("random")
    b.add_device(Device("cpu0", DeviceKind.CPU, 0, 0))
    switches = draw(st.integers(1, 2))
    for k in range(switches):
        b.add_device(Device(f"pcie{k}", DeviceKind.PCIE_SWITCH, 0, k))
        b.connect(f"pcie{k}", "cpu0", LinkKind.PCIE, 12 * GB)
    for i in range(n):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, 0, i))
        b.connect(f"gpu{i}", f"pcie{draw(st.integers(0, switches - 1))}", LinkKind.PCIE, 12 * GB)
    if draw(st.booleans()):
        b.add_device(Device("nvswitch0", DeviceKind.NVSWITCH, 0, 0))
        for i in range(n):
            if draw(st.booleans()):
                b.connect(f"gpu{i}", "nvswitch0", LinkKind.NVLINK, 100 * GB, count=4)
    else:
        for i, j in itertools.combinations(range(n), 2):
            lanes = draw(st.integers(0, 2))
            if lanes:
                b.connect(f"gpu{i}", f"gpu{j}", LinkKind.NVLINK, lanes * 25 * GB, count=lanes)
    return b.build()


@settings(max_examples=40, deadline=None)
@given(random_machines())
def test_rings_are_hamiltonian_and_respect_capacity(t):
    s = nccl_rings(t)
    assert_hamiltonian(s.rings, t.num_ranks)
    s.validate(t.num_ranks)
    # NVLink rings exactly when an NVLink Hamiltonian cycle exists
    assert (s.link_kind is LinkKind.NVLINK) == nvlink_cycle_exists(t)
    if s.link_kind is LinkKind.NVLINK:
        nv = nvlink_pairs(t)
        assert all(h in nv for ring in s.rings for h in hops(ring))
    # all rings at their reported bandwidth fit on every link at once
    used = {}
    for bw, walk in zip(s.bandwidths, s.hops):
        assert bw > 0
        for path in walk:
            for p in zip(path, path[1:]):
                used[p] = used.get(p, 0) + bw
    for p, total in used.items():
        assert total <= t.links[p].bandwidth * (1 + 1e-9)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=2, max_size=3), st.integers(0, 1))
def test_hierarchy_rings_and_trees_span(fanouts, _):
    levels = [(f, 100.0 / (k + 1)) for k, f in enumerate(fanouts)]
    t = build_hierarchy(levels)
    n = t.num_ranks
    s = nccl_rings(t)
    assert_hamiltonian(s.rings, n)
    host = [t.devices[g].host for g in t.ranks]
    for ring in s.rings:  # contiguous per node
        assert sum(1 for a, b in hops(ring) if host[a] != host[b]) == (s.nodes if s.nodes > 1 else 0)
    dbt = double_binary_tree(t, s)
    for par in dbt.parents:
        check_parent_tree(par, range(n))
