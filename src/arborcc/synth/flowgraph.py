"""The flow-graph kit every strategy builds on: a topology as capacitated arcs,
reachability, maximum flows and minimum cuts, and the parametric ratio cut.

The graph is the topology's directed links (optionally filtered by kind, see
:func:`select_links`), with every non-GPU device (PCIe switch, CPU, NVSwitch, NIC,
network switch) a relay: it forwards but is not a rank. GPUs outside the job are left
out (another job's GPUs do not forward this job's data).

Max-flows run on integer capacities, which makes every bound exact: bandwidths are
expressed in integer units of 1 MB/s (finer for slow links, coarser if a graph would
overflow int32, :func:`capacity_unit`), exact for bandwidths quoted in GB/s or MB/s.
:class:`IntegerMaxFlow` (igraph's push-relabel, on a graph built once per bound) gives
max-flow values and minimum cuts, read off the residual graph of a maximum flow (the
side the source still reaches, the same for every maximum flow; Ford & Fulkerson,
"Maximal flow through a network", Canadian Journal of Mathematics 8, 1956,
https://doi.org/10.4153/CJM-1956-045-5); :func:`integer_arc_flow` (scipy's
:func:`scipy.sparse.csgraph.maximum_flow`) the one flow a schedule follows. The one
caller whose capacities are real numbers - an LP's solution, in the cutting-plane loop
of the tree all-reduce bound - uses :class:`RealMaxFlow` (igraph's push-relabel on
floats), because integer units would blur the LP's tolerance.

:func:`min_ratio_cut` minimises ``cap(out of S) / |S n sources|`` over vertex sets ``S``
that miss a sink - the bound of all-gather, reduce-scatter, gather and scatter - by
Dinkelbach's iteration on a parametric max-flow (W. Dinkelbach, "On nonlinear
fractional programming", Management Science 13(7), 1967,
https://doi.org/10.1287/mnsc.13.7.492).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Iterable, Sequence, Union

import numpy as np

from arborcc.errors import SolverLimitError, SynthesisError
from arborcc.memo import BoundedCache
from arborcc.synth.symmetry import Orbits, graph_orbits, load_igraph
from arborcc.topology.model import Link, LinkKind, Topology

LinkSelector = Union[str, LinkKind, Iterable[LinkKind], Callable[[Link], bool]]

INT32_MAX = 2**31 - 1


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
    orbit_cache: dict = field(default_factory=dict, repr=False)
    #: facts established about the graph and its reverse (``"strongly connected"``)
    facts: set = field(default_factory=set, repr=False)

    @property
    def n(self) -> int:
        return len(self.nodes)

    @property
    def rank_ids(self) -> tuple[str, ...]:
        return tuple(self.nodes[i] for i in self.ranks)

    def reversed(self) -> "FlowGraph":
        return FlowGraph(self.name, self.nodes, self.ranks, self.dst, self.src, self.cap, self.links,
                         not self.reversed_of_original, self.index, self.orbit_cache, self.facts)

    def with_capacities(self, cap: np.ndarray, keep: np.ndarray | None = None) -> "FlowGraph":
        """The same graph with capacities ``cap`` (and only the arcs ``keep`` selects)."""
        if keep is None:
            keep = np.ones(len(self.src), dtype=bool)
        return FlowGraph(self.name, self.nodes, self.ranks, self.src[keep], self.dst[keep], cap[keep], self.links,
                         self.reversed_of_original, self.index)

    def orbits(self, fixed: int | None = None) -> Orbits:
        """Orbits of the automorphisms (fixing node ``fixed``), computed once."""
        if fixed not in self.orbit_cache:
            self.orbit_cache[fixed] = graph_orbits(self.n, self.src, self.dst, self.cap, self.ranks, fixed)
        return self.orbit_cache[fixed]

    def original_link(self, arc: int) -> tuple[str, str]:
        """The topology link (src, dst) that arc ``arc`` stands for."""
        a, b = self.nodes[self.src[arc]], self.nodes[self.dst[arc]]
        return (b, a) if self.reversed_of_original else (a, b)

    def out_capacity(self) -> np.ndarray:
        """Capacity leaving each node (B/s)."""
        out = np.zeros(self.n)
        np.add.at(out, self.src, self.cap)
        return out

    def leaving(self, members: np.ndarray) -> np.ndarray:
        """Boolean mask of the arcs leaving the node set ``members`` (a node mask)."""
        return members[self.src] & ~members[self.dst]


#: the last few graphs built from a named link selection, by topology object and
#: selection: the bound, the connectivity check and the strategies of one synthesis share
#: one graph (and so its orbits); topologies are immutable, so the same object has the same graph
_RECENT_GRAPHS = BoundedCache("synth.flowgraph.graphs", 4, purpose="flow graphs by topology object and link selection")


def flow_graph(topology: Topology, links: LinkSelector = "all") -> FlowGraph:
    """The capacitated directed graph of ``topology`` restricted to ``links``.

    Devices no selected link touches are dropped (ranks are always kept), and so are
    GPUs that are not ranks. Raises :class:`SynthesisError` when there are fewer than
    two ranks. The graph is shared by the callers that ask for the same topology object
    and link selection (do not modify its arrays).
    """
    if isinstance(links, str):
        g = _RECENT_GRAPHS.get_for(topology, links)
        if g is not None:
            return g
    g = _build_flow_graph(topology, links)
    if isinstance(links, str):
        _RECENT_GRAPHS.put_for(topology, g, links)
    return g


def _build_flow_graph(topology: Topology, links: LinkSelector) -> FlowGraph:
    if topology.num_ranks < 2:
        raise SynthesisError(f"{topology.name}: a collective needs at least 2 ranks, the topology has "
                             f"{topology.num_ranks}")
    chosen, desc = select_links(topology, links)
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


def root_index(g: FlowGraph, root: str | int) -> int:
    """The node index of ``root`` (a rank id or a rank position) in ``g``."""
    if isinstance(root, (int, np.integer)):
        if not 0 <= root < len(g.ranks):
            raise SynthesisError(f"{g.name}: root rank {root} does not exist ({len(g.ranks)} ranks)")
        return int(g.ranks[root])
    if root not in g.index or g.index[root] not in set(int(i) for i in g.ranks):
        raise SynthesisError(f"{g.name}: root {root!r} is not a rank (ranks: {', '.join(g.rank_ids)})")
    return g.index[root]


# --- reachability ---------------------------------------------------------------------

def reached_from(g: FlowGraph, root: int) -> np.ndarray:
    """Boolean node mask of what ``root`` reaches along the arcs of ``g``."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import breadth_first_order

    adj = csr_matrix((np.ones(len(g.src)), (g.src, g.dst)), shape=(g.n, g.n))
    seen = np.zeros(g.n, dtype=bool)
    seen[breadth_first_order(adj, root, directed=True, return_predecessors=False)] = True
    return seen


