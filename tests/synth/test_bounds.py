"""Optimal-rate bounds: known values on hand-built machines, and properties against
independent computations (networkx max-flow, brute-force cut enumeration)."""

from __future__ import annotations

import itertools

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborcc.errors import SynthesisError
from arborcc.synth.bounds import allgather_bound, allreduce_bound, broadcast_bound, reduce_bound, reducescatter_bound
from arborcc.synth.flowgraph import flow_graph, select_links
from arborcc.topology.model import GB, Device, DeviceKind, Link, LinkKind, TopologyBuilder

# NVLink lanes of DGX-1V in nvidia-smi numbering (NVIDIA DGX-1 with Tesla V100 system architecture
# white paper, WP-08437-002, 2017)
DGX1V = (
    (0, 1, 1, 2, 2, 0, 0, 0),
    (1, 0, 2, 1, 0, 2, 0, 0),
    (1, 2, 0, 2, 0, 0, 1, 0),
    (2, 1, 2, 0, 0, 0, 0, 1),
    (2, 0, 0, 0, 0, 1, 1, 2),
    (0, 2, 0, 0, 1, 0, 2, 1),
    (0, 0, 1, 0, 1, 2, 0, 2),
    (0, 0, 0, 1, 2, 1, 2, 0),
)


def dgx1(lane_gbps: float = 25.0, p100: bool = False, pcie_gbps: float = 12.0, qpi_gbps: float = 10.0):
    """DGX-1 built by hand: NVLink mesh, PCIe switches {0,1},{2,3},{4,5},{6,7}, 2 CPUs, QPI."""
    b = TopologyBuilder("dgx1p" if p100 else "dgx1v")
    for i in range(8):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, 0, i))
    for i in range(8):
        for j in range(i + 1, 8):
            lanes = min(DGX1V[i][j], 1) if p100 else DGX1V[i][j]
            if lanes:
                b.connect(f"gpu{i}", f"gpu{j}", LinkKind.NVLINK, lanes * lane_gbps * GB, count=lanes)
    for c in range(2):
        b.add_device(Device(f"cpu{c}", DeviceKind.CPU, 0, c))
    for s in range(4):
        b.add_device(Device(f"pcie{s}", DeviceKind.PCIE_SWITCH, 0, s))
        b.connect(f"pcie{s}", f"cpu{s // 2}", LinkKind.PCIE, pcie_gbps * GB)
        for g in (2 * s, 2 * s + 1):
            b.connect(f"gpu{g}", f"pcie{s}", LinkKind.PCIE, pcie_gbps * GB)
    b.connect("cpu0", "cpu1", LinkKind.INTER_SOCKET, qpi_gbps * GB)
    return b.build()


def star(n: int = 8, gbps: float = 300.0):
    """A DGX-A100-like box: ``n`` GPUs each joined to one NVSwitch node by ``gbps``."""
    b = TopologyBuilder(f"star{n}")
    b.add_device(Device("nvswitch0", DeviceKind.NVSWITCH, 0, 0))
    for i in range(n):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, 0, i))
        b.connect(f"gpu{i}", "nvswitch0", LinkKind.NVLINK, gbps * GB, count=12)
    return b.build()


def ring(n: int, gbps: float = 10.0):
    b = TopologyBuilder(f"ring{n}")
    for i in range(n):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, 0, i))
    for i in range(n):
        b.connect(f"gpu{i}", f"gpu{(i + 1) % n}", LinkKind.NVLINK, gbps * GB)
    return b.build()


