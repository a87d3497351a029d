"""Arborescence packings: acceptance values from the Blink paper, validity of every
packing (trees span the ranks, links within capacity), and properties on random
topologies against the independently tested bounds."""

from __future__ import annotations

import itertools
import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_bounds import dgx1, ring, small_topologies, star

import arborcc.synth.native as native
from arborcc.errors import SynthesisError, VerificationError
from arborcc.synth.bounds import allgather_bound, broadcast_bound, reduce_bound
from arborcc.synth.packing import (
    min_arborescence,
    pack_allgather,
    pack_broadcast,
    pack_reduce,
    pack_reducescatter,
)
from arborcc.synth.trees import Hop, Tree, TreePacking, check_packing, check_tree
from arborcc.topology.model import GB, Device, DeviceKind, LinkKind, TopologyBuilder


# --- the oracle ---------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(st.integers(2, 9), st.data())
def test_min_arborescence_matches_networkx(n, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    cost = rng.integers(1, 20, size=(n, n)).astype(float)
    cost[rng.random((n, n)) < 0.3] = np.inf
    for v in range(1, n):  # keep every vertex reachable from 0
        cost[v - 1, v] = min(cost[v - 1, v], 25.0)
    root = data.draw(st.integers(0, n - 1))
    cost[:, root] = np.inf
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    for u, v in itertools.product(range(n), range(n)):
        if u != v and math.isfinite(cost[u, v]) and v != root:
            g.add_edge(u, v, weight=cost[u, v])
    # the path 0 -> 1 -> ... may enter the root: add a way around it from the root
    for v in range(n):
        if v != root and not g.has_edge(root, v):
            g.add_edge(root, v, weight=1000.0)
            cost[root, v] = 1000.0
    want = nx.minimum_spanning_arborescence(g).size(weight="weight")
    par = min_arborescence(cost, root)
    assert par[root] == -1
    got = sum(cost[par[v], v] for v in range(n) if v != root)
    assert got == pytest.approx(want)
    for v in range(n):  # an arborescence: every vertex leads to the root
        seen, u = set(), v
        while u != root:
            assert u not in seen
            seen.add(u)
            u = par[u]


def test_min_arborescence_reports_unreachable_vertices():
    cost = np.full((3, 3), np.inf)
    cost[0, 1] = 1.0
    with pytest.raises(SynthesisError, match="cannot be reached"):
        min_arborescence(cost, 0)


def _random_split_graph(rng, ranks: int, relays: int):
    """A random digraph over ranks and relays, split as the packing's oracle splits it:
    arcs into rank k end at node ranks + relays + k (ranks receive but do not forward)."""
    n = ranks + relays
    pairs = [(a, b) for a in range(n) for b in range(n) if a != b and rng.random() < 0.4]
    if not pairs:
        pairs = [(0, 1)]
    src = np.array([a for a, _ in pairs])
    head = np.array([n + b if b < ranks else b for _, b in pairs])
    return n, src, head


def _scipy_routes(size, n, ranks, src, head, length):
    """Route costs between ranks and predecessors by scipy's Dijkstra (CSR by tail, head)."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import dijkstra

    order = np.lexsort((head, src))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=size))])
    csr = sp.csr_matrix((length[order], head[order], indptr), shape=(size, size))
    dist, pred = dijkstra(csr, directed=True, indices=np.arange(ranks), return_predecessors=True)
    return dist[:, n:], pred


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 7), st.integers(0, 5), st.booleans(), st.integers(0, 2**32 - 1))
def test_native_routes_match_scipy_dijkstra_ties_included(ranks, relays, fractional, seed):
    # small integer lengths make many routes of equal cost: the predecessors chosen on
    # ties must be scipy's, so that trees (and programs) stay what they were
    rng = np.random.default_rng(seed)
    n, src, head = _random_split_graph(rng, ranks, relays)
    length = rng.integers(1, 4, len(src)).astype(float) * (0.1 if fractional else 1.0)
    graph = native.RouteGraph(n + ranks, n, np.arange(ranks), src, head)
    D, pred = graph.routes(length, 0.0)
    want_D, want_pred = _scipy_routes(n + ranks, n, ranks, src, head, length)
    assert np.array_equal(D, want_D)
    assert np.array_equal(pred, want_pred)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 6), st.integers(0, 4), st.integers(0, 2**32 - 1))
def test_native_seed_trees_match_a_python_reference(ranks, relays, seed):
    # the seed rounds in Python on scipy's routes: cheapest tree (min arborescence over
    # route costs), routes of its hops, loads, then lengths grown on the used links
    rng = np.random.default_rng(seed)
    n, src, head = _random_split_graph(rng, ranks, relays)
    for k in range(ranks):  # keep every rank reachable: a ring over the ranks
        if not ((src == k) & (head == n + (k + 1) % ranks)).any():
            src, head = np.append(src, k), np.append(head, n + (k + 1) % ranks)
    cap = rng.integers(1, 5, len(src)).astype(float)
    graph = native.RouteGraph(n + ranks, n, np.arange(ranks), src, head)
    arc_of = {(int(a), int(b)): e for e, (a, b) in enumerate(zip(src, head))}
    got = graph.seed_trees(cap, 1e-9, list(range(ranks)), 2)
    length, want = 1.0 / cap, []
    for _ in range(2):
        for r in range(ranks):
            D, pred = _scipy_routes(n + ranks, n, ranks, src, head, length + 1e-9)
            parent = min_arborescence(D, r)
            hops, load = [], np.zeros(len(src))
            for v, u in enumerate(parent):
                if u >= 0:
                    node, arcs = n + v, []
                    while node != u:
                        arcs.append(arc_of[(int(pred[u][node]), node)])
                        node = int(pred[u][node])
                    hops.append((u, v, tuple(arcs[::-1])))
                    load[list(arcs)] += 1.0
            want.append((r, tuple(hops), load))
            length = length * (1.0 + load / cap * cap.min())
    assert len(got) == len(want)
    for (root, hops, load), (r, h, l) in zip(got, want):
        assert (root, hops) == (r, h)
        assert np.array_equal(load, l)


def test_native_trees_report_unreachable_ranks():
    # rank 0 -> rank 1 only: rank 2 is reached by nobody, rank 1 reaches no rank
    graph = native.RouteGraph(6, 3, np.arange(3), np.array([0]), np.array([4]))
    assert graph.cheapest_trees(np.ones(1), 0.0, [0]) == ("some rank unreached", 0)
    assert graph.cheapest_trees(np.ones(1), 0.0, [1]) == ("reaches no rank", 1)


# --- acceptance: Blink's DGX-1 numbers -------------------------------------------------------

@pytest.mark.parametrize("root", range(8))
def test_dgx1v_nvlink_broadcast_six_trees_every_root(root):
    t = dgx1()
    p = pack_broadcast(t, root, links="nvlink")
    check_packing(p, t, "nvlink")
    assert p.rate == pytest.approx(150 * GB)
    assert p.ratio == pytest.approx(1.0)
    # Blink reports 6 unit trees; a tree over 2-lane links may carry 2 units, so <= 6
    assert p.num_trees <= 6
    units = [tr.weight / (25 * GB) for tr in p.trees]
    assert all(u == pytest.approx(round(u)) and round(u) >= 1 for u in units)


@pytest.mark.parametrize("root", [0, 5])
def test_dgx1v_blink_mwu_finds_the_six_trees(root):
    t = dgx1()
    p = pack_broadcast(t, root, links="nvlink", method="mwu")
    check_packing(p, t, "nvlink")
    assert p.method == "mwu"
    assert p.rate == pytest.approx(150 * GB)
    assert p.num_trees <= 6


def test_dgx1p_nvlink_broadcast_four_trees():
    t = dgx1(p100=True, lane_gbps=20)
    for root in (0, 6):
        p = pack_broadcast(t, root, links="nvlink")
        check_packing(p, t, "nvlink")
        assert p.bound.rate == pytest.approx(80 * GB)
        assert p.rate == pytest.approx(80 * GB)
        assert p.num_trees == 4


def test_dgx1v_with_pcie_uses_relays_and_beats_nvlink_only():
    t = dgx1()
    p = pack_broadcast(t, 0, links="all", minimize_trees=False)
    check_packing(p, t)
    assert p.rate == pytest.approx(p.bound.rate, rel=1e-6)
    assert p.rate > 150 * GB
    relays = {r for tr in p.trees for h in tr.hops for r in h.relays}
    assert relays and all(not t.devices[r].is_gpu for r in relays)
    few = pack_broadcast(t, 0, links="all")  # Blink's tree-count program keeps 99%
    check_packing(few, t)
    assert few.rate >= 0.99 * few.bound.rate * (1 - 1e-9)
    assert few.num_trees <= p.num_trees


def test_switch_box_broadcast_reaches_the_port_rate():
    t = star(8, 300.0)
    p = pack_broadcast(t, "gpu3", links="nvlink")
    check_packing(p, t, "nvlink")
    assert p.bound.rate_gbps == pytest.approx(300.0)
    assert p.rate_gbps == pytest.approx(300.0)
    # every hop goes GPU -> switch -> GPU, and no port carries more than 300 GB/s
    assert all(h.path[1] == "nvswitch0" and len(h.path) == 3 for tr in p.trees for h in tr.hops)
    assert max(p.link_loads().values()) <= 300 * GB * (1 + 1e-9)


def test_relay_that_would_have_to_duplicate_halves_the_rate():
    # root -> switch -> {a, b}: max-flow says 10 GB/s to each, but a switch does not copy
    # data, so two routes share root -> switch (the cut bound needs in >= out at relays)
    from arborcc.topology.model import Link

    b = TopologyBuilder("fanout")
    for name in ("gpu0", "gpu1", "gpu2"):
        b.add_device(Device(name, DeviceKind.GPU, 0, int(name[-1])))
    b.add_device(Device("sw", DeviceKind.PCIE_SWITCH, 0, 0))
    for s, d in [("gpu0", "sw"), ("sw", "gpu1"), ("sw", "gpu2")]:
        b.add_link(Link(s, d, LinkKind.PCIE, 10 * GB))
    t = b.build()
    p = pack_broadcast(t, 0, minimize_trees=False)
    check_packing(p, t)
    assert p.bound.rate_gbps == pytest.approx(10.0)
    assert p.rate_gbps == pytest.approx(5.0)


# --- reduce, all-gather, reduce-scatter ----------------------------------------------------------

def test_reduce_packs_in_trees_on_an_asymmetric_graph():
    from arborcc.topology.model import Link

    b = TopologyBuilder("asym")
    for i in range(4):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, 0, i))
    for s, d, bw in [(0, 1, 30), (1, 0, 5), (0, 2, 30), (2, 0, 7), (1, 2, 4), (2, 1, 1),
                     (2, 3, 9), (3, 2, 6), (3, 0, 2), (0, 3, 3)]:
        b.add_link(Link(f"gpu{s}", f"gpu{d}", LinkKind.NVLINK, bw * GB))
    t = b.build()
    p = pack_reduce(t, 0, minimize_trees=False)
    check_packing(p, t)
    assert all(tr.inward for tr in p.trees)
    assert p.rate == pytest.approx(reduce_bound(t, 0).rate, rel=1e-6)
    assert p.rate < broadcast_bound(t, 0).rate
    # data flows towards the root: every hop into gpu0 is the last of its chain
    assert all(h.src != "gpu0" for tr in p.trees for h in tr.hops)


def test_allgather_dgx1v_nvlink_reaches_the_bound():
    t = dgx1()
    p = pack_allgather(t, "nvlink", minimize_trees=False)
    check_packing(p, t, "nvlink")
    bound = allgather_bound(t, "nvlink")
    assert p.rate == pytest.approx(bound.rate, rel=1e-6)
    assert p.algbw == pytest.approx(8 * p.rate)
    assert set(p.roots) == set(t.ranks)
    for r in t.ranks:
        assert p.rate_of(r) >= p.rate * (1 - 1e-9)
    few = pack_allgather(t, "nvlink", minimize_trees=True, threshold=0.01)
    check_packing(few, t, "nvlink")
    assert few.rate >= 0.99 * bound.rate * (1 - 1e-9)
    assert few.num_trees < p.num_trees


def test_reducescatter_on_a_switch_box_is_the_reversed_allgather():
    t = star(6, 100.0)
    rs = pack_reducescatter(t)
    check_packing(rs, t)
    assert all(tr.inward for tr in rs.trees)
    assert rs.rate >= 0.99 * rs.bound.rate * (1 - 1e-9)
    assert rs.bound.rate_gbps == pytest.approx(100.0 / 5)


def test_switch_box_allgather_is_blinks_one_hop_trees():
    # Blink 3.5: on NVSwitch each GPU roots one tree whose leaves are all other GPUs
    t = star(8, 300.0)
    p = pack_allgather(t, "nvlink")
    check_packing(p, t, "nvlink")
    assert p.algbw_gbps == pytest.approx(300.0 * 8 / 7)
    assert p.num_trees == 8
    assert all(tr.depth() == 1 and tr.edges[0][0] == tr.root for tr in p.trees)


def test_ring_allgather_uses_both_directions():
    t = ring(5, 10.0)
    p = pack_allgather(t)
    check_packing(p, t)
    assert p.rate_gbps == pytest.approx(2 * 10.0 / 4, rel=1e-6)


# --- limits and errors -------------------------------------------------------------------------------

def test_round_budget_returns_a_valid_partial_packing():
    t = dgx1()
    p = pack_broadcast(t, 0, "all", method="mwu", max_rounds=1, allow_partial=True)
    assert p.limit_hit
    check_packing(p, t)  # still a valid (if slower) packing


def test_errors():
    t = dgx1()
    with pytest.raises(SynthesisError, match="unknown packing method"):
        pack_broadcast(t, 0, method="rings")
    with pytest.raises(SynthesisError, match="threshold"):
        pack_broadcast(t, 0, threshold=1.5)
    b = TopologyBuilder("apart")
    for i in range(3):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, 0, i))
    b.connect("gpu0", "gpu1", LinkKind.NVLINK, 25 * GB)
    b.connect("gpu1", "gpu2", LinkKind.PCIE, 12 * GB)
    apart = b.build()
    with pytest.raises(SynthesisError, match="gpu2 cannot be reached from gpu0 over nvlink"):
        pack_broadcast(apart, 0, links="nvlink")
    with pytest.raises(SynthesisError, match="cannot be reached"):
        pack_allgather(apart, links="nvlink")


# --- the checker catches broken packings ----------------------------------------------------------

def _chain_packing(t, weight):
    hops = tuple(Hop(f"gpu{i}", f"gpu{i + 1}", (f"gpu{i}", f"gpu{i + 1}")) for i in range(len(t.ranks) - 1))
    tree = Tree("gpu0", hops, weight)
    return TreePacking("broadcast", ("gpu0",), (tree,), weight, broadcast_bound(t, 0), "hand", 0.0)


def test_check_packing_rejects_overload_and_bad_trees():
    t = ring(4, 10.0)
    check_packing(_chain_packing(t, 10 * GB), t)
    with pytest.raises(VerificationError, match="carries"):
        check_packing(_chain_packing(t, 11 * GB), t)
    hop = lambda a, c: Hop(f"gpu{a}", f"gpu{c}", (f"gpu{a}", f"gpu{c}"))  # noqa: E731
    with pytest.raises(VerificationError, match="does not reach gpu3"):
        check_tree(Tree("gpu0", (hop(0, 1), hop(1, 2)), 1.0), t)
    with pytest.raises(VerificationError, match="two parents"):
        check_tree(Tree("gpu0", (hop(0, 1), hop(2, 1), hop(1, 2), hop(0, 3)), 1.0), t)
    with pytest.raises(VerificationError, match="not a link"):
        check_tree(Tree("gpu0", (hop(0, 1), hop(0, 2), hop(0, 3)), 1.0), t)
    with pytest.raises(VerificationError, match="cycle"):
        check_tree(Tree("gpu0", (hop(0, 3), hop(1, 2), hop(2, 1)), 1.0), t)
    through = Hop("gpu0", "gpu2", ("gpu0", "gpu1", "gpu2"))
    with pytest.raises(VerificationError, match="passes through rank gpu1"):
        check_tree(Tree("gpu0", (hop(0, 1), through, hop(0, 3)), 1.0), t)
    idle = t.with_ranks(["gpu0", "gpu2", "gpu3"])  # gpu1 belongs to another job
    with pytest.raises(VerificationError, match="gpu1, a GPU outside the job"):
        check_tree(Tree("gpu0", (through, hop(0, 3)), 1.0), idle)
    bad_rate = _chain_packing(t, 5 * GB)
    object.__setattr__(bad_rate, "rate", 6 * GB)
    with pytest.raises(VerificationError, match="claims"):
        check_packing(bad_rate, t)


# --- built-in machines ------------------------------------------------------------------------------

def test_builtin_machines_reach_their_bounds():
    machines = pytest.importorskip("arborcc.topology.machines")
    for name, links in [("dgx1v", "nvlink"), ("dgx1p", "nvlink"), ("dgx-a100", "nvlink"), ("dgx2", "nvlink"),
                        ("dgx-h100", "all")]:
        t = machines.build_machine(name)
        p = pack_broadcast(t, 0, links)
        check_packing(p, t, links)
        assert p.rate >= 0.99 * p.bound.rate * (1 - 1e-9), name
    t = machines.build_machine("dgx1v")
    assert pack_broadcast(t, 0, "nvlink").num_trees <= 6
    assert pack_broadcast(machines.build_machine("dgx1p"), 0, "nvlink").num_trees == 4


def test_allocation_packings_reach_their_bounds():
    machines = pytest.importorskip("arborcc.topology.machines")
    allocation = pytest.importorskip("arborcc.topology.allocation")
    t = machines.build_machine("dgx1v")
    for gpus in (["gpu1", "gpu4", "gpu5", "gpu6"], ["gpu0", "gpu1", "gpu2"], ["gpu2", "gpu3", "gpu6", "gpu7"]):
        sub = allocation.induced(t, gpus)
        p = pack_broadcast(sub, 0, "all", minimize_trees=False)
        check_packing(p, sub)
        assert p.rate == pytest.approx(p.bound.rate, rel=1e-6)


def test_two_node_cluster_allgather():
    cluster = pytest.importorskip("arborcc.topology.cluster")
    t = cluster.build_cluster("dgx1v", 2)
    p = pack_allgather(t, minimize_trees=False)
    check_packing(p, t)
    assert p.rate == pytest.approx(p.bound.rate, rel=1e-6)


# --- properties --------------------------------------------------------------------------------------

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(small_topologies(symmetric=True), st.data())
def test_exact_broadcast_reaches_the_maxflow_bound(t, data):
    root = data.draw(st.sampled_from(t.ranks))
    p = pack_broadcast(t, root, minimize_trees=False)
    check_packing(p, t)
    g = nx.DiGraph()
    for l in t.links.values():
        g.add_edge(l.src, l.dst, capacity=l.bandwidth)
    want = min(nx.maximum_flow_value(g, root, v) for v in t.ranks if v != root)
    assert p.rate == pytest.approx(want, rel=1e-6)
    few = pack_broadcast(t, root, threshold=0.05)
    check_packing(few, t)
    assert few.rate >= 0.95 * want * (1 - 1e-9)


@SETTINGS
@given(small_topologies(symmetric=True, max_gpus=5), st.data())
def test_mwu_broadcast_is_near_the_bound(t, data):
    root = data.draw(st.sampled_from(t.ranks))
    eps = 0.1
    p = pack_broadcast(t, root, method="mwu", eps=eps, minimize_trees=False)
    check_packing(p, t)
    assert p.rate >= (1 - eps) ** 3 * p.bound.rate


@SETTINGS
@given(small_topologies(symmetric=True, max_gpus=5))
def test_allgather_and_reducescatter_packings_reach_the_cut_bound(t):
    from test_bounds import brute_allgather

    want = brute_allgather(t)
    ag = pack_allgather(t, minimize_trees=False)
    check_packing(ag, t)
    assert ag.rate == pytest.approx(want, rel=1e-6)
    rs = pack_reducescatter(t, minimize_trees=True, threshold=0.02)
    check_packing(rs, t)
    assert rs.rate >= 0.98 * brute_allgather(t, reverse=True) * (1 - 1e-6)  # MILP feasibility tolerance
