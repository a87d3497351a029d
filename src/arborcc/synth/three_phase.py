"""Blink's three-phase multi-server all-reduce (Blink section 3.5, Figure 10; section 5.4).

When the GPUs of a job span several servers, Blink partitions the buffer by the
server-local spanning trees, each partition having one root per server, and runs:

1. a reduction inside every server over its local trees, into each partition's
   server-local root;
2. a cross-server reduce-broadcast of every partition among its n local roots (one per
   server): n one-hop cross-server trees, the root on server k reducing the k-th n-th
   of the partition from the other roots and broadcasting the result back - a
   reduce-scatter + all-gather among the roots over the network;
3. a broadcast of every partition from its local root over the server's trees.

API (for :mod:`arborcc.synth.strategies.three_phase`, the ``three-phase`` strategy)::

    synth_three_phase(topology, links="all", name="three-phase-allreduce")
        -> ThreePhase(lowered: Lowered, notes: list[str], trees: list[Tree], counts: list[int])

``lowered`` holds the compiled in-place AllReduce (not yet verified: ``synthesize``
verifies what it returns), its steady-state estimate and the lowering's own notes;
``notes`` describe the plan; ``trees`` are the server-local out-trees (phase 1 runs
them reversed), ``counts`` the chunks each carries over the whole buffer. ``links``
selects the links of the local trees (phase 2 always crosses the network). Raises :class:`~arborcc.errors.SynthesisError` when all
GPUs are in one server (use ``trees``) or a GPU has no host.

Design.

* Local trees: ForestColl's per-root packing of each server's own devices
  (:func:`~arborcc.synth.packing.pack_allgather`; phase 1 runs its trees reversed, a
  reduce-scatter). Every local GPU roots a share, so phase 2's traffic leaves a server
  through every GPU's PCIe switch and NIC; single-root reduce/broadcast trees (Blink
  section 3.3) would push the whole cross-server volume through one GPU's NIC. Trees
  are packed over ``links`` and, where NVLink connects a server's GPUs, over NVLink
  only (leaving PCIe to the network traffic); the faster plan is kept.
* Ports: a root reaches the network through a *port*, a relay-only path from the GPU
  to one of its server's exits (NICs). Port 0 is the sender side of
  ``topology.route``; the others lead to the server's other NICs (through the CPUs on
  a DGX-1). A phase-2 hop is port + network path + the partner's port, reversed.
* Shares: Blink's plan gives every local GPU 1/m of the buffer on port 0. An LP over
  (root, port) shares minimises the busiest link's time per byte (the local trees both
  ways and each port both ways, 2(n-1)/n of the share each); its shares are kept when
  they are faster by more than ``TOLERANCE``. On fragmented allocations (Blink's 3 + 5
  GPUs of two DGX-1V) this moves traffic off a PCIe switch two GPUs share.
* Unequal servers: the buffer is first cut into n equal owner blocks (block k is
  reduced and broadcast in phase 2 by server k's roots); every server cuts every block
  among its roots by the shares, each root's part among its trees (phases 1 and 3) and
  among its ports (phase 2). Phase 2 works on the common refinement of the servers'
  cuts, so each piece has exactly one root and port per server, and each root owns
  1/n of its share, whatever the GPU counts.
* Chunks: cuts are cumulative shares rounded to whole chunks; the chunk count is the
  smallest power of two (``quantize.CHUNK_COUNTS``) whose plan keeps the rate within
  ``TOLERANCE`` of the best count's. Transfers carry at most ``MAX_COUNT`` chunks;
  runtime limits are met by :func:`lower_search.within_limits`.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import pairwise
from typing import NamedTuple

import numpy as np

from arborcc.errors import SynthesisError
from arborcc.ir.model import Buffer
from arborcc.lang import AllReduce, chunk
from arborcc.synth.hosts import server_topology
from arborcc.synth.lower_blocks import transfer_pieces
from arborcc.synth.lower_channels import ChannelMap, tree_hops
from arborcc.synth.lower_emit import Lowered, broadcast_block, finish, lowering_program, reduce_block
from arborcc.synth.lower_search import within_limits
from arborcc.synth.trees import tree_children
from arborcc.synth.packing import pack_allgather
from arborcc.synth.quantize import CHUNK_COUNTS, TOLERANCE
from arborcc.synth.trees import Tree
from arborcc.topology.model import LinkKind, Topology

INPUT = Buffer.INPUT
Path = tuple[str, ...]
End = tuple[str, Path]  #: a phase-2 endpoint: (root GPU, port)


class ThreePhase(NamedTuple):
    """What :func:`synth_three_phase` returns (module doc)."""

    lowered: Lowered
    notes: list[str]
    trees: list[Tree]
    counts: list[int]


@dataclass
class _Server:
    """One server: its GPUs, local out-trees (grouped by root), each GPU's ports, and
    the buffer fraction of every (GPU, port index)."""

    host: int
    gpus: list[str]
    trees: list[Tree]
    links: str
    ports: dict[str, list[Path]]
    shares: dict[tuple[str, int], float] = field(default_factory=dict)

    def weights(self) -> list[tuple[str, float, list[tuple[int, float]], list[float]]]:
        """Per GPU: its share of the buffer as a root, its trees (index, weight) and
        each port's share: what cutting a block among the server needs."""
        return [(g, sum(v for (h, _), v in self.shares.items() if h == g),
                 [(t, tree.weight) for t, tree in enumerate(self.trees) if tree.root == g],
                 [self.shares.get((g, p), 0.0) for p in range(len(self.ports[g]))])
                for g in self.gpus]