@st.composite
def small_topologies(draw, symmetric: bool = True, max_gpus: int = 6):
    """3-6 GPUs, random lane counts (a spanning path keeps them connected), and an
    optional switch joined to a random subset of GPUs."""
    n = draw(st.integers(3, max_gpus))
    b = TopologyBuilder("random")
    for i in range(n):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, 0, i))
    order = draw(st.permutations(range(n)))
    pairs = {}
    for a, c in zip(order, order[1:]):
        pairs[(min(a, c), max(a, c))] = draw(st.integers(1, 3))
    for i, j in itertools.combinations(range(n), 2):
        if (i, j) not in pairs:
            pairs[(i, j)] = draw(st.integers(0, 2))
    for (i, j), lanes in pairs.items():
        if not lanes:
            continue
        if symmetric:
            b.connect(f"gpu{i}", f"gpu{j}", LinkKind.NVLINK, lanes * 10 * GB, count=lanes)
        else:
            back = draw(st.integers(1, 3))
            b.add_link(Link(f"gpu{i}", f"gpu{j}", LinkKind.NVLINK, lanes * 10 * GB, count=lanes))
            b.add_link(Link(f"gpu{j}", f"gpu{i}", LinkKind.NVLINK, back * 10 * GB, count=back))
    if draw(st.booleans()):
        b.add_device(Device("sw0", DeviceKind.PCIE_SWITCH, 0, 0))
        members = draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=n, unique=True))
        for m in members:
            b.connect(f"gpu{m}", "sw0", LinkKind.PCIE, draw(st.sampled_from([5, 12, 20])) * GB)
    return b.build()


def nx_graph(topology, links="all"):
    chosen, _ = select_links(topology, links)
    g = nx.DiGraph()
    g.add_nodes_from(topology.ranks)
    for l in chosen:
        g.add_edge(l.src, l.dst, capacity=l.bandwidth)
    return g


def brute_allgather(topology, reverse: bool = False) -> float:
    """min over vertex sets S with a rank inside and one outside of cap(out S)/|S n ranks|."""
    g = nx_graph(topology)
    if reverse:
        g = g.reverse(copy=True)
    nodes = list(g.nodes)
    ranks = set(topology.ranks)
    best = float("inf")
    for k in range(1, len(nodes)):
        for S in itertools.combinations(nodes, k):
            S = set(S)
            inside = len(S & ranks)
            if inside == 0 or inside == len(ranks):
                continue
            out = sum(d["capacity"] for u, v, d in g.edges(data=True) if u in S and v not in S)
            best = min(best, out / inside)
    return best


# --- known values ------------------------------------------------------------------------

@pytest.mark.parametrize("root", range(8))
def test_dgx1v_nvlink_broadcast_is_six_lanes(root):
    b = broadcast_bound(dgx1(), root, links="nvlink")
    assert b.rate == pytest.approx(6 * 25 * GB)
    assert b.algbw_gbps == pytest.approx(150.0)
    assert b.root == f"gpu{root}"
    # the tight cut is a real cut: its links leave it and their capacity is the bound
    assert all(a in b.cut and c not in b.cut for a, c in b.cut_links)
    assert b.cut_capacity == pytest.approx(b.rate)


def test_dgx1p_nvlink_broadcast_is_four_lanes():
    assert broadcast_bound(dgx1(p100=True, lane_gbps=20), 3, links="nvlink").rate == pytest.approx(80 * GB)


def test_pcie_adds_one_gpu_link_to_the_dgx1_broadcast():
    # every GPU has 6 NVLink lanes and one 12 GB/s PCIe link: 150 + 12 would be the in-cut of
    # a GPU, but the bound is the smallest max-flow; compare with networkx
    t = dgx1()
    g = nx_graph(t)
    want = min(nx.maximum_flow_value(g, "gpu0", v) for v in t.ranks if v != "gpu0")
    assert broadcast_bound(t, "gpu0").rate == pytest.approx(want)
    assert broadcast_bound(t, "gpu0").rate > broadcast_bound(t, "gpu0", links="nvlink").rate


def test_star_switch_box_bounds():
    t = star(8, 300.0)
    b = broadcast_bound(t, 0, links="nvlink")
    assert b.rate_gbps == pytest.approx(300.0)
    ag = allgather_bound(t)
    # the set of 7 GPUs and the switch sends every shard through one 300 GB/s port
    assert ag.rate_gbps == pytest.approx(300.0 / 7)
    assert ag.algbw_gbps == pytest.approx(300.0 * 8 / 7)
    assert ag.busbw / GB == pytest.approx(300.0)
    assert ag.cut_ranks == 7
    assert reducescatter_bound(t).algbw == pytest.approx(ag.algbw)


