"""Optimal rates of collectives on a capacitated topology (the targets synthesis aims at).

All rates are bytes/s; ``algbw`` follows nccl-tests (``algbw = S / t``, where ``S`` is
the buffer size, the *total* size for all-gather and reduce-scatter).

The graph is the topology's directed links (optionally filtered by kind, see
:func:`select_links`), with every non-GPU device (PCIe switch, CPU, NVSwitch, NIC,
network switch) a relay: it forwards but is not a rank.

Theorems used
-------------
* **Broadcast** from ``r``: the best rate is ``min over ranks v of maxflow(r, v)``
  (Edmonds' branching theorem, 1973; Lovasz 1976 for the proof by growing one
  arborescence at a time). With relay vertices whose in-capacity is at least their
  out-capacity (true of every balanced, e.g. full-duplex symmetric, topology) the same value is reached
  by packing Steiner arborescences whose relay hops are point-to-point routes
  (Bang-Jensen, Frank & Jackson 1995, "Preserving and increasing local
  edge-connectivity in mixed graphs": splitting off relays keeps every rank-to-rank
  connectivity). **Reduce** to ``r`` is broadcast on the reversed graph.
* **All-gather** with each rank sending its shard of ``M/N`` bytes at rate ``x``: for
  every vertex set ``S`` that holds at least one rank and misses at least one, the
  shards of the ranks in ``S`` must leave ``S``, so ``x * |S n ranks| <= cap(out of S)``.
  Hence ``x* = min_S cap(out of S) / |S n ranks|`` and ``t = (M/N)/x*``, ``algbw = N x*``.
  Edmonds' theorem for arborescences with *different* roots (k arc-disjoint
  arborescences rooted at r_1..r_k exist iff every non-empty set X has in-degree at
  least the number of roots outside X) shows the bound is reached on GPU-only graphs
  by one packing of out-trees per rank; with relays it is reached after splitting them
  off (the ForestColl construction, Zhao et al. 2024). On a GPU-only graph the formula
  is exactly ``min over proper non-empty S of ranks of cap(out of S)/|S|``: a set
  holding every rank has no constraint, and relays are absent.
  **Reduce-scatter** is the same on the reversed graph.
* ``x*`` is computed exactly without enumerating sets, by the parametric min-cut
  technique: add a source ``s`` with an arc of capacity ``x`` to every rank. A cut
  separating ``s`` from a rank ``t`` has value ``x |ranks \\ S| + cap(out of S)``, so
  ``maxflow(s, t) = N x`` for every rank ``t`` iff ``x <= x*``. Starting from an upper
  bound, Dinkelbach's iteration (Dinkelbach 1967, Newton's method for a ratio) replaces
  ``x`` by the ratio of the most violated cut until none is violated; the number of
  ranks in the minimising set strictly drops, so it ends after at most N rounds.
* **All-reduce**: (a) reduce-scatter then all-gather, ``t = M/algbw_rs + M/algbw_ag``
  (ForestColl; Patarasuk & Yuan's ring is the homogeneous special case); (b) Blink's
  reduce to a root pipelined with a broadcast from it, ``t = M/R`` where ``R`` is the
  largest rate for which the links' capacity can be split between a reduce of rate R
  and a broadcast of rate R (a flow LP with generated cut constraints, solved warm
  with HiGHS), maximised over roots. Both are reported.

Max-flows run on :func:`scipy.sparse.csgraph.maximum_flow`, which needs int32
capacities: bandwidths are expressed in integer units of 1 MB/s (finer for slow links,
coarser if a graph would overflow 2^31), which is exact for bandwidths quoted in GB/s
or MB/s. The reported bound is recomputed in floating point from the tight cut.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Iterable, Sequence, Union

import igraph
import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import maximum_flow

from arborcc.errors import SolverLimitError, SynthesisError
from arborcc.synth.lp import INF, GrowingLP
from arborcc.synth.symmetry import Orbits, graph_orbits
from arborcc.topology.model import GB, Link, LinkKind, Topology

LinkSelector = Union[str, LinkKind, Iterable[LinkKind], Callable[[Link], bool]]

_INT32_MAX = 2**31 - 1


# --- the capacitated graph ------------------------------------------------------------

def select_links(topology: Topology, links: LinkSelector = "all") -> tuple[list[Link], str]:
    """The links to use and a short description of the choice.

    ``links`` is ``"all"``, ``"nvlink"`` (Blink's NVLink-only trees; NVSwitch ports are
    NVLink), a :class:`LinkKind` or its value, an iterable of them, or a predicate
    ``f(link) -> bool``.
    """
    if callable(links) and not isinstance(links, (str, LinkKind)):
        chosen = [l for l in topology.links.values() if links(l)]
        return chosen, getattr(links, "__name__", "custom")
    if isinstance(links, str) and links == "all":
        return list(topology.links.values()), "all"
    kinds_in = [links] if isinstance(links, (str, LinkKind)) else list(links)
    kinds: set[LinkKind] = set()
    for k in kinds_in:
        try:
            kinds.add(LinkKind(k))
        except ValueError:
            known = ", ".join(["all"] + [x.value for x in LinkKind])
            raise SynthesisError(f"unknown link selection {k!r} (known: {known})") from None
    desc = "+".join(sorted(k.value for k in kinds))
    return [l for l in topology.links.values() if l.kind in kinds], desc


@dataclass(frozen=True, eq=False)
class FlowGraph:
    """A topology as arrays: arc ``i`` goes ``nodes[src[i]] -> nodes[dst[i]]`` with
    capacity ``cap[i]`` B/s. ``ranks[k]`` is the node index of rank ``k``.

    ``reversed_of_original`` is True for the reversed graph (arc ``i`` is then the
    original link ``nodes[dst[i]] -> nodes[src[i]]``).
    """

    name: str
    nodes: tuple[str, ...]
    ranks: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    cap: np.ndarray
    links: str
    reversed_of_original: bool = False
    index: dict = field(default_factory=dict)
    #: orbits by fixed vertex, shared with the reversed graph (same automorphisms)
    _orbits: dict = field(default_factory=dict, repr=False)

    @property
    def n(self) -> int:
        return len(self.nodes)

    @property
    def rank_ids(self) -> tuple[str, ...]:
        return tuple(self.nodes[i] for i in self.ranks)

    def reversed(self) -> "FlowGraph":
        return FlowGraph(self.name, self.nodes, self.ranks, self.dst, self.src, self.cap, self.links,
                         not self.reversed_of_original, self.index, self._orbits)

    def orbits(self, fixed: int | None = None) -> Orbits:
        """Orbits of the automorphisms (fixing node ``fixed``), computed once."""
        if fixed not in self._orbits:
            self._orbits[fixed] = graph_orbits(self.n, self.src, self.dst, self.cap, self.ranks, fixed)
        return self._orbits[fixed]

    def original_link(self, arc: int) -> tuple[str, str]:
        """The topology link (src, dst) that arc ``arc`` stands for."""
        a, b = self.nodes[self.src[arc]], self.nodes[self.dst[arc]]
        return (b, a) if self.reversed_of_original else (a, b)


def flow_graph(topology: Topology, links: LinkSelector = "all") -> FlowGraph:
    """The capacitated directed graph of ``topology`` restricted to ``links``.

    Devices no selected link touches are dropped (ranks are always kept), and so are
    GPUs that are not ranks (another job's GPUs do not forward this job's data). Raises
    :class:`SynthesisError` when there are fewer than two ranks.
    """
    if topology.num_ranks < 2:
        raise SynthesisError(f"{topology.name}: a collective needs at least 2 ranks, the topology has "
                             f"{topology.num_ranks}")
    chosen, desc = select_links(topology, links)
    # a GPU outside the job is not a relay: only the job's ranks and non-GPU devices carry data
    ranks = set(topology.ranks)
    idle = {d.id for d in topology.devices.values() if d.is_gpu and d.id not in ranks}
    chosen = [l for l in chosen if l.bandwidth > 0 and l.src not in idle and l.dst not in idle]
    names = list(topology.ranks)
    seen = set(names)
    for l in chosen:
        for d in (l.src, l.dst):
            if d not in seen:
                seen.add(d)
                names.append(d)
    index = {d: i for i, d in enumerate(names)}
    src = np.array([index[l.src] for l in chosen], dtype=np.int64)
    dst = np.array([index[l.dst] for l in chosen], dtype=np.int64)
    cap = np.array([float(l.bandwidth) for l in chosen], dtype=float)
    return FlowGraph(topology.name, tuple(names), np.arange(topology.num_ranks), src, dst, cap, desc,
                     False, index)


# --- integer max-flow ----------------------------------------------------------------

def _unit_for(cap: np.ndarray, largest_total: float) -> float:
    """A power-of-ten unit (B/s) making capacities integers that do not overflow int32.

    1 MB/s normally; finer when some link is slower than 1 GB/s (so every link is at
    least 1000 units), coarser when ``largest_total`` B/s would exceed int32.
    """
    unit = 1e6
    smallest = float(cap.min()) if cap.size else 1e9
    if smallest < 1e9:
        unit = 10.0 ** (math.floor(math.log10(smallest)) - 3)
    while largest_total / unit > _INT32_MAX / 4:
        unit *= 10.0
    return unit


def _int_caps(cap: np.ndarray, unit: float) -> np.ndarray:
    return np.maximum(np.rint(cap / unit), 0).astype(np.int64)


class _MaxFlow:
    """Max-flows on one integer-capacitated graph of ``n`` nodes (scipy's Dinic)."""

    def __init__(self, n: int, src: np.ndarray, dst: np.ndarray, icap: np.ndarray):
        if icap.size and int(icap.max()) > _INT32_MAX:
            raise SynthesisError("internal: capacity exceeds int32 after scaling")
        self.n = n
        self.matrix = sp.csr_matrix((icap.astype(np.int32), (src, dst)), shape=(n, n))
        self.matrix.sum_duplicates()
        self._dense = None

    def value(self, s: int, t: int) -> tuple[int, object]:
        res = maximum_flow(self.matrix, int(s), int(t))
        return int(res.flow_value), res

    def source_side(self, s: int, res) -> np.ndarray:
        """Boolean mask of the nodes reachable from ``s`` in the residual graph."""
        if self._dense is None:
            self._dense = self.matrix.toarray().astype(np.int64)
        residual = self._dense - res.flow.toarray().astype(np.int64)
        seen = np.zeros(self.n, dtype=bool)
        seen[s] = True
        stack = [s]
        while stack:
            u = stack.pop()
            for v in np.nonzero((residual[u] > 0) & ~seen)[0]:
                seen[v] = True
                stack.append(int(v))
        return seen


# --- results -----------------------------------------------------------------------

@dataclass(frozen=True)
class Bound:
    """An optimal rate and the cut that makes it tight.

    ``rate``: for broadcast/reduce the buffer's bytes per second (= ``algbw``); for
    all-gather/reduce-scatter the rate ``x`` at which each rank's shard moves, so
    ``algbw = num_ranks * rate``. ``cut`` is the vertex set ``S`` whose boundary is
    tight: for broadcast the side holding the root, for reduce the side holding the
    root (links *into* it are tight), for all-gather a set whose out-links carry every
    shard of ``cut_ranks`` ranks, for reduce-scatter a set whose in-links do.
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

    @property
    def algbw_gbps(self) -> float:
        return self.algbw / GB

    @property
    def rate_gbps(self) -> float:
        return self.rate / GB

    @property
    def busbw(self) -> float:
        """nccl-tests bus bandwidth: algbw x (n-1)/n for all-gather/reduce-scatter and
        gather/scatter, x1 else."""
        n = self.num_ranks
        factor = (n - 1) / n if self.collective in ("allgather", "reducescatter", "gather", "scatter") else 1.0
        return self.algbw * factor

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

    @property
    def algbw(self) -> float:
        return max(self.rs_ag_algbw, self.tree_algbw)

    @property
    def best(self) -> str:
        # equal up to rounding (common on symmetric machines): the simpler family
        return "rs+ag" if self.rs_ag_algbw >= self.tree_algbw * (1 - 1e-9) else "tree"

    @property
    def algbw_gbps(self) -> float:
        return self.algbw / GB

    @property
    def busbw(self) -> float:
        n = self.allgather.num_ranks
        return self.algbw * 2 * (n - 1) / n


def gbps(rate: float) -> float:
    """Bytes/s to GB/s (decimal)."""
    return rate / GB


# --- broadcast / reduce ---------------------------------------------------------------

def _check_reachable(g: FlowGraph, root: int, what: str) -> None:
    adj = sp.csr_matrix((np.ones(len(g.src)), (g.src, g.dst)), shape=(g.n, g.n))
    from scipy.sparse.csgraph import breadth_first_order

    order = breadth_first_order(adj, root, directed=True, return_predecessors=False)
    reached = set(int(i) for i in order)
    missing = [g.nodes[i] for i in g.ranks if int(i) not in reached]
    if missing:
        raise SynthesisError(f"{g.name}: {', '.join(missing)} cannot be reached from {g.nodes[root]} "
                             f"over {g.links} links ({what})")


def root_index(g: FlowGraph, root: str | int) -> int:
    """The node index of ``root`` (a rank id or a rank position) in ``g``."""
    if isinstance(root, (int, np.integer)):
        if not 0 <= root < len(g.ranks):
            raise SynthesisError(f"{g.name}: root rank {root} does not exist ({len(g.ranks)} ranks)")
        return int(g.ranks[root])
    if root not in g.index or g.index[root] not in set(int(i) for i in g.ranks):
        raise SynthesisError(f"{g.name}: root {root!r} is not a rank (ranks: {', '.join(g.rank_ids)})")
    return g.index[root]


def single_source_bound(g: FlowGraph, r: int, collective: str, root_name: str) -> Bound:
    """min over ranks v != r of maxflow(r, v) on ``g`` (Edmonds), with its tight cut.

    ``g`` may be a reversed graph (then this is the reduce bound). ``collective`` only
    names the result.
    """
    t0 = time.perf_counter()
    _check_reachable(g, r, f"{collective} from {root_name}" if collective == "broadcast"
                     else f"{collective} to {root_name}")
    unit = _unit_for(g.cap, float(g.cap.sum()))
    mf = _MaxFlow(g.n, g.src, g.dst, _int_caps(g.cap, unit))
    best_val, best_res = None, None
    for v in g.orbits(fixed=r).representatives(g.ranks):  # max-flows are equal within an orbit
        if v == r:
            continue
        val, res = mf.value(r, v)
        if best_val is None or val < best_val:
            best_val, best_res = val, res
    side = mf.source_side(r, best_res)
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

def _check_strongly_connected(g: FlowGraph, what: str) -> None:
    r0 = int(g.ranks[0])
    _check_reachable(g, r0, what)
    _check_reachable(g.reversed(), r0, what)


def all_to_all_bound(g: FlowGraph, collective: str, time_limit: float) -> Bound:
    """``x* = min_S cap(out S)/|S n ranks|`` by parametric min-cut + Dinkelbach (see module doc)."""
    t0 = time.perf_counter()
    _check_strongly_connected(g, collective)
    N = len(g.ranks)
    ranks = [int(i) for i in g.ranks]
    out_cap = np.zeros(g.n)
    np.add.at(out_cap, g.src, g.cap)
    x0 = float(min(out_cap[r] for r in ranks))
    # flows reach N^2 x0 (source arcs N x p, p <= N x0) and arcs are scaled by <= N
    unit = _unit_for(g.cap, max(N * N * x0, N * float(g.cap.max())))
    icap = _int_caps(g.cap, unit)
    iout = np.zeros(g.n, dtype=np.int64)
    np.add.at(iout, g.src, icap)
    # every automorphism fixes the super source: one sink per orbit has the same max-flows
    sinks = g.orbits().representatives(ranks)
    # the current ratio p/q and the set achieving it (a single rank to start)
    start = min(ranks, key=lambda r: iout[r])
    ratio = Fraction(int(iout[start]), 1)
    best_set = np.zeros(g.n + 1, dtype=bool)
    best_set[start] = True
    s = g.n  # the super source
    src = np.concatenate([g.src, np.full(N, s)])
    dst = np.concatenate([g.dst, np.array(ranks)])
    for _ in range(N + 2):
        if time.perf_counter() - t0 > time_limit:
            raise SolverLimitError(f"{g.name}: {collective} bound not found within {time_limit:g} s")
        p, q = ratio.numerator, ratio.denominator
        caps = np.concatenate([icap * q, np.full(N, p, dtype=np.int64)])
        mf = _MaxFlow(g.n + 1, src, dst, caps)
        improved = None
        for t in sinks:
            val, res = mf.value(s, t)
            if val < N * p:
                side = mf.source_side(s, res)
                members = side[:g.n]
                k = int(sum(1 for r in ranks if members[r]))
                arcs = members[g.src] & ~members[g.dst]
                cand = Fraction(int(icap[arcs].sum()), k)
                if cand < ratio and (improved is None or cand < improved[0]):
                    improved = (cand, side.copy())
        if improved is None:
            break
        ratio, best_set = improved
    else:  # pragma: no cover - Dinkelbach ends within N rounds
        raise SolverLimitError(f"{g.name}: {collective} bound did not converge")
    members = best_set[:g.n]
    arcs = np.nonzero(members[g.src] & ~members[g.dst])[0]
    k = int(sum(1 for r in ranks if members[r]))
    cut_cap = float(g.cap[arcs].sum())
    x = cut_cap / k
    return Bound(collective, x, N * x, N, None, frozenset(g.nodes[i] for i in np.nonzero(members)[0]),
                 tuple(g.original_link(int(i)) for i in arcs), cut_cap, k, g.links, time.perf_counter() - t0)


def allgather_bound(topology: Topology, links: LinkSelector = "all", time_limit: float = 30.0) -> Bound:
    """Best all-gather: per-shard rate ``x* = min_S cap(out of S)/|S n ranks|``; ``algbw = N x*``.

    ``cut`` is a minimising ``S`` (it holds ``cut_ranks`` ranks and misses one);
    ``cut_links`` are the links leaving it. See the module doc for the theorem.
    """
    return all_to_all_bound(flow_graph(topology, links), "allgather", time_limit)


def reducescatter_bound(topology: Topology, links: LinkSelector = "all", time_limit: float = 30.0) -> Bound:
    """Best reduce-scatter: all-gather on the reversed graph (``cut_links`` enter ``cut``)."""
    return all_to_all_bound(flow_graph(topology, links).reversed(), "reducescatter", time_limit)


# --- all-reduce -----------------------------------------------------------------------

def tree_allreduce_rate(g: FlowGraph, r: int, time_limit: float = 30.0) -> float:
    """The rate of :func:`tree_allreduce_split`."""
    return tree_allreduce_split(g, r, time_limit)[0]


def tree_allreduce_split(g: FlowGraph, r: int, time_limit: float = 30.0) -> tuple[float, np.ndarray, np.ndarray]:
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
    ``1e-7`` relative), which is the optimum of the per-destination flow LP.
    Symmetry (:mod:`.symmetry`): the automorphisms fixing ``r`` permute the LP's
    constraints, so one variable per arc orbit suffices, and with orbit-constant
    splits one destination per rank orbit.
    """
    t0 = time.perf_counter()
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
    # igraph's max-flow (C, float capacities) finds the cuts; arc ids are kept
    forward = igraph.Graph(n=g.n, edges=list(zip(g.src.tolist(), g.dst.tolist())), directed=True)
    backward = igraph.Graph(n=g.n, edges=list(zip(g.dst.tolist(), g.src.tolist())), directed=True)
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
    while True:
        left = time_limit - (time.perf_counter() - t0)
        if left <= 0:
            raise SolverLimitError(f"{g.name}: tree all-reduce LP hit its {time_limit:g} s limit")
        x = lp.solve(left).x
        R = float(x[0])
        added = 0
        # broadcast: cuts of c_b leaving a set around r; reduce: cuts of c_r entering it,
        # i.e. leaving it on the reversed graph
        for base, h in ((CB, forward), (CR, backward)):
            caps = np.maximum(x[base:base + K], 0.0)[cls].tolist()
            for v in sinks:
                if h.maxflow_value(r, v, capacity=caps) >= R * (1 - 1e-7):
                    continue
                added += add_cut(base, h.mincut(r, v, capacity=caps).cut)
        if not added:
            return R * scale, x[CB:CB + K][cls] * scale, x[CR:CR + K][cls] * scale


def _tree_rate_ceiling(g: FlowGraph, r: int) -> float:
    """An upper bound on :func:`tree_allreduce_rate` for root ``r`` that costs no LP.

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


def allreduce_bound(topology: Topology, links: LinkSelector = "all", tree_roots: Sequence[str] | None = None,
                    time_limit: float = 60.0) -> AllreduceBound:
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
    rs = all_to_all_bound(g.reversed(), "reducescatter", time_limit)
    ag = all_to_all_bound(g, "allgather", time_limit)
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
    for v in todo:
        if v in ceiling and ceiling[v] <= max([rs_ag, *rates.values()]) * (1 + 1e-9):
            break  # sorted: no later root can do better either
        left = time_limit - (time.perf_counter() - t0)
        if left <= 0:
            raise SolverLimitError(f"{topology.name}: all-reduce bound not found within {time_limit:g} s")
        rate, cap_b, cap_r = tree_allreduce_split(g, v, left)
        rates[g.nodes[v]], splits[g.nodes[v]] = rate, (cap_b, cap_r)
    best_root = max(rates, key=lambda k: rates[k]) if rates else None
    return AllreduceBound(rs, ag, rs_ag, rates[best_root] if rates else 0.0, best_root, rates, g.links,
                          time.perf_counter() - t0, splits.get(best_root))