@dataclass(frozen=True)
class _Layout:
    """Whole-chunk plan: ``local_ranges`` (server, tree, start, stop) for phases 1 and 3;
    ``cross_ranges`` (owner server, start, stop, endpoint per server) for phase 2. The
    rate needs only the ranges; the lowering sends their pieces (``local``, ``cross``:
    each range as transfers of at most ``MAX_COUNT`` chunks, with their start and size)."""

    chunks: int
    local_ranges: list[tuple[int, int, int, int]]
    cross_ranges: list[tuple[int, int, int, tuple[End, ...]]]

    @cached_property
    def local(self) -> list[tuple[int, int, int, int]]:
        return [(s, t, p, size) for s, t, x, y in self.local_ranges for p, size in transfer_pieces(x, y)]

    @cached_property
    def cross(self) -> list[tuple[int, int, int, tuple[End, ...]]]:
        return [(k, p, size, ends) for k, a, b, ends in self.cross_ranges for p, size in transfer_pieces(a, b)]


# ------------------------------------------------------------------- servers ---
def _servers_of(topology: Topology) -> list[list[str]]:
    """The job's GPUs grouped by host (hosts in order of their first rank)."""
    by_host: dict[int, list[str]] = {}
    for g in topology.ranks:
        host = topology.devices[g].host
        if host is None:
            raise SynthesisError(f"{topology.name}: GPU {g} belongs to no host, so the GPUs cannot be split "
                                 f"into servers for the three-phase all-reduce")
        by_host.setdefault(host, []).append(g)
    if len(by_host) < 2:
        raise SynthesisError(f"{topology.name}: all GPUs are in one server; the three-phase all-reduce "
                             f"(Blink 3.5) needs several (use --strategy trees)")
    return list(by_host.values())


def _local_trees(local: Topology, links: str) -> list[Tree]:
    """ForestColl per-root out-trees of one server in rank order (a lone GPU: an empty tree)."""
    if local.num_ranks == 1:
        return [Tree(local.ranks[0], (), 1.0)]
    packing = pack_allgather(local, links, threshold=TOLERANCE)
    order = {g: i for i, g in enumerate(local.ranks)}
    return sorted((t for t in packing.trees if t.weight > 0), key=lambda t: order[t.root])