def test_ring_allgather_and_allreduce():
    n, bw = 5, 10.0
    t = ring(n, bw)
    ag = allgather_bound(t)
    assert ag.rate_gbps == pytest.approx(2 * bw / (n - 1))
    ar = allreduce_bound(t, tree_roots=["gpu0"])
    assert ar.rs_ag_algbw / GB == pytest.approx(bw * n / (n - 1))
    # reduce + broadcast: each non-root rank receives R and sends R over 2n arcs of bw
    assert ar.tree_algbw / GB == pytest.approx(bw * n / (n - 1), rel=1e-6)
    assert ar.algbw >= ar.rs_ag_algbw
    assert ar.busbw == pytest.approx(ar.algbw * 2 * (n - 1) / n)


def test_allreduce_on_a_switch_needs_point_to_point_routes():
    # a switch that could duplicate and reduce would allow 300 GB/s reduce+broadcast;
    # with point-to-point routes the ports carry both directions' traffic
    ar = allreduce_bound(star(8, 300.0), tree_roots=["gpu0"])
    assert ar.tree_algbw / GB == pytest.approx(300.0 * 8 / 14, rel=1e-6)
    assert ar.rs_ag_algbw / GB == pytest.approx(300.0 * 8 / 14)


def test_reduce_differs_from_broadcast_on_an_asymmetric_graph():
    b = TopologyBuilder("asym")
    for i in range(3):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, 0, i))
    for s, d, bw in [(0, 1, 30), (1, 0, 5), (0, 2, 30), (2, 0, 7), (1, 2, 1), (2, 1, 1)]:
        b.add_link(Link(f"gpu{s}", f"gpu{d}", LinkKind.NVLINK, bw * GB))
    t = b.build()
    assert broadcast_bound(t, 0).rate_gbps == pytest.approx(31)
    r = reduce_bound(t, 0)
    assert r.rate_gbps == pytest.approx(6)  # gpu1: 5 direct + 1 via gpu2
    assert all(a not in r.cut and c in r.cut for a, c in r.cut_links)  # links enter the root's side


def test_link_filters():
    t = dgx1()
    assert len(select_links(t, "nvlink")[0]) == 2 * 16
    assert len(select_links(t, [LinkKind.PCIE])[0]) == 2 * 12
    assert select_links(t, lambda l: l.kind is LinkKind.NVLINK)[0] == select_links(t, "nvlink")[0]
    with pytest.raises(SynthesisError, match="unknown link selection"):
        select_links(t, "infiniband")


def split_by_nvlink():
    """gpu0-gpu1 over NVLink; gpu2 reaches gpu0 only through a PCIe switch."""
    b = TopologyBuilder("split")
    for i in range(3):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, 0, i))
    b.connect("gpu0", "gpu1", LinkKind.NVLINK, 25 * GB)
    b.add_device(Device("sw", DeviceKind.PCIE_SWITCH, 0, 0))
    b.connect("gpu2", "sw", LinkKind.PCIE, 12 * GB)
    b.connect("gpu0", "sw", LinkKind.PCIE, 12 * GB)
    return b.build()


def test_errors_are_clear():
    t = dgx1()
    nvlink_only = [LinkKind.NVLINK]
    split = split_by_nvlink()
    with pytest.raises(SynthesisError, match="gpu2 cannot be reached from gpu0 over nvlink"):
        broadcast_bound(split, 0, links=nvlink_only)
    with pytest.raises(SynthesisError, match="cannot be reached"):
        allgather_bound(split, links="nvlink")
    assert broadcast_bound(split, 0).rate_gbps == pytest.approx(12)
    with pytest.raises(SynthesisError, match="not a rank"):
        broadcast_bound(t, "cpu0")
    with pytest.raises(SynthesisError, match="does not exist"):
        broadcast_bound(t, 8)
    one = TopologyBuilder("one")
    one.add_device(Device("gpu0", DeviceKind.GPU, 0, 0))
    with pytest.raises(SynthesisError, match="at least 2 ranks"):
        broadcast_bound(one.build(), 0)


def test_rank_order_does_not_change_the_bound():
    t = dgx1()
    shuffled = t.with_ranks(list(reversed(t.ranks)))
    assert allgather_bound(shuffled).rate == pytest.approx(allgather_bound(t).rate)
    assert broadcast_bound(shuffled, "gpu5").rate == pytest.approx(broadcast_bound(t, "gpu5").rate)


