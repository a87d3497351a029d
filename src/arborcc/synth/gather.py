"""Gather and scatter, optimal by construction: a single-sink flow, split into paths.

API (for :mod:`arborcc.synth.strategies.trees`)::

    gather_flow(topology, collective, root, links="all") -> Flow   # the bound and its paths
    synth_gather(topology, collective, root=0, links="all", name=None) -> (Lowered, notes, paths)

``collective`` is ``"gather"`` or ``"scatter"``; the bound itself is
:func:`arborcc.synth.bounds.gather_bound` (the minimum ratio cut with the root the only
sink). Like :mod:`.lower`'s functions, ``synth_gather`` compiles but does not verify
(``synthesize`` proves the algorithm it returns); the algorithm meets the executor
dialect's limits when it can (:func:`arborcc.synth.lower_search.within_limits`).

Schedule
--------
The max-flow at ``x*`` decomposes into paths and cycles (flow decomposition theorem;
Ahuja, Magnanti & Orlin, *Network Flows: Theory, Algorithms, and Applications*,
Prentice Hall, 1993, theorem 3.5). A path from ``s``
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
:class:`arborcc.synth.lower_channels.ChannelMap`, so each (rank pair, device path) is a
connection with one path, exactly like a tree hop.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from arborcc.errors import SynthesisError
from arborcc.ir.model import Buffer
from arborcc.lang import Gather, Scatter, chunk
from arborcc.synth.bounds import Bound, gather_cut
from arborcc.synth.flowgraph import FlowGraph, LinkSelector, flow_graph, root_index
from arborcc.synth.lower_blocks import transfer_blocks
from arborcc.synth.lower_channels import ChannelMap
from arborcc.synth.lower_emit import Lowered, finish, local_copy, lowering_program
from arborcc.synth.lower_search import within_limits
from arborcc.synth.quantize import CHUNK_COUNTS, TOLERANCE, apportion
from arborcc.topology.model import Topology

INPUT, OUTPUT, SCRATCH = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH

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


# --- the flow and its paths ---------------------------------------------------------

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
    if collective not in ("gather", "scatter"):
        raise SynthesisError(f"a single-sink flow builds gather or scatter, not {collective!r}")
    g = flow_graph(topology, links)
    r = root_index(g, root)
    if collective == "scatter":
        g = g.reversed()
    bound, cut = gather_cut(g, r, collective)
    per_unit = cut.unit / cut.ratio.denominator
    paths = []
    for v, nodes, units in _decompose(g, cut.arc_flow, r, cut.ratio.numerator):
        devices = tuple(g.nodes[i] for i in nodes)
        paths.append(FlowPath(v, devices if collective == "gather" else devices[::-1], units * per_unit))
    return Flow(bound, r, tuple(paths))


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
    with lowering_program(name, coll, topology, channels) as prog:
        local_copy(root, *_ends(gather, root, 0, chunks), chunks)
        for v, mine in sorted(per_rank.items()):
            for k, start, size in transfer_blocks([counts[t] for t in mine]):
                _chain(hops[mine[k]], *_ends(gather, v, start, chunks), size, channels, mine[k], scratch)
    return finish(prog, topology, channels, chunks)


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