def _ports(topology: Topology, local: Topology, gpu: str, partner: str) -> list[Path]:
    """Relay-only paths from ``gpu`` to each exit of its server that can be used both
    ways; first the sender side of ``topology.route(gpu, partner)``."""
    host = topology.devices[gpu].host
    route = topology.route(gpu, partner).path
    first = route[:next(i for i, d in enumerate(route) if topology.devices[d].host != host)]
    exits = {l.src for l in topology.links.values()
             if topology.devices[l.src].host == host and topology.devices[l.dst].host != host}
    import networkx as nx

    others = set(local.ranks) - {gpu}
    g = nx.DiGraph([k for k in local.links if others.isdisjoint(k)])
    ports = [first]
    for e in sorted(exits - {first[-1]}):
        if e in g and nx.has_path(g, gpu, e):
            path = tuple(nx.shortest_path(g, gpu, e))
            if all(g.has_edge(b, a) for a, b in pairwise(path)):
                ports.append(path)
    return ports


class _Network:
    """Shortest paths between exits of different servers over the links that are not
    inside one host (NIC uplinks, switch to switch)."""

    def __init__(self, topology: Topology) -> None:
        import networkx as nx

        def host(d: str):
            return topology.devices[d].host
        self._g = nx.DiGraph([(a, b) for a, b in topology.links if host(a) is None or host(a) != host(b)])
        self._paths: dict[tuple[str, str], Path] = {}

    def path(self, a: End, b: End) -> Path:
        """The device path of a phase-2 hop from endpoint ``a`` to endpoint ``b``."""
        (_, pa), (_, pb) = a, b
        key = (pa[-1], pb[-1])
        if key not in self._paths:
            import networkx as nx

            self._paths[key] = tuple(nx.shortest_path(self._g, *key))
        return pa + self._paths[key][1:-1] + tuple(reversed(pb))


# ------------------------------------------------------------------ shares ---
def _equal_shares(servers: list[_Server]) -> None:
    """Blink's partitions (Figure 10): every local GPU roots 1/m of the buffer, port 0."""
    for srv in servers:
        srv.shares = {(g, 0): 1.0 / len(srv.gpus) for g in srv.gpus}


def _variable_loads(topology: Topology, servers: list[_Server], s: int) -> dict[tuple[str, int], Counter]:
    """Per (GPU, port) of server ``s``: link bytes per byte of its share - its local
    trees both ways, and 2(n-1)/n of the share each way through the port and the
    exit's network links (spread evenly over them)."""
    n, srv = len(servers), servers[s]
    per_root: dict[str, Counter] = {g: Counter() for g in srv.gpus}
    weight = Counter()
    for t in srv.trees:
        weight[t.root] += t.weight
    for t in srv.trees:
        for l, k in (t.link_use() + t.reversed().link_use()).items():
            per_root[t.root][l] += k * t.weight / weight[t.root]
    f = 2 * (n - 1) / n
    out = {}
    for g, ports in srv.ports.items():
        for p, path in enumerate(ports):
            load = Counter(per_root[g])
            for a, b in pairwise(path):
                load[(a, b)] += f
                load[(b, a)] += f
            uplinks = [l for l in topology.out_links(path[-1]) if topology.devices[l.dst].host != srv.host]
            for l in uplinks:
                load[(l.src, l.dst)] += f / len(uplinks)
                load[(l.dst, l.src)] += f / len(uplinks)
            out[(g, p)] = load
    return out