def test_flow_graph_keeps_ranks_first_and_drops_untouched_devices():
    g = flow_graph(dgx1(), "nvlink")
    assert g.rank_ids == tuple(f"gpu{i}" for i in range(8))
    assert g.n == 8  # CPUs and PCIe switches have no NVLink


# --- built-in machines ----------------------------------------------------------------------

def test_builtin_machines():
    machines = pytest.importorskip("arborcc.topology.machines")
    v = machines.build_machine("dgx1v")
    assert broadcast_bound(v, 0, "nvlink").rate_gbps == pytest.approx(150.0)
    p = machines.build_machine("dgx1p")
    lane = p.links[("gpu0", "gpu1")].bandwidth
    assert broadcast_bound(p, 0, "nvlink").rate == pytest.approx(4 * lane)
    a = machines.build_machine("dgx-a100")
    assert broadcast_bound(a, 0, "nvlink").rate_gbps == pytest.approx(300.0)
    assert allgather_bound(a, "nvlink").algbw_gbps == pytest.approx(300.0 * 8 / 7)
    d2 = machines.build_machine("dgx2")
    assert allgather_bound(d2, "nvlink").algbw_gbps == pytest.approx(150.0 * 16 / 15)


def test_cluster_bound_is_limited_by_the_network():
    cluster = pytest.importorskip("arborcc.topology.cluster")
    t = cluster.build_cluster("dgx-a100", 2)
    b = broadcast_bound(t, 0)
    # leaving node 0 costs 8 NIC paths, each capped by its PCIe link
    assert b.rate < broadcast_bound(t.with_ranks([r for r in t.ranks if r.startswith("n0.")]), 0).rate
    nic_pcie = min(l.bandwidth for l in t.links.values() if l.dst.startswith("n0.nic"))
    nic_net = min(l.bandwidth for l in t.links.values() if l.src.startswith("n0.nic") and l.kind is LinkKind.NETWORK)
    assert b.rate == pytest.approx(8 * min(nic_pcie, nic_net))


# --- properties --------------------------------------------------------------------------------

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(small_topologies(symmetric=False), st.data())
def test_broadcast_and_reduce_equal_networkx_maxflow(t, data):
    root = data.draw(st.sampled_from(t.ranks))
    g = nx_graph(t)
    want_b = min(nx.maximum_flow_value(g, root, v) for v in t.ranks if v != root)
    want_r = min(nx.maximum_flow_value(g, v, root) for v in t.ranks if v != root)
    b, r = broadcast_bound(t, root), reduce_bound(t, root)
    assert b.rate == pytest.approx(want_b, rel=1e-9)
    assert r.rate == pytest.approx(want_r, rel=1e-9)
    # the reported cut really has that capacity
    caps = {(l.src, l.dst): l.bandwidth for l in t.links.values()}
    assert sum(caps[l] for l in b.cut_links) == pytest.approx(want_b)
    assert root in b.cut and set(t.ranks) - b.cut


@SETTINGS
@given(small_topologies(symmetric=False))
def test_allgather_and_reducescatter_equal_brute_force_cuts(t):
    ag, rs = allgather_bound(t), reducescatter_bound(t)
    assert ag.rate == pytest.approx(brute_allgather(t), rel=1e-9)
    assert rs.rate == pytest.approx(brute_allgather(t, reverse=True), rel=1e-9)
    assert ag.algbw == pytest.approx(t.num_ranks * ag.rate)
    inside = len(ag.cut & set(t.ranks))
    assert 0 < inside == ag.cut_ranks < t.num_ranks
    assert ag.cut_capacity / inside == pytest.approx(ag.rate)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_topologies(symmetric=True, max_gpus=5))
def test_tree_allreduce_bound_is_below_each_half(t):
    root = t.ranks[0]
    ar = allreduce_bound(t, tree_roots=[root])
    assert ar.tree_algbw <= min(broadcast_bound(t, root).rate, reduce_bound(t, root).rate) * (1 + 1e-6)
    # every non-root rank receives R and sends R through its own links
    for v in t.ranks[1:]:
        out = sum(l.bandwidth for l in t.out_links(v))
        assert ar.tree_algbw <= out * (1 + 1e-6)
    # reduce-scatter + all-gather is a tree schedule too (one tree per shard root)
    assert ar.rs_ag_algbw == pytest.approx(1 / (1 / ar.reducescatter.algbw + 1 / ar.allgather.algbw))


