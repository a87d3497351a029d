"""Optimal rates of collectives on a capacitated topology (the targets synthesis aims at).

All rates are bytes/s; ``algbw`` follows nccl-tests (``algbw = S / t``, where ``S`` is
the buffer size, the *total* size for all-gather and reduce-scatter).

Every bound is computed on the :mod:`~arborcc.synth.flowgraph` of the topology (relays
forward, ranks hold buffers) with its exact integer max-flows.

Theorems used
-------------
* **Broadcast** from ``r``: the best rate is ``min over ranks v of maxflow(r, v)``
  (Edmonds' branching theorem, 1973; Lovasz 1976 for the proof by growing one
  arborescence at a time). With relay vertices whose in-capacity is at least their
  out-capacity (true of every balanced, e.g. full-duplex symmetric, topology) the same value is reached
  by packing Steiner arborescences whose relay hops are point-to-point routes
  (Bang-Jensen, Frank & Jackson, "Preserving and increasing local edge-connectivity in
  mixed graphs", SIAM J. Discrete Math. 8(2), 1995, https://doi.org/10.1137/S0895480192239670:
  splitting off relays keeps every rank-to-rank connectivity). Edmonds, "Edge-disjoint
  branchings", Combinatorial Algorithms, 1973; Lovasz, "On two minimax theorems in
  graph", J. Combinatorial Theory B 21(2), 1976, https://doi.org/10.1016/0095-8956(76)90049-6.
  **Reduce** to ``r`` is broadcast on the reversed graph.
* **All-gather** with each rank sending its shard of ``M/N`` bytes at rate ``x``: for
  every vertex set ``S`` that holds at least one rank and misses at least one, the
  shards of the ranks in ``S`` must leave ``S``, so ``x * |S n ranks| <= cap(out of S)``.
  Hence ``x* = min_S cap(out of S) / |S n ranks|`` and ``t = (M/N)/x*``, ``algbw = N x*``.
  Edmonds' theorem for arborescences with *different* roots (k arc-disjoint
  arborescences rooted at r_1..r_k exist iff every non-empty set X has in-degree at
  least the number of roots outside X) shows the bound is reached on GPU-only graphs
  by one packing of out-trees per rank; with relays it is reached after splitting them
  off (the ForestColl construction: Zhao et al., "ForestColl: Efficient Collective
  Communications on Heterogeneous Network Fabrics", 2024, https://arxiv.org/abs/2402.06787).
  On a GPU-only graph the formula
  is exactly ``min over proper non-empty S of ranks of cap(out of S)/|S|``: a set
  holding every rank has no constraint, and relays are absent.
  **Reduce-scatter** is the same on the reversed graph.
* ``x*`` is computed exactly without enumerating sets, by the parametric min-cut of
  :func:`arborcc.synth.flowgraph.min_ratio_cut` (Dinkelbach's iteration, at most N
  integer max-flows per sink orbit).
* **Gather** to ``r`` (``algbw = S / t``, ``S`` the root's output): every other rank
  moves its block of ``S/N`` bytes into ``r``; at ``x`` bytes/s per block this is one
  single-commodity flow (every byte has the same sink), which exists iff every vertex
  set ``A`` without ``r`` has ``cap(out of A) >= x |A n ranks|`` (max-flow min-cut), so
  ``x* = min_A cap(out of A) / |A n ranks|``, the same ratio cut with the other ranks
  as sources and ``r`` the only sink; ``algbw = N x*``. Relays conserve flow, so they
  only forward. **Scatter** from ``r`` is gather on the reversed graph.
* **All-reduce**: (a) reduce-scatter then all-gather, ``t = M/algbw_rs + M/algbw_ag``
  (ForestColl; Patarasuk & Yuan's ring is the homogeneous special case); (b) Blink's
  reduce to a root pipelined with a broadcast from it, ``t = M/R`` where ``R`` is the
  largest rate for which the links' capacity can be split between a reduce of rate R
  and a broadcast of rate R (a flow LP with generated cut constraints, solved warm
  with HiGHS), maximised over roots. Both are reported (Patarasuk & Yuan, "Bandwidth
  optimal all-reduce algorithms for clusters of workstations", J. Parallel Distrib.
  Comput. 69(2), 2009, https://doi.org/10.1016/j.jpdc.2008.09.002; Blink, MLSys 2020,
  section 3.3, https://arxiv.org/abs/1910.04940).

The reported bound is recomputed in floating point from the tight cut.
:func:`collective_bound` dispatches on the collective's name.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from arborcc.errors import SolverLimitError, SynthesisError
from arborcc.memo import CallMemo
from arborcc.ir.collectives import busbw_factor
from arborcc.synth.flowgraph import (FlowGraph, IntegerMaxFlow, LinkSelector, RatioCut, RealMaxFlow,
                                     capacity_unit, check_reachable, check_strongly_connected, flow_graph,
                                     integer_capacities, min_cut_sides, min_ratio_cut, root_index)
from arborcc.synth.hosts import Cluster, cluster_of
from arborcc.synth.lp import INF, GrowingLP
from arborcc.topology.model import GB, Topology

#: solves of the tree all-reduce LP's cutting-plane loop (each adds the violated cuts);
#: counts, not times, so a bound does not depend on the machine's load. The benchmark
#: set's (``benchmarks/synthesis/xml_snapshot.py``) converge within 25.
CUT_ROUNDS = 500
#: solver iterations of the all-to-all maximum-concurrent-flow LP (at most
#: :data:`EXACT_LP_RANKS` ranks: 4 x DGX H100 takes about 5,000, 0.3 CPU seconds)
FLOW_LP_ITERATIONS = 500_000


# --- results -----------------------------------------------------------------------

@dataclass(frozen=True)
class Bound:
    """An optimal rate and the cut that makes it tight.

    ``rate``: for broadcast/reduce the buffer's bytes per second (= ``algbw``); for
    all-gather/reduce-scatter the rate ``x`` at which each rank's shard moves, so
    ``algbw = num_ranks * rate``. ``cut`` is the vertex set ``S`` whose boundary is
    tight: for broadcast the side holding the root, for reduce the side holding the
    root (links *into* it are tight), for all-gather a set whose out-links carry every
    shard of ``cut_ranks`` ranks, for reduce-scatter a set whose in-links do; for
    all-to-all ``rate`` is the rate of each ordered pair's block (``algbw = num_ranks *
    rate``).

    ``exact``: the rate is the optimum over every algorithm (``basis`` says why); else an
    upper bound. The cut bounds of broadcast, reduce, all-gather, reduce-scatter, gather
    and scatter are exact (the theorems in the module doc reach them).
    """

    collective: str
    rate: float
    algbw: float
    num_ranks: int
    root: str | None
    cut: frozenset[str]
    cut_links: tuple[tuple[str, str], ...]
    cut_capacity: float
    cut_ranks: int
    links: str
    solve_time: float = 0.0
    exact: bool = True
    basis: str = "the minimum cut (reached by a packing of trees or a flow)"

    @property
    def algbw_gbps(self) -> float:
        return self.algbw / GB

    @property
    def rate_gbps(self) -> float:
        return self.rate / GB

    @property
    def busbw(self) -> float:
        """nccl-tests bus bandwidth (:func:`arborcc.ir.collectives.busbw_factor`)."""
        return self.algbw * busbw_factor(self.collective, self.num_ranks)

    def time(self, size: float) -> float:
        """Seconds to move a buffer of ``size`` bytes at this bound (nccl-tests size)."""
        return size / self.algbw


@dataclass(frozen=True)
class AllreduceBound:
    """Two all-reduce bounds: reduce-scatter + all-gather, and tree reduce + broadcast.

    ``rs_ag_algbw = 1 / (1/reducescatter.algbw + 1/allgather.algbw)``;
    ``tree_algbw`` is the best pipelined reduce+broadcast rate, through ``tree_root``,
    among the roots whose LP was solved (``tree_rates``); roots left out could not beat
    ``algbw`` (0.0 and ``None`` when no root could beat reduce-scatter + all-gather).
    ``algbw`` is the better of the two and ``best`` its name; ``tree_split`` is
    ``tree_root``'s ``(c_b, c_r)`` link split (see :func:`tree_allreduce_split`).
    """

    reducescatter: Bound
    allgather: Bound
    rs_ag_algbw: float
    tree_algbw: float
    tree_root: str | None
    tree_rates: dict
    links: str
    solve_time: float = 0.0
    tree_split: tuple | None = None
    #: when the time limit stopped the root search: the largest rate ceiling
    #: (:func:`_tree_rate_ceiling`) among the roots left unsolved, else 0.0
    unsolved_ceiling: float = 0.0

    @property
    def algbw(self) -> float:
        return max(self.rs_ag_algbw, self.tree_algbw, self.unsolved_ceiling)

    #: all-reduce's optimum over every algorithm is open (Zhou & Sun, "On the Computation
    #: Rate of All-Reduce", 2026, https://arxiv.org/abs/2602.22482): this is the best rate of
    #: the two families, exact within them
    exact = False

    @property
    def basis(self) -> str:
        if self.unsolved_ceiling > max(self.rs_ag_algbw, self.tree_algbw):
            return ("reduce-scatter + all-gather, or a ceiling of reduce + broadcast through the roots whose LP "
                    "the time limit left unsolved (an upper bound)")
        return "the best of reduce-scatter + all-gather and reduce + broadcast through one root (exact within them)"

    @property
    def best(self) -> str:
        # equal up to rounding (common on symmetric machines): the simpler family
        return "rs+ag" if self.rs_ag_algbw >= self.tree_algbw * (1 - 1e-9) else "tree"

    @property
    def algbw_gbps(self) -> float:
        return self.algbw / GB

    @property
    def busbw(self) -> float:
        return self.algbw * busbw_factor("allreduce", self.allgather.num_ranks)


# --- broadcast / reduce ---------------------------------------------------------------

def single_source_bound(g: FlowGraph, r: int, collective: str, root_name: str) -> Bound:
    """min over ranks v != r of maxflow(r, v) on ``g`` (Edmonds), with its tight cut.

    ``g`` may be a reversed graph (then this is the reduce bound). ``collective`` only
    names the result.
    """
    t0 = time.perf_counter()
    if g.reversed_of_original:  # data flows into r: every rank must reach it
        check_reachable(g.reversed(), r, f"{collective} to {root_name}", into=True)
    else:
        check_reachable(g, r, f"{collective} from {root_name}")
    unit = capacity_unit(g.cap, float(g.cap.sum()))
    sinks = [v for v in g.orbits(fixed=r).representatives(g.ranks) if v != r]  # equal max-flows in an orbit
    best_val, side = None, None
    for val, sink_side in min_cut_sides(g.n, g.src, g.dst, integer_capacities(g.cap, unit), r, sinks):
        if best_val is None or val < best_val:
            best_val, side = val, sink_side
    arcs = [i for i in range(len(g.src)) if side[g.src[i]] and not side[g.dst[i]]]
    cut_cap = float(g.cap[arcs].sum())
    cut = frozenset(g.nodes[i] for i in np.nonzero(side)[0])
    return Bound(collective, cut_cap, cut_cap, len(g.ranks), root_name, cut,
                 tuple(g.original_link(i) for i in arcs), cut_cap,
                 sum(1 for i in g.ranks if side[i]), g.links, time.perf_counter() - t0)


def broadcast_bound(topology: Topology, root: str | int, links: LinkSelector = "all") -> Bound:
    """Best broadcast rate from ``root``: ``min_v maxflow(root, v)`` (Edmonds 1973).

    ``root`` is a rank id or a rank position. ``cut`` is the root's side of the tightest
    cut and ``cut_links`` the links leaving it.
    """
    g = flow_graph(topology, links)
    r = root_index(g, root)
    return single_source_bound(g, r, "broadcast", g.nodes[r])


def reduce_bound(topology: Topology, root: str | int, links: LinkSelector = "all") -> Bound:
    """Best reduce rate to ``root``: broadcast on the reversed graph, ``min_v maxflow(v, root)``.

    ``cut`` is the root's side of the tightest cut, ``cut_links`` the links entering it.
    """
    g = flow_graph(topology, links)
    r = root_index(g, root)
    return single_source_bound(g.reversed(), r, "reduce", g.nodes[r])


# --- all-gather / reduce-scatter --------------------------------------------------------

def allgather_cut_bound(g: FlowGraph, collective: str) -> Bound:
    """``x* = min_S cap(out S)/|S n ranks|`` by parametric min-cut + Dinkelbach (see module
    doc; every rank a source, one sink per orbit of the automorphisms, which all fix the
    super source and so have the same max-flows)."""
    t0 = time.perf_counter()
    check_strongly_connected(g, collective)
    ranks = [int(i) for i in g.ranks]
    cut = min_ratio_cut(g, ranks, g.orbits().representatives(ranks), collective)
    return _cut_bound(g, collective, None, cut, t0)


def _cut_bound(g: FlowGraph, collective: str, root: str | None, cut: RatioCut, t0: float) -> Bound:
    """The :class:`Bound` of a ratio cut: rate = cap(out of S) / ranks in S, in floats."""
    arcs = np.nonzero(g.leaving(cut.members))[0]
    k = int(sum(1 for r in g.ranks if cut.members[r]))
    cut_cap = float(g.cap[arcs].sum())
    x = cut_cap / k
    N = len(g.ranks)
    return Bound(collective, x, N * x, N, root, frozenset(g.nodes[i] for i in np.nonzero(cut.members)[0]),
                 tuple(g.original_link(int(i)) for i in arcs), cut_cap, k, g.links, time.perf_counter() - t0)


def allgather_bound(topology: Topology, links: LinkSelector = "all") -> Bound:
    """Best all-gather: per-shard rate ``x* = min_S cap(out of S)/|S n ranks|``; ``algbw = N x*``.

    ``cut`` is a minimising ``S`` (it holds ``cut_ranks`` ranks and misses one);
    ``cut_links`` are the links leaving it. See the module doc for the theorem.
    """
    return allgather_cut_bound(flow_graph(topology, links), "allgather")


def reducescatter_bound(topology: Topology, links: LinkSelector = "all") -> Bound:
    """Best reduce-scatter: all-gather on the reversed graph (``cut_links`` enter ``cut``)."""
    return allgather_cut_bound(flow_graph(topology, links).reversed(), "reducescatter")


# --- gather / scatter ----------------------------------------------------------------

def gather_cut(g: FlowGraph, r: int, collective: str, with_flow: bool = True) -> tuple[Bound, RatioCut]:
    """The gather bound into node ``r`` of ``g`` (scatter: ``g`` reversed) and the ratio
    cut with (``with_flow``) its single-sink max-flow (module doc): every other rank a
    source, ``r`` the only sink."""
    t0 = time.perf_counter()
    if g.reversed_of_original:
        check_reachable(g.reversed(), r, collective)
    else:
        check_reachable(g, r, collective, into=True)
    cut = min_ratio_cut(g, [int(v) for v in g.ranks if int(v) != r], [r], collective, with_flow=with_flow)
    return _cut_bound(g, collective, g.nodes[r], cut, t0), cut


def gather_bound(topology: Topology, root: str | int, links: LinkSelector = "all") -> Bound:
    """Best gather to ``root`` (a rank id or position): ``rate`` is the per-rank block
    rate ``x* = min_A cap(out of A) / |A n ranks|`` over sets ``A`` without the root,
    ``algbw = N x*``. ``cut`` is a minimising ``A``, ``cut_links`` the links leaving it."""
    g = flow_graph(topology, links)
    return gather_cut(g, root_index(g, root), "gather", with_flow=False)[0]


def scatter_bound(topology: Topology, root: str | int, links: LinkSelector = "all") -> Bound:
    """Best scatter from ``root``: gather on the reversed graph (``cut_links`` enter ``cut``)."""
    g = flow_graph(topology, links)
    return gather_cut(g.reversed(), root_index(g, root), "scatter", with_flow=False)[0]


# --- all-reduce -----------------------------------------------------------------------

def tree_allreduce_split(g: FlowGraph, r: int, max_rounds: int = CUT_ROUNDS) -> tuple[float, np.ndarray, np.ndarray]:
    """``(R, c_b, c_r)``: the largest ``R`` for which a reduce to node ``r`` and a broadcast from it, both of rate
    R, can run at once with point-to-point routes through relays (Blink section 3.3).

    LP: split the capacities, ``c_b + c_r <= c``; a broadcast of rate R from r must fit
    in ``c_b`` and a reduce of rate R into r in ``c_r``, i.e. (max-flow = min-cut, per
    destination; Edmonds) every cut around r has ``c_b`` leaving and ``c_r`` entering of
    at least R; and ``c_b``, ``c_r`` balanced at every relay, because a route entering a
    relay leaves it. Balanced relays are what makes each half packable (Bang-Jensen,
    Frank & Jackson 1995); without that constraint a switch would have to duplicate or
    reduce data. ``c_b`` and ``c_r`` (B/s per arc of ``g``) are the capacities each half
    may use: packing a broadcast on ``c_b`` and a reduce on ``c_r`` reaches ``R``.

    The cut constraints are exponentially many, so they are generated (a cutting-plane
    method, Dantzig, Fulkerson & Johnson 1954): start from the cuts around single
    ranks, solve, find each rank's minimum cut under the current split by max-flow,
    add the violated ones, re-solve warm; it ends when no cut is violated (within
    ``1e-7`` relative), which is the optimum of the per-destination flow LP, or raises
    :class:`SolverLimitError` after ``max_rounds`` solves (a count, not a time: the
    answer does not depend on the machine's load).
    Symmetry (:mod:`.symmetry`): the automorphisms fixing ``r`` permute the LP's
    constraints, so one variable per arc orbit suffices, and with orbit-constant
    splits one destination per rank orbit.
    """
    E, scale = len(g.src), float(g.cap.max())
    orbits = g.orbits(fixed=r)
    classes, cls = np.unique(orbits.arc, return_inverse=True)  # arc e -> its orbit's variable
    K = len(classes)
    c = g.cap[classes] / scale
    CB, CR = 1, 1 + K
    lp = GrowingLP(f"{g.name}: tree all-reduce LP (root {g.nodes[r]})")
    lp.add_cols(np.concatenate([[-1.0], np.zeros(2 * K)]), np.zeros(1 + 2 * K), np.concatenate([[INF], c, c]))
    lp.add_rows(np.full(K, -INF), c, [((CB + k, CR + k), (1.0, 1.0)) for k in range(K)])

    def per_class(arc_ids, sign: float = 1.0) -> np.ndarray:
        coef = np.zeros(K)
        np.add.at(coef, cls[arc_ids], sign)
        return coef

    arcs = np.arange(E)
    rank_nodes = set(int(i) for i in g.ranks)
    for u in orbits.representatives(range(g.n)):
        if u in rank_nodes:
            continue
        coef = per_class(arcs[g.src == u]) - per_class(arcs[g.dst == u])
        nz = np.nonzero(np.abs(coef) > 1e-12)[0]
        for base in (CB, CR):  # relays balanced: out - in = 0
            lp.add_row(0.0, 0.0, base + nz, coef[nz])
    # the LP's capacities are real numbers: cuts come from a real-valued max-flow; arc ids are kept
    forward = RealMaxFlow(g.n, g.src, g.dst)
    backward = RealMaxFlow(g.n, g.dst, g.src)
    seen: set[tuple[int, bytes]] = set()

    def add_cut(base: int, cut_arcs) -> bool:
        coef = per_class(np.asarray(cut_arcs, dtype=np.int64))
        key = (base, coef.tobytes())
        if key in seen:
            return False
        seen.add(key)
        nz = np.nonzero(coef)[0]
        lp.add_row(0.0, INF, np.concatenate([[0], base + nz]), np.concatenate([[-1.0], coef[nz]]))
        return True

    sinks = [v for v in orbits.representatives(g.ranks) if v != r]
    for v in sinks:
        add_cut(CB, arcs[g.dst == v])
        add_cut(CR, arcs[g.src == v])
    add_cut(CB, arcs[g.src == r])
    add_cut(CR, arcs[g.dst == r])
    for _ in range(max_rounds):
        x = lp.solve().x
        R = float(x[0])
        added = 0
        # broadcast: cuts of c_b leaving a set around r; reduce: cuts of c_r entering it,
        # i.e. leaving it on the reversed graph
        for base, h in ((CB, forward), (CR, backward)):
            caps = np.maximum(x[base:base + K], 0.0)[cls].tolist()
            for v in sinks:
                if h.value(r, v, caps) >= R * (1 - 1e-7):
                    continue
                added += add_cut(base, h.cut_arcs(r, v, caps))
        if not added:
            return R * scale, x[CB:CB + K][cls] * scale, x[CR:CR + K][cls] * scale
    raise SolverLimitError(f"{g.name}: tree all-reduce LP (root {g.nodes[r]}) still violated a cut "
                           f"after {max_rounds} rounds")


def _tree_rate_ceiling(g: FlowGraph, r: int) -> float:
    """An upper bound on :func:`tree_allreduce_split` for root ``r`` that costs no LP.

    Every other rank receives R of broadcast over its in-arcs and sends R of reduce
    over its out-arcs; the root sends R and receives R. Summed over the other ranks,
    ``c_b(into them) + c_r(out of them) >= 2 (N - 1) R`` while the two arc sets share
    only capacity ``c`` once: ``R <= c(arcs touching another rank) / (2 (N - 1))``.
    """
    others = np.zeros(g.n, dtype=bool)
    others[g.ranks] = True
    others[r] = False
    into = np.zeros(g.n)
    outof = np.zeros(g.n)
    np.add.at(into, g.dst, g.cap)
    np.add.at(outof, g.src, g.cap)
    touching = float(g.cap[others[g.src] | others[g.dst]].sum())
    single = min(float(into[others].min()), float(outof[others].min()), into[r], outof[r])
    return min(single, touching / (2 * (len(g.ranks) - 1)))


def allreduce_bound(topology: Topology, links: LinkSelector = "all",
                    tree_roots: Sequence[str] | None = None) -> AllreduceBound:
    """Both all-reduce bounds (see module doc).

    ``tree_roots``: roots whose reduce+broadcast LP is solved (each one reported in
    ``tree_rates``). By default every rank is a candidate but only one per orbit of
    the graph's automorphisms (:mod:`.symmetry`) is solved (the others have the same rate), best ceiling first
    (:func:`_tree_rate_ceiling`), and the search stops once no ceiling left can beat
    the best rate found so far nor reduce-scatter + all-gather: the reported all-reduce
    bound is still the maximum over all roots.
    """
    t0 = time.perf_counter()
    g = flow_graph(topology, links)
    rs = allgather_cut_bound(g.reversed(), "reducescatter")
    ag = allgather_cut_bound(g, "allgather")
    rs_ag = 1.0 / (1.0 / rs.algbw + 1.0 / ag.algbw)
    rates: dict[str, float] = {}
    splits: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if tree_roots is not None:
        todo, ceiling = [root_index(g, name) for name in tree_roots], {}
    else:
        ceiling = {int(v): _tree_rate_ceiling(g, int(v)) for v in g.ranks}
        todo = []
        if max(ceiling.values()) > rs_ag * (1 + 1e-9):
            todo = g.orbits().representatives(g.ranks)
            todo.sort(key=lambda v: -ceiling[v])
    unsolved = 0.0
    for i, v in enumerate(todo):
        if v in ceiling and ceiling[v] <= max([rs_ag, *rates.values()]) * (1 + 1e-9):
            break  # sorted: no later root can do better either
        try:
            rate, cap_b, cap_r = tree_allreduce_split(g, v)
        except SolverLimitError:
            if v not in ceiling:  # roots asked for by name: no ceiling to fall back on
                raise
            unsolved = max(ceiling[u] for u in todo[i:])  # an upper bound on every root left
            break
        rates[g.nodes[v]], splits[g.nodes[v]] = rate, (cap_b, cap_r)
    best_root = max(rates, key=lambda k: rates[k]) if rates else None
    return AllreduceBound(rs, ag, rs_ag, rates[best_root] if rates else 0.0, best_root, rates, g.links,
                          time.perf_counter() - t0, splits.get(best_root), unsolved)


# --- all-to-all -----------------------------------------------------------------------

#: jobs up to this many ranks get the exact maximum-concurrent-flow LP for all-to-all
EXACT_LP_RANKS = 32


def two_step_rate(cluster: Cluster) -> float:
    """The steady-state algbw (B/s) of the two-step routing, from its link loads alone
    (no program): a flow that certifies a cut bound it reaches."""
    t, H, G = cluster.topology, cluster.num_hosts, cluster.per_host
    n = H * G
    load: Counter = Counter()
    for m in range(H):
        for i in range(G):
            src = cluster.rank(m, i)
            for g in range(G):
                if g != i:  # H - 1 blocks for rail g's remote hosts, and one for GPU g itself
                    p = cluster.path(src, cluster.rank(m, g))
                    for link in zip(p, p[1:]):
                        load[link] += H
        for g in range(G):
            for k in range(H):
                if k != m:
                    p = cluster.path(cluster.rank(m, g), cluster.rank(k, g))
                    for link in zip(p, p[1:]):
                        load[link] += G
    worst = max(v / t.links[l].bandwidth for l, v in load.items())
    return n / worst  # loads are in blocks of S / n bytes


def _rank_groups(topology: Topology, g: FlowGraph) -> list[list[int]]:
    """Groups of ranks whose cuts bound an all-to-all: every rank, every host, and the
    hosts behind each network switch - one of each kind per orbit of the automorphisms
    (equivalent groups have equal cuts)."""
    orbits = g.orbits()
    host_ranks: dict[int, list[int]] = {}
    for r in g.ranks:
        h = topology.devices[g.nodes[r]].host
        if h is not None:
            host_ranks.setdefault(h, []).append(int(r))
    groups, seen = [], set()

    def add(label, ranks: list[int]) -> None:
        if label not in seen and 0 < len(ranks) < len(g.ranks):
            seen.add(label)
            groups.append(ranks)

    for r in g.ranks:
        add(("rank", int(orbits.node[r])), [int(r)])
    for ranks in host_ranks.values():
        add(("host", int(orbits.node[ranks[0]])), ranks)
    below: dict[int, set] = {}
    for a, b in zip(g.src.tolist(), g.dst.tolist()):
        if topology.devices[g.nodes[a]].host is None and topology.devices[g.nodes[b]].host is not None:
            below.setdefault(a, set()).add(topology.devices[g.nodes[b]].host)
    for switch, hosts in below.items():
        add(("switch", int(orbits.node[switch])), sorted(r for h in hosts for r in host_ranks.get(h, [])))
    return groups


def _group_cuts(g: FlowGraph, groups: list[list[int]], icap: np.ndarray, unit: float) -> list[tuple[float, np.ndarray]]:
    """Per group: the least capacity (B/s) leaving a vertex set that holds the group and
    no other rank, and that set - a max-flow from the group to the other ranks. One
    network serves every group: a super source feeding every rank and every rank feeding
    a super sink, the group's ranks open to the source and the others to the sink (a
    closed arc has capacity 0, so each cut is the group's own)."""
    s, t = g.n, g.n + 1
    ranks = np.asarray(g.ranks, dtype=np.int64)
    big = int(icap.sum()) + 1
    network = IntegerMaxFlow(g.n + 2, np.concatenate([g.src, np.full(len(ranks), s), ranks]),
                             np.concatenate([g.dst, ranks, np.full(len(ranks), t)]))
    cuts = []
    for group in groups:
        inside = np.isin(ranks, group)
        cap = np.concatenate([icap, np.where(inside, big, 0), np.where(inside, 0, big)])
        [(value, side)] = network.cut_sides(cap, s, [t])
        cuts.append((value * unit, side[:g.n]))
    return cuts


def alltoall_cut_bound(topology: Topology, links: LinkSelector = "all"):
    """The tightest cut around the groups of :func:`_rank_groups`, both directions:
    ``(graph, (x, members))`` with ``x`` the per-pair rate it allows."""
    g = flow_graph(topology, links)
    N = len(g.ranks)
    unit = capacity_unit(g.cap, float(g.cap.sum()))
    icap = integer_capacities(g.cap, unit)  # the reversed graph's arcs keep their capacities
    groups = _rank_groups(topology, g)
    best = (math.inf, None)
    for group, (out_cap, members), (in_cap, _) in zip(groups, _group_cuts(g, groups, icap, unit),
                                                      _group_cuts(g.reversed(), groups, icap, unit)):
        k = len(group)
        x = min(out_cap, in_cap) / (k * (N - k))
        if x < best[0]:
            best = (x, members)
    return g, best


def max_concurrent_flow(g, max_iterations: int = FLOW_LP_ITERATIONS) -> float:
    """The all-to-all rate ``x`` per ordered pair: the maximum concurrent flow, as an LP
    with one flow per source rank (HiGHS); exact. Raises :class:`SolverLimitError` after
    ``max_iterations`` solver iterations (a count, not a time)."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    N, E, V = len(g.ranks), len(g.src), g.n
    ranks = [int(r) for r in g.ranks]
    rows, cols, vals = [], [], []
    b_eq = []
    row = 0
    # conservation: for source s at node v: out - in = (N-1) x if v == s, -x if v is another rank, 0 else
    for s_i, s in enumerate(ranks):
        base = s_i * E
        for v in range(V):
            out_arcs = np.nonzero(g.src == v)[0]
            in_arcs = np.nonzero(g.dst == v)[0]
            rows += [row] * (len(out_arcs) + len(in_arcs))
            cols += (base + out_arcs).tolist() + (base + in_arcs).tolist()
            vals += [1.0] * len(out_arcs) + [-1.0] * len(in_arcs)
            demand = (N - 1) if v == s else (-1 if v in ranks else 0)
            if demand:
                rows.append(row)
                cols.append(N * E)
                vals.append(-float(demand))
            b_eq.append(0.0)
            row += 1
    a_eq = coo_matrix((vals, (rows, cols)), shape=(row, N * E + 1)).tocsr()
    scale = float(g.cap.max())
    cap_rows = np.repeat(np.arange(E), N)
    cap_cols = (np.arange(N)[None, :] * E + np.arange(E)[:, None]).ravel()
    a_ub = coo_matrix((np.ones(E * N), (cap_rows, cap_cols)), shape=(E, N * E + 1)).tocsr()
    c = np.zeros(N * E + 1)
    c[-1] = -1.0
    res = linprog(c, A_ub=a_ub, b_ub=g.cap / scale, A_eq=a_eq, b_eq=np.array(b_eq), bounds=(0, None),
                  method="highs", options={"maxiter": int(max_iterations)})
    if res.status == 1:
        raise SolverLimitError(f"{g.name}: the all-to-all flow LP hit its limit of {max_iterations} iterations")
    if res.status != 0:
        raise SynthesisError(f"{g.name}: the all-to-all flow LP ended: {res.message}")
    return float(res.x[-1]) * scale


def alltoall_bound(topology: Topology, links: LinkSelector = "all") -> Bound:
    """The all-to-all bound (:mod:`arborcc.synth.alltoall` explains it) as a :class:`Bound`:
    ``rate`` is the per-pair rate, ``algbw = N rate``; ``exact`` says whether it is the
    optimum (the LP, or a routing that reaches the cut) or only an upper bound (also when
    the LP hits its iteration limit: ``basis`` says so)."""
    t0 = time.perf_counter()
    g, (x, members) = alltoall_cut_bound(topology, links)
    N = len(g.ranks)
    exact, basis = False, "the least cut around a rank, a host or a switch's hosts (an upper bound)"
    if N <= EXACT_LP_RANKS:
        try:
            x_lp = max_concurrent_flow(g)
        except SolverLimitError as e:
            basis += f" - {e}"
        else:
            if x_lp < x:
                x, members = x_lp, None
            exact, basis = True, "the maximum concurrent flow (LP)"
    if not exact:
        try:
            rate = two_step_rate(cluster_of(topology))
        except SynthesisError:
            rate = 0.0
        if rate >= N * x * (1 - 1e-9):
            exact, basis = True, "the tightest cut, reached by the two-step routing's flow"
    cut = frozenset() if members is None else frozenset(g.nodes[i] for i in np.nonzero(members)[0])
    arcs = [] if members is None else np.nonzero(members[g.src] & ~members[g.dst])[0]
    k = 0 if members is None else int(sum(1 for r in g.ranks if members[r]))
    return Bound("alltoall", x, N * x, N, None, cut, tuple(g.original_link(int(i)) for i in arcs),
                 float(g.cap[arcs].sum()) if len(arcs) else 0.0, k, g.links, time.perf_counter() - t0,
                 exact=exact, basis=basis)


#: the bounds proven inside one sweep over sizes: ``compare`` and ``tune`` synthesize a
#: strategy whose file depends on the size once per size, and its bound does not
_proven = CallMemo("synth.bounds.proven", opened_by="compare and tune (remembering_bounds)",
                   purpose="a collective's bound on a topology, proven once for every size of a sweep")


@contextmanager
def remembering_bounds() -> Iterator[None]:
    """Within the block, :func:`collective_bound` proves each (topology, collective,
    root, links) once; the bounds are frozen, so every caller may share one."""
    with _proven.active():
        yield


def collective_bound(topology: Topology, collective: str, root: int = 0,
                     links: LinkSelector = "all") -> Bound | AllreduceBound:
    """The best rate the links allow for ``collective``; ``.algbw`` is in B/s (nccl-tests
    convention). For all-reduce the :class:`AllreduceBound` also carries the best root's
    link split, which the tree strategy builds on. Inside :func:`remembering_bounds`
    each is proven once."""
    key = (collective, root, links)
    bound = _proven.get_for(topology, key)
    if bound is None:
        bound = _prove(topology, collective, root, links)
        _proven.put_for(topology, bound, key)
    return bound


def _prove(topology: Topology, collective: str, root: int, links: LinkSelector) -> Bound | AllreduceBound:
    r = topology.ranks[root]
    if collective == "broadcast":
        return broadcast_bound(topology, r, links)
    if collective == "reduce":
        return reduce_bound(topology, r, links)
    if collective == "allgather":
        return allgather_bound(topology, links)
    if collective == "reducescatter":
        return reducescatter_bound(topology, links)
    if collective == "gather":
        return gather_bound(topology, r, links)
    if collective == "scatter":
        return scatter_bound(topology, r, links)
    if collective == "allreduce":
        return allreduce_bound(topology, links)
    if collective == "alltoall":
        return alltoall_bound(topology, links)
    raise SynthesisError(f"no bound is known for collective {collective!r}")