def _lp_shares(topology: Topology, servers: list[_Server]) -> None:
    """Set the (GPU, port) shares minimising the busiest link's time per byte, each
    server's shares summing to 1."""
    from scipy.optimize import linprog
    from scipy.sparse import csr_matrix

    variables = [(s, key, load) for s in range(len(servers))
                 for key, load in _variable_loads(topology, servers, s).items()]
    links = sorted({l for *_, load in variables for l in load if l in topology.links})
    nv = len(variables) + 1  # shares, then the time per byte (in units of 1 / unit B/s)
    unit = max(topology.links[l].bandwidth for l in links)  # keeps HiGHS's tolerances meaningful
    row = {l: i for i, l in enumerate(links)}
    entries = [(row[l], j, v) for j, (*_, load) in enumerate(variables) for l, v in load.items() if l in row]
    entries += [(i, nv - 1, -topology.links[l].bandwidth / unit) for i, l in enumerate(links)]
    r, c, v = zip(*entries)
    a_ub = csr_matrix((v, (r, c)), shape=(len(links), nv))
    a_eq = csr_matrix((np.ones(len(variables)), ([s for s, *_ in variables], range(len(variables)))),
                      shape=(len(servers), nv))
    cost = np.zeros(nv)
    cost[-1] = 1.0
    res = linprog(cost, A_ub=a_ub, b_ub=np.zeros(len(links)), A_eq=a_eq, b_eq=np.ones(len(servers)),
                  bounds=[(0, None)] * nv, method="highs")
    if not res.success:  # pragma: no cover - feasible (equal shares) and bounded below by 0
        raise SynthesisError(f"three-phase share LP failed: {res.message}")
    for srv in servers:
        srv.shares = {}
    for j, (s, key, _) in enumerate(variables):
        if res.x[j] > 1e-9:
            servers[s].shares[key] = float(res.x[j])


# ------------------------------------------------------------------ layout ---
def _cuts(start: int, stop: int, weights: Sequence[float]) -> list[int]:
    """Boundaries cutting ``[start, stop)`` in proportion to ``weights`` (cumulative
    sums rounded to whole chunks)."""
    total, acc, out = float(sum(weights)), 0.0, [start]
    for w in weights:
        acc += w
        out.append(start + round((stop - start) * acc / total) if total else stop)
    out[-1] = stop
    return out


def _cut_server(s: int, srv: _Server, weights: list, lo: int, hi: int, local: list) -> list[tuple[int, End]]:
    """Cut owner block ``[lo, hi)`` among server ``s``'s roots, each root's part among
    its trees (ranges appended to ``local``) and its ports (``weights``: ``srv.weights()``);
    returns (end, endpoint) per port range."""
    ranges = []
    roots = _cuts(lo, hi, [share for _, share, _, _ in weights])
    for (g, _, trees, ports), a, b in zip(weights, roots, roots[1:]):
        tree_cuts = _cuts(a, b, [w for _, w in trees])
        for (t, _), x, y in zip(trees, tree_cuts, tree_cuts[1:]):
            local.append((s, t, x, y))
        port_cuts = _cuts(a, b, ports)
        ranges += [(y, (g, srv.ports[g][p])) for p, x, y in zip(range(len(ports)), port_cuts, port_cuts[1:])
                   if y > x]
    return ranges


def _layout(servers: list[_Server], chunks: int) -> _Layout:
    """Owner blocks, each cut by every server; phase-2 pieces are the common refinement
    of the servers' port ranges inside each block (module doc)."""
    n = len(servers)
    local, cross = [], []
    blocks = _cuts(0, chunks, [1.0] * n)
    weights = [srv.weights() for srv in servers]
    for k in range(n):
        lo, hi = blocks[k], blocks[k + 1]
        ranges = [_cut_server(s, srv, weights[s], lo, hi, local) for s, srv in enumerate(servers)]
        ends_of = [([end for end, _ in rs], [e for _, e in rs]) for rs in ranges]
        bounds = sorted({lo, hi} | {end for rs in ranges for end, _ in rs})
        for a, b in pairwise(bounds):  # each server's port range holding [a, b): the first ending after a
            ends = tuple(es[bisect_right(stops, a)] for stops, es in ends_of)
            cross.append((k, a, b, ends))
    return _Layout(chunks, local, cross)


def _cross_hops(layout: _Layout, network: _Network):
    """(src GPU, dst GPU, path, size) of every phase-2 transfer: partials to the owner's
    root, then the result back."""
    for k, _, size, ends in layout.cross:
        for s, e in enumerate(ends):
            if s != k:
                yield e[0], ends[k][0], network.path(e, ends[k]), size
                yield ends[k][0], e[0], network.path(ends[k], e), size