def test_gpus_outside_the_job_do_not_relay():
    t = ring(4, 10.0)
    assert broadcast_bound(t, "gpu0").rate_gbps == pytest.approx(20.0)
    job = t.with_ranks(["gpu0", "gpu2", "gpu3"])  # gpu1 belongs to another job
    assert broadcast_bound(job, "gpu0").rate_gbps == pytest.approx(10.0)
    assert "gpu1" not in flow_graph(job).nodes


def flow_lp_tree_rate(t, root: str) -> float:
    """The tree all-reduce rate as one LP with explicit per-destination flows (two
    commodities per rank: broadcast r -> v on c_b, reduce v -> r on c_r), solved by
    scipy - the formulation the cutting-plane solver must agree with."""
    from scipy.optimize import linprog

    g = flow_graph(t)
    E, n, r = len(g.src), g.n, g.index[root]
    others = [int(v) for v in g.ranks if int(v) != r]
    relays = [u for u in range(n) if u not in set(int(i) for i in g.ranks)]
    K = len(others)
    nvar = 1 + 2 * E + 2 * K * E  # R | c_b | c_r | broadcast flows | reduce flows
    A_eq, b_eq, A_ub, b_ub = [], [], [], []

    def balance(base, node, rhs_r=0.0):
        row = [0.0] * nvar
        for e in range(E):
            row[base + e] += float(g.src[e] == node) - float(g.dst[e] == node)
        row[0] = rhs_r
        return row

    for k, v in enumerate(others):
        for base, s, d in ((1 + 2 * E + k * E, r, v), (1 + 2 * E + (K + k) * E, v, r)):
            for u in range(n):  # out - in = R at s, -R at d, 0 elsewhere
                A_eq.append(balance(base, u, -1.0 if u == s else (1.0 if u == d else 0.0)))
                b_eq.append(0.0)
            for e in range(E):
                row = [0.0] * nvar
                row[base + e] = 1.0
                row[(1 if base < 1 + 2 * E + K * E else 1 + E) + e] = -1.0
                A_ub.append(row)
                b_ub.append(0.0)
    for base in (1, 1 + E):
        for u in relays:
            A_eq.append(balance(base, u))
            b_eq.append(0.0)
    for e in range(E):
        row = [0.0] * nvar
        row[1 + e] = row[1 + E + e] = 1.0
        A_ub.append(row)
        b_ub.append(g.cap[e] / GB)
    obj = [0.0] * nvar
    obj[0] = -1.0
    res = linprog(obj, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq, method="highs")
    assert res.status == 0
    return -res.fun * GB


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_topologies(symmetric=False, max_gpus=5), st.data())
def test_tree_allreduce_cutting_planes_equal_the_flow_lp(t, data):
    root = data.draw(st.sampled_from(t.ranks))
    ar = allreduce_bound(t, tree_roots=[root])
    assert ar.tree_algbw == pytest.approx(flow_lp_tree_rate(t, root), rel=1e-6)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_topologies(symmetric=True, max_gpus=5))
def test_pruned_allreduce_bound_is_the_max_over_every_root(t):
    every = allreduce_bound(t, tree_roots=list(t.ranks))
    pruned = allreduce_bound(t)
    assert pruned.algbw == pytest.approx(max(every.rs_ag_algbw, max(every.tree_rates.values())), rel=1e-6)
    assert len(pruned.tree_rates) <= len(every.tree_rates)


def test_symmetric_machines_solve_one_root_per_orbit():
    full = allreduce_bound(dgx1(), tree_roots=[f"gpu{i}" for i in range(8)])
    assert len(set(round(v / GB, 6) for v in full.tree_rates.values())) == 1  # vertex-transitive
    assert len(allreduce_bound(dgx1()).tree_rates) <= 2  # DGX-1: two orbits of GPUs at most
    assert len(allreduce_bound(star(8)).tree_rates) <= 1