def check_reachable(g: FlowGraph, root: int, what: str, into: bool = False) -> None:
    """Raise :class:`SynthesisError` unless node ``root`` reaches every rank of ``g``
    (with ``into``: every rank reaches ``root``); ``what`` says what needs it."""
    seen = reached_from(g.reversed() if into else g, root)
    missing = [g.nodes[i] for i in g.ranks if not seen[i]]
    if missing:
        verb = "cannot reach" if into else "cannot be reached from"
        raise SynthesisError(f"{g.name}: {', '.join(missing)} {verb} {g.nodes[root]} over {g.links} links ({what})")


def check_strongly_connected(g: FlowGraph, what: str) -> None:
    """Raise :class:`SynthesisError` unless every rank reaches every other over ``g``
    (checked once per graph)."""
    if "strongly connected" in g.facts:
        return
    r0 = int(g.ranks[0])
    check_reachable(g, r0, what)
    check_reachable(g, r0, what, into=True)
    g.facts.add("strongly connected")


def check_routable(topology: Topology, hub: int | None = None) -> None:
    """Raise :class:`SynthesisError` unless the topology's routes join the ranks: every
    ordered pair of ranks, or (``hub`` given, a rank index) the hub and every rank both
    ways - what strategies that send along :meth:`Topology.route` need. The first pair
    without a route (ranks in order, sources first) is named.

    Every pair: a route leaves its host at most once, runs through the network (devices
    without a host) and enters one other host, which it does not leave
    (:mod:`arborcc.topology.routing`). So a rank reaches a rank of another host exactly
    when some device it reaches in its own host or the network has a link into that
    host at a device from which the rank is reached inside the host, through devices
    that forward (not GPUs). The devices a rank reaches in its host and the network are
    :meth:`Topology.can_route`'s answer (one search per rank instead of one per rank and
    host); what each entry device reaches inside its host is searched once per device.
    """
    ranks = topology.ranks
    if hub is not None:
        for g in ranks:
            if g != ranks[hub]:
                for a, b in ((ranks[hub], g), (g, ranks[hub])):
                    if not topology.can_route(a, b):
                        raise SynthesisError(f"{topology.name}: GPUs {a} and {b} cannot reach each other")
        return
    reached = RankReach(topology)
    everyone = (1 << len(ranks)) - 1
    for i, a in enumerate(ranks):
        missing = everyone & ~reached.ranks_from(a) & ~(1 << i)
        if missing:
            b = ranks[(missing & -missing).bit_length() - 1]
            raise SynthesisError(f"{topology.name}: GPUs {a} and {b} cannot reach each other")