def _rate(topology: Topology, both_ways: dict[tuple[int, int], Counter], layout: _Layout,
          network: _Network) -> float:
    """Steady-state rate (B/s) of the layout: the busiest link's bytes / bandwidth.
    ``both_ways[(s, t)]``: the links server s's tree t uses, up and down."""
    on_tree = Counter()
    for s, t, x, y in layout.local_ranges:
        on_tree[(s, t)] += y - x
    load = Counter()
    for key, size in on_tree.items():
        for l, k in both_ways[key].items():
            load[l] += size * k
    pair = Counter()  # (from end, to end) -> chunks, as _cross_hops sends them
    for k, a, b, ends in layout.cross_ranges:
        for s, e in enumerate(ends):
            if s != k:
                pair[(e, ends[k])] += b - a
                pair[(ends[k], e)] += b - a
    for (a, b), size in pair.items():
        for l in pairwise(network.path(a, b)):
            load[l] += size
    return layout.chunks / max(v / topology.links[l].bandwidth for l, v in load.items())


def _choose_layout(topology: Topology, servers: list[_Server], network: _Network) -> tuple[_Layout, float]:
    """The fewest (power-of-two) chunks within TOLERANCE of the best count's rate."""
    both_ways = {(s, t): tree.link_use() + tree.reversed().link_use()
                 for s, srv in enumerate(servers) for t, tree in enumerate(srv.trees)}
    rated = [(lay, _rate(topology, both_ways, lay, network))
             for lay in (_layout(servers, c) for c in CHUNK_COUNTS if c >= len(servers))]
    best = max(r for _, r in rated)
    return next((lay, r) for lay, r in rated if r >= (1 - TOLERANCE) * best)


# ----------------------------------------------------------------- lowering ---
def lower_three_phase(topology: Topology, servers: list[_Server], layout: _Layout, network: _Network,
                      name: str, spread: int = 0, fuse: bool = True) -> Lowered:
    """The in-place AllReduce program of the three phases (Figure 10), compiled
    (``fuse``: instruction fusion, see :func:`~arborcc.synth.lower_emit.lowering_program`)."""
    index = {g: i for i, g in enumerate(topology.ranks)}
    cross = list(_cross_hops(layout, network))
    hops = list(tree_hops(topology, [t for srv in servers for t in srv.trees], both_ways=True))
    channels = ChannelMap(hops + [(index[a], index[b], path) for a, b, path, _ in cross], spread)
    keys = [(s, t) for s, srv in enumerate(servers) for t in range(len(srv.trees))]
    tree_ids = {key: i for i, key in enumerate(keys)}
    shapes = {key: tree_children(servers[key[0]].trees[key[1]], index) for key in tree_ids}
    with lowering_program(name, AllReduce(topology.num_ranks, layout.chunks, inplace=True), topology, channels,
                          fuse) as prog:
        for s, t, a, size in layout.local:  # phase 1: reduce into the local roots
            root, kids = shapes[(s, t)]
            reduce_block(root, kids, a, size, channels, INPUT, tree=tree_ids[(s, t)])
        for k, a, size, ends in layout.cross:  # phase 2: one-hop trees among the roots
            _cross_server(index, channels, network, ends, k, a, size, len(tree_ids) + k)
        for s, t, a, size in layout.local:  # phase 3: broadcast from the local roots
            root, kids = shapes[(s, t)]
            broadcast_block(root, kids, (INPUT, a), (INPUT, a), size, channels, tree_ids[(s, t)])
    return finish(prog, topology, channels, layout.chunks)


def _cross_server(index: dict[str, int], channels: ChannelMap, network: _Network, ends: tuple[End, ...],
                  owner: int, a: int, size: int, tree: int) -> None:
    """Server ``owner``'s root reduces the piece from every other root, then sends it back."""
    o = ends[owner]
    others = [e for s, e in enumerate(ends) if s != owner]
    for e in others:
        ch = channels.channel(index[e[0]], index[o[0]], network.path(e, o), tree)
        chunk(index[o[0]], INPUT, a, size).reduce(chunk(index[e[0]], INPUT, a, size), ch=ch)
    for e in others:
        ch = channels.channel(index[o[0]], index[e[0]], network.path(o, e), tree)
        chunk(index[o[0]], INPUT, a, size).copy(index[e[0]], INPUT, a, ch=ch)


