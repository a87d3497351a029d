"""MXNet-proposal binary trees: balanced, spanning, NVLink-only on DGX-1V, penalty spreads links."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from arborcc.errors import SynthesisError
from arborcc.synth.binary_trees import (
    DEFAULT_THRESHOLD_BYTES,
    BinaryTree,
    binary_tree_schedule,
    kernighan_lin_bisection,
)
from arborcc.topology.allocation import induced
from arborcc.topology.cluster import build_cluster
from arborcc.topology.machines import build_machine
from arborcc.topology.model import GB, Device, DeviceKind, LinkKind, TopologyBuilder


def assert_balanced_spanning(tree: BinaryTree, n: int) -> None:
    """Independent check: parent pointers form a tree over 0..n-1 rooted at tree.root,
    levels add each rank once, a rank gains at most one child per level, and there are
    ceil(log2 n) levels."""
    assert sorted(tree.parent) == list(range(n))
    assert tree.parent[tree.root] is None
    for v in range(n):
        seen, u = set(), v
        while tree.parent[u] is not None:
            assert u not in seen
            seen.add(u)
            u = tree.parent[u]
        assert u == tree.root
    assert tree.depth == len(tree.levels) == (math.ceil(math.log2(n)) if n > 1 else 0)
    present = {tree.root}
    for lv in tree.levels:
        assert len({p for p, _ in lv}) == len(lv)  # one new child per vertex per level
        for p, c in lv:
            assert p in present and c not in present and tree.parent[c] == p
        present |= {c for _, c in lv}
    assert present == set(range(n))
    for v, kids in tree.children.items():
        assert all(tree.parent[k] == v for k in kids)
    assert len(tree.edges) == n - 1


def nvlink_graph(t):
    n = t.num_ranks
    return {(i, j) for i in range(n) for j in range(n)
            if i != j and (l := t.link(t.ranks[i], t.ranks[j])) is not None and l.kind is LinkKind.NVLINK}


def test_dgx1v_one_balanced_tree_per_root_on_nvlink_only():
    # The proposal's trees are embeddings of a balanced binary tree in the NVLink link
    # topology ("the sequence of sends forms a spanning tree" of Fig. 6 (d)): on DGX-1V
    # every edge of every root's tree must be a direct NVLink.
    t = build_machine("dgx1v")
    sched = binary_tree_schedule(t)
    assert [tr.root for tr in sched.trees] == list(range(8))
    nv = nvlink_graph(t)
    for tr in sched.trees:
        assert_balanced_spanning(tr, 8)
        assert tr.depth == 3
        for e in tr.edges:
            assert (e.child, e.parent) in nv
            assert e.link_kind is LinkKind.NVLINK and len(e.path) == 2  # a direct link
            assert e.bandwidth == t.link(t.ranks[e.child], t.ranks[e.parent]).bandwidth


def test_first_tree_prefers_double_nvlinks():
    # maximum weight: with no penalty yet, the first tree should use mostly 2-lane links
    t = build_machine("dgx1v")
    tree = binary_tree_schedule(t, roots=[0]).trees[0]
    lanes = [t.link(t.ranks[e.child], t.ranks[e.parent]).count for e in tree.edges]
    assert sum(lanes) >= 11  # 7 edges; a hybrid cube-mesh admits a mostly double-link tree


def link_usage(schedule):
    """How many trees use each undirected rank pair."""
    use = {}
    for t in schedule.trees:
        for e in t.edges:
            key = (min(e.child, e.parent), max(e.child, e.parent))
            use[key] = use.get(key, 0) + 1
    return use


def test_link_usage_penalty_spreads_edges():
    t = build_machine("dgx1v")
    with_penalty = link_usage(binary_tree_schedule(t, penalty=0.7))
    without = link_usage(binary_tree_schedule(t, penalty=1.0))
    assert len(with_penalty) > len(without)  # more distinct links
    assert max(with_penalty.values()) < max(without.values())  # less reuse of the busiest link
    assert sum(with_penalty.values()) == sum(without.values()) == 8 * 7


def test_single_tree_below_threshold_all_trees_above():
    t = build_machine("dgx1v")
    sched = binary_tree_schedule(t)
    assert sched.threshold_bytes == DEFAULT_THRESHOLD_BYTES == 40_000_000
    assert sched.trees_for(1 << 20) == sched.trees[:1]
    assert sched.trees_for(DEFAULT_THRESHOLD_BYTES) == sched.trees
    small = binary_tree_schedule(t, threshold_bytes=1024)
    assert len(small.trees_for(4096)) == 8


def test_allocation_without_nvlink_tree_falls_back_to_pcie_routes():
    # allocation 1,4,5,6: GPU1's only NVLink peer is GPU5, but a balanced tree over 4
    # ranks gives its root two children, so GPU1's tree needs a PCIe route; GPU5 has
    # NVLink peers 1,4,6 and gets an NVLink-only tree.
    m = build_machine("dgx1v")
    t = induced(m, ["gpu1", "gpu4", "gpu5", "gpu6"])
    sched = binary_tree_schedule(t)
    for tr in sched.trees:
        assert_balanced_spanning(tr, 4)
    kinds0 = {e.link_kind for e in sched.trees[0].edges}
    assert kinds0 - {LinkKind.NVLINK}
    pcie_edge = next(e for e in sched.trees[0].edges if e.link_kind is not LinkKind.NVLINK)
    assert len(pcie_edge.path) > 2 and "cpu0" in pcie_edge.path
    assert all(e.link_kind is LinkKind.NVLINK for e in sched.trees[2].edges)  # rooted at gpu5


def test_nvswitch_box_trees_use_the_switch():
    t = build_machine("dgx-a100")
    sched = binary_tree_schedule(t, roots=[0, 5])
    for tr in sched.trees:
        assert_balanced_spanning(tr, 8)
        assert all(e.path[1] == "nvswitch0" and e.link_kind is LinkKind.NVLINK for e in tr.edges)


def test_multi_node_trees_cross_the_network_as_little_as_possible():
    # no NVLink tree spans two nodes; the PCIe/network fallback still keeps KL's clusters
    # inside nodes, so exactly one edge crosses between the two DGX-1V (for the first
    # trees: the penalty later wears NVLink weights down to the network's)
    t = build_cluster("dgx1v", 2)
    sched = binary_tree_schedule(t, roots=[0, 9])
    host = [t.devices[g].host for g in t.ranks]
    for tr in sched.trees:
        assert_balanced_spanning(tr, 16)
        assert sum(1 for e in tr.edges if host[e.child] != host[e.parent]) == 1
        assert all(e.link_kind is LinkKind.NVLINK for e in tr.edges if host[e.child] == host[e.parent])


def test_kernighan_lin_finds_the_light_cut_and_keeps_the_fixed_vertex():
    # two 4-cliques of weight 5 joined by single light edges; start split is mixed
    w = np.zeros((8, 8))
    left, right = [0, 2, 4, 6], [1, 3, 5, 7]
    for grp in (left, right):
        for a, b in itertools.combinations(grp, 2):
            w[a, b] = w[b, a] = 5
    w[0, 1] = w[1, 0] = 1
    w[6, 7] = w[7, 6] = 1
    for fixed in (0, 3):
        a, b = kernighan_lin_bisection(w, range(8), fixed)
        assert fixed in a and len(a) == len(b) == 4
        assert {frozenset(a), frozenset(b)} == {frozenset(left), frozenset(right)}


def test_bad_inputs():
    t = build_machine("dgx1v")
    with pytest.raises(SynthesisError):
        binary_tree_schedule(t, penalty=0)
    with pytest.raises(SynthesisError):
        binary_tree_schedule(t, roots=[8])
    with pytest.raises(SynthesisError):
        binary_tree_schedule(t, roots=[1, 1])
    b = TopologyBuilder("split")
    for i in range(3):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, 0, i))
    b.connect("gpu0", "gpu1", LinkKind.NVLINK, 25 * GB)
    with pytest.raises(SynthesisError, match="cannot reach"):
        binary_tree_schedule(b.build())


# ------------------------------------------------------------------ properties ---
@st.composite
def random_machines(draw):
    """n GPUs on one PCIe switch (all reachable), random NVLinks of 1-2 lanes."""
    n = draw(st.integers(2, 7))
    b = TopologyBuilder("random")
    b.add_device(Device("pcie0", DeviceKind.PCIE_SWITCH, 0, 0))
    for i in range(n):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, 0, i))
        b.connect(f"gpu{i}", "pcie0", LinkKind.PCIE, 12 * GB)
    for i, j in itertools.combinations(range(n), 2):
        lanes = draw(st.integers(0, 2))
        if lanes:
            b.connect(f"gpu{i}", f"gpu{j}", LinkKind.NVLINK, lanes * 25 * GB, count=lanes)
    return b.build()


def nvlink_tree_exists(nv, vertices, root) -> bool:
    """Spec-level brute force: a balanced tree in levels using NVLink edges only."""
    vs = frozenset(vertices)
    if len(vs) == 1:
        return True
    size_a = (len(vs) + 1) // 2
    for others in itertools.combinations(sorted(vs - {root}), size_a - 1):
        a = frozenset(others) | {root}
        b = vs - a
        if not nvlink_tree_exists(nv, a, root):
            continue
        if any((root, v) in nv and nvlink_tree_exists(nv, b, v) for v in b):
            return True
    return False


@settings(max_examples=40, deadline=None)
@given(random_machines(), st.sampled_from([0.5, 0.7, 1.0]))
def test_every_tree_spans_and_uses_nvlink_when_possible(t, penalty):
    n = t.num_ranks
    sched = binary_tree_schedule(t, penalty=penalty)
    assert [tr.root for tr in sched.trees] == list(range(n))
    nv = nvlink_graph(t)
    for tr in sched.trees:
        assert_balanced_spanning(tr, n)
        nvlink_only = all((e.child, e.parent) in nv for e in tr.edges)
        assert nvlink_only == nvlink_tree_exists(nv, range(n), tr.root)