# --- the bounds' integer max-flows (igraph) ----------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(st.integers(2, 9), st.integers(0, 2**32 - 1))
def test_integer_max_flow_and_cut_side_equal_scipys(n, seed):
    # random multigraphs with small integer capacities (many minimum cuts): the value and
    # the source side closest to the source are unique, so they must equal scipy's
    import numpy as np
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import breadth_first_order, maximum_flow

    from arborcc.synth.flowgraph import IntegerMaxFlow

    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 3 * n))
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    cap = rng.integers(0, 4, len(src))
    network = IntegerMaxFlow(n, src, dst)
    sinks = list(range(1, n))
    got = network.cut_sides(cap, 0, sinks)
    matrix = csr_matrix((cap.astype(np.int32), (src, dst)), shape=(n, n))
    matrix.sum_duplicates()
    for t, (value, side) in zip(sinks, got):
        res = maximum_flow(matrix, 0, t)
        assert value == res.flow_value
        residual = (matrix - res.flow).tocsr()
        residual.data = (residual.data > 0).astype(np.int8)
        residual.eliminate_zeros()
        want = np.zeros(n, dtype=bool)
        want[breadth_first_order(residual, 0, directed=True, return_predecessors=False)] = True
        assert np.array_equal(side, want)
    assert all(side is None for _, side in network.cut_sides(cap, 0, sinks, 0))
    assert [side is None for _, side in network.cut_sides(cap, 0, sinks, 2)] == [v >= 2 for v, _ in got]


def test_cut_side_is_the_one_closest_to_the_source():
    # every arc of the path 0 -> 1 -> 2 -> 3 is a minimum cut; the side closest to 0 is {0}
    # (igraph's own partition is the side closest to the sink, {0, 1, 2})
    import numpy as np

    from arborcc.synth.flowgraph import min_cut_sides

    [(value, side)] = min_cut_sides(4, np.array([0, 1, 2]), np.array([1, 2, 3]), np.array([1, 1, 1]), 0, [3])
    assert value == 1 and side.tolist() == [True, False, False, False]
    [(value, side)] = min_cut_sides(4, np.array([0, 1, 2]), np.array([1, 2, 3]), np.array([2, 2, 1]), 0, [3])
    assert value == 1 and side.tolist() == [True, True, True, False]


@settings(max_examples=40, deadline=None)
@given(st.integers(3, 8), st.integers(0, 2**32 - 1))
def test_integer_max_flow_is_exact_up_to_2_to_the_53(n, seed):
    # capacities near 2**48 whose sum stays below 2**53: values and sides equal an exact
    # integer max-flow's (networkx on Python ints), down to the last unit
    import numpy as np
    from networkx.algorithms.flow import edmonds_karp

    from arborcc.synth.flowgraph import IntegerMaxFlow

    rng = np.random.default_rng(seed)
    m = 30
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    cap = rng.integers(2**47, 2**48, len(src)) | 1
    assert int(cap.sum()) < 2**53
    exact = nx.DiGraph()
    exact.add_nodes_from(range(n))
    for a, b, c in zip(src.tolist(), dst.tolist(), cap.tolist()):
        if exact.has_edge(a, b):
            exact[a][b]["capacity"] += c
        else:
            exact.add_edge(a, b, capacity=c)
    sinks = list(range(1, n))
    for t, (value, side) in zip(sinks, IntegerMaxFlow(n, src, dst).cut_sides(cap, 0, sinks)):
        residual = edmonds_karp(exact, 0, t)
        assert value == residual.graph["flow_value"]
        reach, stack = {0}, [0]
        while stack:
            u = stack.pop()
            for v, arc in residual[u].items():
                if arc["capacity"] - arc["flow"] > 0 and v not in reach:
                    reach.add(v)
                    stack.append(v)
        assert side.tolist() == [v in reach for v in range(n)]
        assert int(cap[side[src] & ~side[dst]].sum()) == value


def test_integer_max_flow_refuses_capacities_it_cannot_keep_exact():
    import numpy as np

    from arborcc.synth.flowgraph import IntegerMaxFlow

    network = IntegerMaxFlow(3, np.array([0, 1, 0]), np.array([1, 2, 2]))
    assert network.cut_sides(np.array([2**52, 2**52 - 1, 0]), 0, [2])[0][0] == 2**52 - 1
    with pytest.raises(SynthesisError, match="too large"):
        network.cut_sides(np.array([2**52, 2**52, 0]), 0, [2])
    with pytest.raises(SynthesisError, match="negative"):
        network.cut_sides(np.array([1, -1, 0]), 0, [2])