# --------------------------------------------------------------------- API ---
def _link_options(local: Topology, links: str) -> list[str]:
    """``links``, and NVLink only when that differs and the server has NVLinks."""
    has_nvlink = any(l.kind is LinkKind.NVLINK for l in local.links.values())
    return [links] + (["nvlink"] if links == "all" and has_nvlink and local.num_ranks > 1 else [])


def _partner(groups: list[list[str]], s: int, i: int) -> str:
    """The GPU of local position ``i`` (modulo its size) in the server after ``s``:
    whose route gives GPU i of server s its port 0 (on rail networks, its own rail)."""
    nxt = groups[(s + 1) % len(groups)]
    return nxt[i % len(nxt)]


def _candidates(topology: Topology, groups: list[list[str]], links: str) -> list[list[_Server]]:
    """Servers with local trees over ``links``, and over NVLink only where that differs
    and the NVLinks connect the server (else ``links`` again)."""
    locals_ = [server_topology(topology, gpus) for gpus in groups]
    ports = [{g: _ports(topology, local, g, _partner(groups, s, i)) for i, g in enumerate(gpus)}
             for s, (gpus, local) in enumerate(zip(groups, locals_))]
    options = [links] + (["nvlink"] if any(_link_options(l, links)[1:] for l in locals_) else [])
    out = []
    for option in options:
        servers = []
        for s, (gpus, local) in enumerate(zip(groups, locals_)):
            chosen = option if option in _link_options(local, links) else links
            try:
                trees = _local_trees(local, chosen)
            except SynthesisError:  # NVLink does not connect this server's GPUs
                chosen, trees = links, _local_trees(local, links)
            servers.append(_Server(topology.devices[gpus[0]].host, list(gpus), trees, chosen, ports[s]))
        out.append(servers)
    return out


def _plan(topology: Topology, groups: list[list[str]], links: str, network: _Network):
    """The fastest (servers, layout, rate, share rule) over the local-link candidates:
    Blink's equal shares unless the LP's are faster by more than TOLERANCE."""
    best = None
    for servers in _candidates(topology, groups, links):
        _equal_shares(servers)
        layout, rate = _choose_layout(topology, servers, network)
        plan = (servers, layout, rate, "equal shares")
        lp = [_Server(s.host, s.gpus, s.trees, s.links, s.ports) for s in servers]
        _lp_shares(topology, lp)
        lp_layout, lp_rate = _choose_layout(topology, lp, network)
        if lp_rate > (1 + TOLERANCE) * rate:
            plan = (lp, lp_layout, lp_rate, "LP shares over ports")
        if best is None or plan[2] > best[2]:
            best = plan
    return best


def synth_three_phase(topology: Topology, links: str = "all", name: str = "three-phase-allreduce") -> ThreePhase:
    """Blink's three-phase all-reduce (section 3.5, Figure 10) lowered to one in-place
    AllReduce program; see the module doc for the API and the design."""
    groups = _servers_of(topology)
    network = _Network(topology)
    servers, layout, rate, rule = _plan(topology, groups, links, network)
    lowered = within_limits(lower_three_phase, topology, servers, layout, network, name, takes_fuse=True)
    counts = Counter()
    for s, t, _, size in layout.local:
        counts[(s, t)] += size
    keys = [(s, t) for s, srv in enumerate(servers) for t in range(len(srv.trees)) if counts[(s, t)]]
    sizes = sorted({len(srv.gpus) for srv in servers})
    summary = (f"three-phase all-reduce (Blink 3.5): {len(servers)} servers of "
               f"{'+'.join(str(len(srv.gpus)) for srv in servers) if len(sizes) > 1 else sizes[0]} GPUs, "
               f"{len(keys)} local trees (links {'/'.join(sorted({srv.links for srv in servers}))}), {rule}, "
               f"{layout.chunks} chunks, {rate / 1e9:.2f} GB/s")
    return ThreePhase(lowered, [summary], [servers[s].trees[t] for s, t in keys],
                      [counts[k] for k in keys])