class RankReach:
    """Which ranks each device's transfers reach along the topology's routes, as a bit
    set over rank positions (:func:`check_routable`)."""

    def __init__(self, topology: Topology):
        self.topology = topology
        self.bit = {r: 1 << i for i, r in enumerate(topology.ranks)}
        self.entered: dict[str, int] = {}  #: device -> the ranks reached inside its host from it
        self.leaving: dict[frozenset, int] = {}  #: devices -> the ranks reached from them in other hosts
        self.home_and_network: dict[object, list[str]] = {}  #: host -> its devices and the network's
        for d, dev in topology.devices.items():
            self.home_and_network.setdefault(dev.host, []).append(d)
        network = self.home_and_network.get(None, [])
        for host in self.home_and_network:
            if host is not None:
                self.home_and_network[host] = self.home_and_network[host] + network

    def ranks_from(self, a: str) -> int:
        """The ranks a transfer from rank ``a`` reaches (``a`` itself not included)."""
        topology, devices = self.topology, self.topology.devices
        home = devices[a].host
        near = [a] + [d for d in self.home_and_network[home] if d != a and topology.can_route(a, d)]
        out = 0
        for d in near[1:]:
            out |= self.bit.get(d, 0)
        forwarders = frozenset(d for d in near if d == a or not devices[d].is_gpu)
        across = self.leaving.get(forwarders)
        if across is None:
            across = 0
            for d in forwarders:
                for link in topology.out_links(d):
                    host = devices[link.dst].host
                    if host is not None and host != home:
                        across |= self.inside(link.dst)
            self.leaving[forwarders] = across
        return out | across

    def inside(self, entry: str) -> int:
        """The ranks reached from ``entry`` without leaving its host, through devices that
        forward (``entry`` itself included)."""
        known = self.entered.get(entry)
        if known is not None:
            return known
        devices, host = self.topology.devices, self.topology.devices[entry].host
        seen, todo, out = {entry}, [entry], 0
        while todo:
            u = todo.pop()
            out |= self.bit.get(u, 0)
            if devices[u].is_gpu:
                continue  # a GPU ends a path (an entry GPU too)
            for link in self.topology.out_links(u):
                if link.dst not in seen and devices[link.dst].host == host:
                    seen.add(link.dst)
                    todo.append(link.dst)
        self.entered[entry] = out
        return out


# --- integer max-flow -------------------------------------------------------------------

def capacity_unit(cap: np.ndarray, largest_total: float) -> float:
    """A power-of-ten unit (B/s) making capacities integers that do not overflow int32.

    1 MB/s normally; finer when some link is slower than 1 GB/s (so every link is at
    least 1000 units), coarser when ``largest_total`` B/s would exceed int32.
    """
    unit = 1e6
    smallest = float(cap.min()) if cap.size else 1e9
    if smallest < 1e9:
        unit = 10.0 ** (math.floor(math.log10(smallest)) - 3)
    while largest_total / unit > INT32_MAX / 4:
        unit *= 10.0
    return unit


def integer_capacities(cap: np.ndarray, unit: float) -> np.ndarray:
    """Capacities in whole ``unit`` s (rounded, never negative)."""
    return np.maximum(np.rint(cap / unit), 0).astype(np.int64)


