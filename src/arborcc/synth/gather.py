"""Gather and scatter, optimal by construction: a single-sink flow, split into paths.

API (for :mod:`arborcc.synth.strategies` and the CLI)::

    gather_bound(topology, root, links="all") -> Bound     # root: rank id or rank position
    scatter_bound(topology, root, links="all") -> Bound
    gather_flow(topology, collective, root, links="all") -> Flow   # the bound and its paths
    synth_gather(topology, collective, root=0, links="all", name=None) -> (Lowered, notes, paths)

``collective`` is ``"gather"`` or ``"scatter"``. Like :mod:`.lower`'s functions,
``synth_gather`` compiles but does not verify (``strategies.synthesize`` proves the
algorithm it returns); the algorithm meets the executor dialect's limits when it can
(:func:`arborcc.synth.lower.within_limits`).

Bound
-----
Gather to ``r`` (``algbw = S / t``, ``S`` the root's output): every other rank moves its
block of ``S/N`` bytes into ``r``; the root's own block is a local copy. At ``x`` bytes/s
per block this is one single-commodity flow (every byte has the same sink): a super
source ``s`` with an arc of capacity ``x`` to each non-root rank, and the schedule exists
iff ``maxflow(s, r) = (N-1) x``. By the max-flow min-cut theorem (Ford & Fulkerson
1956) that holds iff every vertex set ``A`` without ``r`` has ``cap(out of A) >=
x |A n ranks|``, so ``x* = min_A cap(out of A) / |A n ranks|`` and ``algbw = N x*``.
``x*`` is found exactly by Dinkelbach's iteration (Dinkelbach 1967) on that parametric
cut, as :func:`arborcc.synth.bounds.all_to_all_bound` does with every sink: at most
``N`` integer max-flows. Relays (switches, CPUs, NICs) conserve flow, so they only
forward; GPUs of the allocation may forward too (store-and-forward through scratch).
**Scatter** from ``r`` is gather on the reversed graph.

Schedule
--------
The max-flow at ``x*`` decomposes into paths and cycles (flow decomposition theorem;
Ahuja, Magnanti & Orlin, *Network Flows*, 1993, theorem 3.5). A path from ``s``
enters the graph through one arc ``s -> v``, so it carries only rank ``v``'s data;
cycles carry nothing and are dropped. Each rank's block is split over its paths with
the chunk rules of the tree strategies (:func:`arborcc.synth.quantize.apportion`:
power-of-two chunks per rank, the fewest that keep the rate within
``quantize.TOLERANCE`` of the flow's).

Lowering
--------
A path is a chain of GPU-to-GPU hops whose interior devices are relays. Each path's
chunks move as multi-count transfers (at most ``MAX_COUNT`` chunks) down the chain:
the source's input, the intermediate GPUs' scratch, the root's output block (scatter:
the root's input block, scratch, the destination's output). Channels come from
:class:`arborcc.synth.lower.ChannelMap`, so each (rank pair, device path) is a
connection with one path, exactly like a tree hop.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from itertools import pairwise

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import breadth_first_order

from arborcc.errors import SynthesisError
from arborcc.ir.model import Buffer
from arborcc.lang import Gather, Scatter, chunk
from arborcc.synth.bounds import (Bound, FlowGraph, LinkSelector, _int_caps, _MaxFlow, _unit_for, flow_graph,
                                  root_index)
from arborcc.synth.lower import ChannelMap, Lowered, _blocks, _finish, _local_copy, _program, within_limits
from arborcc.synth.quantize import CHUNK_COUNTS, TOLERANCE, apportion
from arborcc.topology.model import Topology

INPUT, OUTPUT, SCRATCH = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH
COLLECTIVES = ("gather", "scatter")

RankHop = tuple[int, int, tuple[str, ...]]  #: (sending rank, receiving rank, device path)


@dataclass(frozen=True)
class FlowPath:
    """``rate`` B/s of rank ``rank``'s block along ``devices`` (in the direction data
    flows: from ``rank`` to the root for gather, from the root to ``rank`` for scatter)."""

    rank: int
    devices: tuple[str, ...]
    rate: float


@dataclass(frozen=True)
class Flow:
    """The bound (``rate`` is B/s per rank's block, ``algbw = N x rate``), the root's
    rank position and the paths of an optimal flow, grouped by rank in rank order."""

    bound: Bound
    root: int
    paths: tuple[FlowPath, ...]


# --- bound and flow -------------------------------------------------------------------

def _check_reaches_root(g: FlowGraph, r: int, collective: str) -> None:
    """Every rank must reach node ``r`` of ``g`` (``g`` is reversed for scatter)."""
    back = csr_matrix((np.ones(len(g.src)), (g.dst, g.src)), shape=(g.n, g.n))
    reached = {int(i) for i in breadth_first_order(back, r, directed=True, return_predecessors=False)}
    missing = [g.nodes[i] for i in g.ranks if int(i) not in reached]
    if missing:
        verb = "cannot reach" if collective == "gather" else "cannot be reached from"
        raise SynthesisError(f"{g.name}: {', '.join(missing)} {verb} the root {g.nodes[r]} over {g.links} links "
                             f"({collective})")


def _parametric_cut(g: FlowGraph, r: int):
    """Dinkelbach on ``min_A cap(out A) / |A n sources|`` (see module doc).

    Returns ``(ratio, members, arc_flow, unit)``: the optimal per-rank rate is
    ``ratio x unit`` B/s, ``members`` (a node mask) attains it, and ``arc_flow`` is an
    integer max-flow at that rate in units of ``unit / ratio.denominator`` B/s.
    """
    sources = [int(v) for v in g.ranks if int(v) != r]
    K = len(sources)
    out_cap = np.zeros(g.n)
    np.add.at(out_cap, g.src, g.cap)
    x0 = float(min(out_cap[v] for v in sources))
    unit = _unit_for(g.cap, max(len(g.ranks) ** 2 * x0, len(g.ranks) * float(g.cap.max())))
    icap = _int_caps(g.cap, unit)
    iout = np.zeros(g.n, dtype=np.int64)
    np.add.at(iout, g.src, icap)
    start = min(sources, key=lambda v: iout[v])
    ratio, members = Fraction(int(iout[start])), np.arange(g.n) == start
    s = g.n
    src = np.concatenate([g.src, np.full(K, s)])
    dst = np.concatenate([g.dst, np.array(sources)])
    is_source = np.isin(np.arange(g.n), sources)
    for _ in range(K + 1):  # the number of sources in the minimising set drops every round
        p, q = ratio.numerator, ratio.denominator
        mf = _MaxFlow(g.n + 1, src, dst, np.concatenate([icap * q, np.full(K, p, dtype=np.int64)]))
        value, res = mf.value(s, r)
        if value == K * p:
            flow = np.asarray(res.flow[g.src, g.dst]).ravel().astype(np.int64)
            return ratio, members, np.maximum(flow, 0), unit
        members = mf.source_side(s, res)[:g.n]
        leaving = members[g.src] & ~members[g.dst]
        ratio = Fraction(int(icap[leaving].sum()), int((members & is_source).sum()))
    raise SynthesisError(f"{g.name}: internal: the gather cut iteration did not converge")  # pragma: no cover


def _decompose(g: FlowGraph, flow: np.ndarray, r: int, supply: int) -> list[tuple[int, list[int], int]]:
    """Split an s-r flow (``supply`` units from each rank) into ``(rank, nodes, units)``
    paths ending at ``r``, cancelling the cycles met on the way."""
    flow = flow.copy()
    out: list[list[int]] = [[] for _ in range(g.n)]
    for arc in np.nonzero(flow > 0)[0]:
        out[g.src[arc]].append(int(arc))
    paths = []
    for v in (int(i) for i in g.ranks if int(i) != r):
        left = supply
        while left > 0:
            nodes, arcs, pos = [v], [], {v: 0}
            while nodes[-1] != r:
                arc = next(a for a in out[nodes[-1]] if flow[a] > 0)
                w = int(g.dst[arc])
                if w in pos:  # a cycle: it carries nothing to the root
                    k = pos[w]
                    cycle = arcs[k:] + [arc]
                    flow[cycle] -= flow[cycle].min()
                    for x in nodes[k + 1:]:
                        del pos[x]
                    nodes, arcs = nodes[:k + 1], arcs[:k]
                else:
                    pos[w] = len(nodes)
                    nodes.append(w)
                    arcs.append(arc)
            units = int(min(left, flow[arcs].min()))
            flow[arcs] -= units
            left -= units
            paths.append((v, nodes, units))
    return paths


def gather_flow(topology: Topology, collective: str, root: str | int, links: LinkSelector = "all") -> Flow:
    """The optimal gather (scatter) rate to (from) ``root`` and a flow reaching it."""
    if collective not in COLLECTIVES:
        raise SynthesisError(f"unknown rooted flow collective {collective!r} (known: {', '.join(COLLECTIVES)})")
    t0 = time.perf_counter()
    g = flow_graph(topology, links)
    r = root_index(g, root)
    if collective == "scatter":
        g = g.reversed()
    _check_reaches_root(g, r, collective)
    ratio, members, arc_flow, unit = _parametric_cut(g, r)
    leaving = np.nonzero(members[g.src] & ~members[g.dst])[0]
    k = int(sum(1 for v in g.ranks if members[v]))
    cut_cap = float(g.cap[leaving].sum())
    N = len(g.ranks)
    bound = Bound(collective, cut_cap / k, N * cut_cap / k, N, g.nodes[r],
                  frozenset(g.nodes[i] for i in np.nonzero(members)[0]),
                  tuple(g.original_link(int(i)) for i in leaving), cut_cap, k, g.links, time.perf_counter() - t0)
    per_unit = unit / ratio.denominator
    paths = []
    for v, nodes, units in _decompose(g, arc_flow, r, ratio.numerator):
        devices = tuple(g.nodes[i] for i in nodes)
        paths.append(FlowPath(v, devices if collective == "gather" else devices[::-1], units * per_unit))
    return Flow(bound, r, tuple(paths))


def gather_bound(topology: Topology, root: str | int, links: LinkSelector = "all") -> Bound:
    """Best gather to ``root`` (a rank id or position): ``rate`` is the per-rank block
    rate ``x* = min_A cap(out of A) / |A n ranks|`` over sets ``A`` without the root,
    ``algbw = N x*``. ``cut`` is a minimising ``A``, ``cut_links`` the links leaving it."""
    return gather_flow(topology, "gather", root, links).bound


def scatter_bound(topology: Topology, root: str | int, links: LinkSelector = "all") -> Bound:
    """Best scatter from ``root``: gather on the reversed graph (``cut_links`` enter ``cut``)."""
    return gather_flow(topology, "scatter", root, links).bound


# --- chunks and lowering --------------------------------------------------------------

def _hops(devices: tuple[str, ...], index: dict[str, int]) -> list[RankHop]:
    """A device path cut at the GPUs it visits: the hops between consecutive ranks."""
    stops = [k for k, d in enumerate(devices) if d in index]
    return [(index[devices[a]], index[devices[b]], devices[a:b + 1]) for a, b in pairwise(stops)]


def _apportion(topology: Topology, flow: Flow):
    """Chunks per rank and per path (:func:`quantize.apportion`, one group per rank)."""
    paths = flow.paths
    ranks = sorted({p.rank for p in paths})
    groups = [[t for t, p in enumerate(paths) if p.rank == v] for v in ranks]
    uses = [Counter(pairwise(p.devices)) for p in paths]
    capacity = {key: l.bandwidth for key, l in topology.links.items()}
    return apportion(groups, [p.rate for p in paths], [1.0 / topology.num_ranks] * len(paths), uses, capacity,
                     flow.bound.algbw, tolerance=TOLERANCE, candidates=CHUNK_COUNTS)


def _chain(hops: list[RankHop], first: tuple[Buffer, int], last: tuple[Buffer, int], size: int,
           channels: ChannelMap, path: int, scratch: list[int]) -> None:
    """Copy ``size`` chunks from ``first`` on the first rank down the hops into ``last``
    on the last rank; ranks in between keep them in fresh scratch slots."""
    ref = chunk(hops[0][0], first[0], first[1], size)
    for k, (a, b, devices) in enumerate(hops):
        if k == len(hops) - 1:
            buf, at = last
        else:
            buf, at = SCRATCH, scratch[b]
            scratch[b] += size
        ref = ref.copy(b, buf, at, ch=channels.channel(a, b, devices, path))


def _ends(gather: bool, v: int, start: int, chunks: int) -> tuple[tuple[Buffer, int], tuple[Buffer, int]]:
    """Where chunk ``start`` of rank v's block leaves from and arrives at."""
    block = v * chunks + start
    return ((INPUT, start), (OUTPUT, block)) if gather else ((INPUT, block), (OUTPUT, start))


def lower_gather(topology: Topology, collective: str, root: int, paths: list[FlowPath], counts: list[int],
                 name: str, spread: int = 0) -> Lowered:
    """Gather (scatter) with ``counts[t]`` chunks of rank ``paths[t].rank``'s block on
    path t; every rank's counts sum to the same chunks per rank."""
    n, index = topology.num_ranks, {g: i for i, g in enumerate(topology.ranks)}
    hops = [_hops(p.devices, index) for p in paths]
    channels = ChannelMap((h for hs in hops for h in hs), spread)
    per_rank: dict[int, list[int]] = {}
    for t, p in enumerate(paths):
        per_rank.setdefault(p.rank, []).append(t)
    chunks = sum(counts[t] for t in per_rank[paths[0].rank])
    gather = collective == "gather"
    coll = (Gather if gather else Scatter)(n, chunks, root=root)
    scratch = [0] * n
    with _program(name, coll, topology, channels) as prog:
        _local_copy(root, *_ends(gather, root, 0, chunks), chunks)
        for v, mine in sorted(per_rank.items()):
            for k, start, size in _blocks([counts[t] for t in mine]):
                _chain(hops[mine[k]], *_ends(gather, v, start, chunks), size, channels, mine[k], scratch)
    return _finish(prog, topology, channels, chunks)


def synth_gather(topology: Topology, collective: str, root: str | int = 0, links: LinkSelector = "all",
                 name: str | None = None) -> tuple[Lowered, list[str], int]:
    """Gather to (scatter from) ``root`` at the flow bound: ``(lowered, notes, paths)``.

    ``paths`` is the number of flow paths the algorithm uses. Raises
    :class:`SynthesisError` for a root that is not a rank, fewer than two ranks, or a
    rank that cannot reach (be reached from) the root over ``links``.
    """
    flow = gather_flow(topology, collective, root, links)
    a = _apportion(topology, flow)
    used = [(p, c) for p, c in zip(flow.paths, a.counts) if c]
    paths, counts = [p for p, _ in used], [c for _, c in used]
    lowered = within_limits(lower_gather, topology, collective, flow.root, paths, counts,
                            name or f"flow-{collective}")
    ranks = set(topology.ranks)
    relayed = sum(1 for p in paths if sum(d in ranks for d in p.devices) > 2)
    direction = "to" if collective == "gather" else "from"
    note = (f"{collective} {direction} rank {flow.root}: flow {flow.bound.algbw / 1e9:.2f} GB/s over "
            f"{len(paths)} paths ({relayed} through other GPUs), {a.chunks} chunks per rank")
    return lowered, [note], len(paths)