def integer_arc_flow(n: int, src: np.ndarray, dst: np.ndarray, icap: np.ndarray, s: int, t: int) -> np.ndarray:
    """A maximum flow from ``s`` to ``t`` on each arc ``src[i] -> dst[i]`` (integer
    capacities; parallel arcs share one entry): scipy's Dinic, whose flow - one of many
    maximum flows - a gather schedule follows."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_flow

    if icap.size and int(icap.max()) > INT32_MAX:
        raise SynthesisError("internal: capacity exceeds int32 after scaling")
    matrix = csr_matrix((icap.astype(np.int32), (src, dst)), shape=(n, n))
    matrix.sum_duplicates()
    flow = maximum_flow(matrix, int(s), int(t)).flow
    return np.asarray(flow[src, dst]).ravel().astype(np.int64)


#: doubles hold every integer below 2**53 exactly (IEEE 754 binary64: 53-bit significand)
EXACT_DOUBLE_INTEGERS = 2**53


class IntegerMaxFlow:
    """Integer max-flows and minimum-cut sides on the fixed arcs ``src[i] -> dst[i]``
    (parallel arcs allowed) of an ``n``-node graph, for capacities that change from call
    to call: igraph's push-relabel (A. V. Goldberg and R. E. Tarjan, "A new approach to
    the maximum-flow problem", Journal of the ACM 35(4), 1988,
    https://doi.org/10.1145/48014.61051) on one igraph graph built here.

    The side: igraph's minimum cut gives the sink's side as the nodes that reach the sink
    in the residual graph (the sink side closest to the sink). The graph is therefore
    built with every arc reversed and the flow sent from ``t`` to ``s``: a maximum flow
    there is a maximum flow of the original turned around, and the nodes that reach
    ``s`` in its residual graph are the nodes ``s`` reaches in the original's - the source
    side closest to ``s``, the same for every maximum flow (igraph stops at a maximum
    preflow; the set that reaches the sink is the same: no residual arc enters it from
    the nodes holding excess, and sending that excess back does not change it).

    Exactness: igraph computes in doubles. On integer capacities every quantity it
    forms - residual capacities (an arc's and its reverse's add up to the arc's
    capacity), excesses and the value (together at most what the source first pushes
    out) - is an integer between 0 and the sum of all capacities, and only ever added,
    subtracted and compared; :meth:`cut_sides` refuses capacities summing to
    :data:`EXACT_DOUBLE_INTEGERS` or more, so every value is exact.
    """

    def __init__(self, n: int, src: np.ndarray, dst: np.ndarray):
        igraph = load_igraph()
        self.n = n
        self.reversed_graph = igraph.GraphBase(n, list(zip(dst.tolist(), src.tolist())), True)

    def cut_sides(self, cap: np.ndarray, s: int, sinks: Sequence[int],
                  need: int | None = None) -> list[tuple[int, np.ndarray | None]]:
        """Per sink ``t``: the max-flow value from ``s`` to ``t`` under the integer
        capacities ``cap`` (one per arc) and the source side of the minimum cut closest
        to ``s`` as a node mask - ``None`` instead when the value reaches ``need``."""
        if cap.size and (int(cap.min()) < 0 or int(cap.sum()) >= EXACT_DOUBLE_INTEGERS):
            raise SynthesisError("internal: max-flow capacities negative or too large to stay exact")
        capacity = cap.tolist()
        out: list[tuple[int, np.ndarray | None]] = []
        for t in sinks:
            value, _, _, side_nodes = self.reversed_graph.st_mincut(int(t), int(s), capacity)
            value = int(value)
            if need is not None and value >= need:
                out.append((value, None))
                continue
            side = np.zeros(self.n, dtype=bool)
            side[side_nodes] = True
            out.append((value, side))
        return out


def min_cut_sides(n: int, src: np.ndarray, dst: np.ndarray, icap: np.ndarray, s: int,
                  sinks: Sequence[int]) -> list[tuple[int, np.ndarray]]:
    """For each sink ``t``: the max-flow value from ``s`` to ``t`` on the integer-
    capacitated arcs ``src -> dst`` and the source side of the minimum cut closest to
    ``s`` (:class:`IntegerMaxFlow`; the side is the same for every maximum flow)."""
    return IntegerMaxFlow(n, src, dst).cut_sides(icap, s, sinks)


class RealMaxFlow:
    """Max-flows and minimum cuts on one graph whose capacities are real numbers (igraph)."""

    def __init__(self, n: int, src: np.ndarray, dst: np.ndarray):
        igraph = load_igraph()
        self.graph = igraph.Graph(n=n, edges=list(zip(src.tolist(), dst.tolist())), directed=True)

    def value(self, s: int, t: int, capacity: Sequence[float]) -> float:
        return self.graph.maxflow_value(s, t, capacity=capacity)

    def cut_arcs(self, s: int, t: int, capacity: Sequence[float]) -> list[int]:
        """The arcs of a minimum ``s``-``t`` cut."""
        return self.graph.mincut(s, t, capacity=capacity).cut


# --- the parametric ratio cut -------------------------------------------------------------

@dataclass(frozen=True)
class RatioCut:
    """The minimum of ``cap(out of S) / |S n sources|`` over node sets ``S`` missing a
    sink: ``ratio * unit`` B/s per source, attained by ``members`` (a node mask).
    ``arc_flow`` (asked for, with one sink): an integer max-flow at that rate in units
    of ``unit / ratio.denominator`` B/s (each source supplies ``ratio.numerator``)."""

    ratio: Fraction
    members: np.ndarray
    unit: float
    arc_flow: np.ndarray | None


def min_ratio_cut(g: FlowGraph, sources: Sequence[int], sinks: Sequence[int], what: str,
                  with_flow: bool = False) -> RatioCut:
    """``x* = min_S cap(out of S) / |S n sources|`` over node sets ``S`` that miss one of
    ``sinks``, exactly (module doc).

    Add a super source with an arc of capacity ``x`` to every source. A cut separating
    it from a sink ``t`` has value ``x |sources \\ S| + cap(out of S)``, so
    ``maxflow(s, t) = |sources| x`` for every sink iff ``x <= x*``. Starting from the
    smallest source's out-capacity, Dinkelbach's iteration replaces ``x`` by the ratio
    of the most violated cut until none is violated; the number of sources in the
    minimising set strictly drops, so it ends within ``|sources|`` rounds, each one
    integer max-flow per sink. ``with_flow`` (one sink only): also a flow at the ratio.
    """
    K, N = len(sources), len(g.ranks)
    out_cap = g.out_capacity()
    x0 = float(min(out_cap[v] for v in sources))
    # flows reach N^2 x0 (source arcs N x p, p <= N x0) and arcs are scaled by <= N
    unit = capacity_unit(g.cap, max(N * N * x0, N * float(g.cap.max())))
    icap = integer_capacities(g.cap, unit)
    iout = np.zeros(g.n, dtype=np.int64)
    np.add.at(iout, g.src, icap)
    is_source = np.zeros(g.n, dtype=bool)
    is_source[list(sources)] = True
    start = min(sources, key=lambda v: iout[v])
    ratio = Fraction(int(iout[start]), 1)
    members = np.arange(g.n) == start
    s = g.n  # the super source
    src = np.concatenate([g.src, np.full(K, s)])
    dst = np.concatenate([g.dst, np.array(sources)])
    network = IntegerMaxFlow(g.n + 1, src, dst)
    for _ in range(K + 2):
        p, q = ratio.numerator, ratio.denominator
        cap = np.concatenate([icap * q, np.full(K, p, dtype=np.int64)])
        if int(cap.max()) > INT32_MAX:
            raise SynthesisError("internal: capacity exceeds int32 after scaling")
        improved = None
        for _, side in network.cut_sides(cap, s, sinks, K * p):
            if side is not None:
                side = side[:g.n]
                cand = Fraction(int(icap[g.leaving(side)].sum()), int((side & is_source).sum()))
                if cand < ratio and (improved is None or cand < improved[0]):
                    improved = (cand, side)
        if improved is None:
            flow = None
            if with_flow and len(sinks) == 1:  # a flow at the ratio (the gather schedule follows it)
                flow = np.maximum(integer_arc_flow(g.n + 1, src, dst, cap, s, sinks[0])[:len(g.src)], 0)
            return RatioCut(ratio, members, unit, flow)
        ratio, members = improved
    raise SolverLimitError(f"{g.name}: {what} bound did not converge")  # pragma: no cover
