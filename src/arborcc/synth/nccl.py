"""The classic baselines NCCL builds, and NCCL's alpha-beta cost model.

Source: ``reference/baselines-and-benchmarks.md`` ("What users compare against"):
NCCL searches rings depth-first using only the fastest link type it can (NVLink when
an NVLink ring exists, else through PCIe), builds double binary trees over nodes with a
chain inside each node, and predicts times with a per algorithm x protocol alpha-beta
model. The recursive halving-doubling pairings follow Thakur, Rabenseifner & Gropp
(2005), as restated by the BlueConnect paper's equation (2).

Ring search (:func:`nccl_rings`), modelled on NCCL's graph search:

* Tiers: first only rank pairs whose route is NVLink end to end (a direct NVLink or
  through an NVSwitch); if no ring exists there, any route (PCIe, CPU, inter-socket).
* Channels consume bandwidth: a ring searched at ``speed`` takes ``speed`` from every
  physical link on each of its hops' routes, and a hop is possible only where every
  link still has ``speed`` left. Rings are searched depth-first (trying the peers with
  most bandwidth left first) one after another until ``max_rings`` or no more fit, with
  a bounded backtracking over earlier rings when a greedy choice blocks later ones.
  Candidate speeds are every link's bandwidth divided by 1..lanes; the speed with the
  largest total (rings x speed) wins, fewer rings on ties. On DGX-1V this finds six
  NVLink rings of one lane each (three lane-disjoint Hamiltonian cycles, each in both
  directions), on DGX-1P four (two edge-disjoint cycles, both directions); on an
  NVSwitch box one ring in rank order already fills every port.
* Across nodes a ring enters and leaves every node once: per channel a NIC of each
  node, a chain through the node's GPUs from a GPU next to that NIC to another one next
  to it, and the chains of the nodes joined in node order.

Rank indices are positions in ``topology.ranks``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

from arborcc.errors import SynthesisError
from arborcc.topology.model import DeviceKind, LinkKind, Topology

#: limit of depth-first search steps per ring (keeps pathological inputs bounded)
DFS_BUDGET = 20_000
DEFAULT_MAX_RINGS = 16


# --------------------------------------------------------------------------- data ---
@dataclass
class RingSchedule:
    """Rings (channels) over rank indices; each ring visits every rank once.

    ``link_kind``: the slowest class of link the rings rely on - NVLINK when they stay
    on NVLink, PCIE when they go through PCIe/CPU, NETWORK when they cross nodes;
    ``intra_link_kind`` the same inside a node (NVLINK or PCIE). ``bandwidths[i]``:
    ring i's bottleneck in B/s when all rings run at once (each physical link shared
    equally by the ring hops routed over it). ``hops[i][k]`` is the device path of hop
    ``rings[i][k] -> rings[i][k+1]`` (wrapping around). ``nodes`` counts hosts.
    """

    rings: list[list[int]]
    link_kind: LinkKind
    bandwidths: list[float]
    intra_link_kind: LinkKind = LinkKind.NVLINK
    nodes: int = 1
    hops: list[list[tuple[str, ...]]] = field(default_factory=list)

    @property
    def bus_bandwidth(self) -> float:
        """channels x per-channel bandwidth (B/s), NCCL's bus bandwidth."""
        return float(sum(self.bandwidths))

    @property
    def num_ranks(self) -> int:
        return len(self.rings[0]) if self.rings else 0

    def validate(self, n: int) -> None:
        """Raise SynthesisError unless every ring is a Hamiltonian cycle over 0..n-1."""
        if not self.rings:
            raise SynthesisError("ring schedule has no ring")
        for k, ring in enumerate(self.rings):
            if sorted(ring) != list(range(n)):
                raise SynthesisError(f"ring {k} {ring} does not visit every rank 0..{n - 1} exactly once")
        if len(self.bandwidths) != len(self.rings):
            raise SynthesisError("one bandwidth per ring is needed")


@dataclass
class DoubleBinaryTree:
    """NCCL's double binary tree: two complementary binary trees over the nodes, a chain
    through each node's ranks.

    ``node_parents[t][k]`` is node k's parent in tree t (None at the root);
    ``chains[k]`` the ranks of node k in chain order (``chains[k][0]`` is the node's
    head, which talks to the other nodes); ``parents[t][r]`` the resulting rank-level
    tree t. ``bandwidths[t]``: tree t's bottleneck (B/s) with both trees running.
    """

    chains: list[list[int]]
    node_parents: tuple[dict[int, int | None], dict[int, int | None]]
    parents: tuple[dict[int, int | None], dict[int, int | None]]
    bandwidths: tuple[float, float]
    intra_link_kind: LinkKind = LinkKind.NVLINK

    @property
    def roots(self) -> tuple[int, int]:
        return tuple(next(r for r, p in tree.items() if p is None) for tree in self.parents)  # type: ignore[return-value]

    @property
    def nodes(self) -> int:
        return len(self.chains)

    def children(self, tree: int) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {r: [] for r in self.parents[tree]}
        for r, p in sorted(self.parents[tree].items()):
            if p is not None:
                out[p].append(r)
        return out

    def validate(self, n: int) -> None:
        for t, par in enumerate(self.parents):
            _check_tree(par, list(range(n)), f"double binary tree {t}")
            for v, kids in self.children(t).items():
                if sum(1 for k in kids if self._node_of(k) != self._node_of(v)) > 2:
                    raise SynthesisError(f"double binary tree {t}: rank {v} has more than 2 children across nodes")

    def _node_of(self, r: int) -> int:
        return next(k for k, c in enumerate(self.chains) if r in c)


@dataclass
class HalvingDoublingSchedule:
    """Recursive halving (reduce-scatter) then doubling (all-gather) pairings.

    ``core`` holds the 2^k ranks that exchange; with n not a power of two the
    ``fold`` pairs (extra, partner) come first - the extra rank hands its data to its
    partner and gets the result back at the end (Rabenseifner's method, Thakur et al.
    2005, section 4). ``steps[s]`` are the disjoint pairs exchanging at halving step s
    (partner distance 2^(k-1-s) in core positions); all-gather runs them reversed.
    """

    n: int
    core: list[int]
    fold: list[tuple[int, int]]
    steps: list[list[tuple[int, int]]]

    def validate(self) -> None:
        if sorted(self.core + [e for e, _ in self.fold]) != list(range(self.n)):
            raise SynthesisError("halving-doubling core and fold do not partition the ranks")
        for s, pairs in enumerate(self.steps):
            flat = [r for p in pairs for r in p]
            if sorted(flat) != sorted(self.core):
                raise SynthesisError(f"halving-doubling step {s} does not pair every core rank once")


# ---------------------------------------------------------------- route helpers ---
def _route_links(topology: Topology, a: str, b: str) -> list[tuple[str, str]]:
    return list(topology.route(a, b).pairs())


def _nvlink_only(topology: Topology, a: str, b: str) -> bool:
    return all(topology.links[p].kind is LinkKind.NVLINK for p in _route_links(topology, a, b))


def _check_reachable(topology: Topology, ranks: Sequence[int]) -> None:
    for i in ranks:
        for j in ranks:
            if i != j and not topology.can_route(topology.ranks[i], topology.ranks[j]):
                raise SynthesisError(f"{topology.name}: GPUs {topology.ranks[i]} and {topology.ranks[j]} "
                                     f"cannot reach each other")


def _paths(topology: Topology, walk: list[tuple[int, int]]) -> list[tuple[str, ...]]:
    return [topology.route(topology.ranks[a], topology.ranks[b]).path for a, b in walk]


def _fair_share(topology: Topology, walks: list[list[tuple[str, ...]]]) -> list[float]:
    """Bottleneck of each walk (a list of hops, each a device path) when all run at once
    and every directed physical link is shared equally by the hops routed over it."""
    load: dict[tuple[str, str], int] = {}
    for walk in walks:
        for path in walk:
            for p in zip(path, path[1:]):
                load[p] = load.get(p, 0) + 1
    out = []
    for walk in walks:
        bws = [topology.links[p].bandwidth / load[p] for path in walk for p in zip(path, path[1:])]
        out.append(min(bws) if bws else math.inf)
    return out


def _cycle_hops(ring: Sequence[int]) -> list[tuple[int, int]]:
    return [(ring[k], ring[(k + 1) % len(ring)]) for k in range(len(ring))] if len(ring) > 1 else []


class _Residual:
    """Bandwidth left on every directed physical link while rings are being placed."""

    def __init__(self, topology: Topology):
        self.t = topology
        self.left = {k: l.bandwidth for k, l in topology.links.items()}
        self._routes: dict[tuple[int, int], list[tuple[str, str]]] = {}

    def links(self, a: int, b: int) -> list[tuple[str, str]]:
        key = (a, b)
        if key not in self._routes:
            self._routes[key] = _route_links(self.t, self.t.ranks[a], self.t.ranks[b])
        return self._routes[key]

    def room(self, a: int, b: int) -> float:
        return min(self.left[p] for p in self.links(a, b))

    def take(self, a: int, b: int, amount: float) -> None:
        for p in self.links(a, b):
            self.left[p] -= amount


def _dfs_chain(res: _Residual, members: Sequence[int], start: int, ends: Sequence[int],
               speed: float, allowed: Callable[[int, int], bool]) -> list[int] | None:
    """Depth-first search for a Hamiltonian path over ``members`` from ``start`` to one
    of ``ends`` (a node's stretch of a multi-node ring), every hop having ``speed`` left
    on its route. Bandwidth is taken while descending and given back when backtracking;
    peers with most room left are tried first (NCCL sorts its next GPUs by bandwidth).
    On success the chain's bandwidth stays taken."""
    eps = 1e-6 * speed
    m = len(members)
    path = [start]
    seen = {start}
    budget = [DFS_BUDGET]
    end_set = set(ends)
    order = {r: k for k, r in enumerate(members)}

    def fits(a: int, b: int) -> bool:
        return allowed(a, b) and res.room(a, b) >= speed - eps

    def rec() -> bool:
        budget[0] -= 1
        if budget[0] < 0:
            return False
        u = path[-1]
        if len(path) == m:
            return m == 1 or u in end_set
        cands = [v for v in members if v not in seen and fits(u, v)]
        if len(path) < m - 1:
            # do not spend the last possible end before the chain is complete
            cands = [v for v in cands if v not in end_set or len(end_set - seen) > 1]
        cands.sort(key=lambda v: (-res.room(u, v), order[v]))
        for v in cands:
            res.take(u, v, speed)
            path.append(v)
            seen.add(v)
            if rec():
                return True
            seen.discard(v)
            path.pop()
            res.take(u, v, -speed)
        return False

    return list(path) if rec() else None


def _candidate_speeds(topology: Topology, members: Sequence[int], allowed: Callable[[int, int], bool]) -> list[float]:
    """Per-channel speeds worth trying: every link's bandwidth split over 1..lanes channels."""
    speeds: set[float] = set()
    for a in members:
        for b in members:
            if a != b and allowed(a, b):
                for p in _route_links(topology, topology.ranks[a], topology.ranks[b]):
                    l = topology.links[p]
                    speeds.update(l.bandwidth / k for k in range(1, l.count + 1))
    return sorted(speeds, reverse=True)


def _tiers(topology: Topology) -> list[tuple[LinkKind, Callable[[int, int], bool]]]:
    nv_cache: dict[tuple[int, int], bool] = {}

    def nvlink(a: int, b: int) -> bool:
        if (a, b) not in nv_cache:
            nv_cache[(a, b)] = _nvlink_only(topology, topology.ranks[a], topology.ranks[b])
        return nv_cache[(a, b)]

    return [(LinkKind.NVLINK, nvlink), (LinkKind.PCIE, lambda a, b: True)]


def _cycles(res: _Residual, members: Sequence[int], speed: float, allowed: Callable[[int, int], bool],
            budget: list[int]) -> Iterator[list[int]]:
    """Every Hamiltonian cycle over ``members`` from ``members[0]`` whose hops have
    ``speed`` left (peers with most room first). While a cycle is yielded its bandwidth
    is taken from ``res``; it is given back when the generator resumes or is closed."""
    eps = 1e-6 * speed
    m = len(members)
    start = members[0]
    order = {r: k for k, r in enumerate(members)}
    path = [start]
    seen = {start}

    def fits(a: int, b: int) -> bool:
        return allowed(a, b) and res.room(a, b) >= speed - eps

    def rec() -> Iterator[list[int]]:
        budget[0] -= 1
        if budget[0] < 0:
            return
        u = path[-1]
        if len(path) == m:
            if fits(u, start):
                res.take(u, start, speed)
                try:
                    yield list(path)
                finally:
                    res.take(u, start, -speed)
            return
        cands = [v for v in members if v not in seen and fits(u, v)]
        cands.sort(key=lambda v: (-res.room(u, v), order[v]))
        for v in cands:
            res.take(u, v, speed)
            path.append(v)
            seen.add(v)
            try:
                yield from rec()
            finally:
                seen.discard(v)
                path.pop()
                res.take(u, v, -speed)
            if budget[0] < 0:
                return

    if m > 1:
        yield from rec()


def _ring_bound(res: _Residual, members: Sequence[int], speed: float, allowed: Callable[[int, int], bool]) -> int:
    """Rings that can still be added at ``speed``: no more than the links any rank's
    allowed hops leave (or arrive) by can carry."""
    eps = 1e-6 * speed
    best = None
    for r in members:
        first = {res.links(r, v)[0] for v in members if v != r and allowed(r, v)}
        last = {res.links(v, r)[-1] for v in members if v != r and allowed(v, r)}
        for links in (first, last):
            cap = sum(int((res.left[p] + eps) // speed) for p in links)
            best = cap if best is None else min(best, cap)
    return best or 0


def _max_cycles(res: _Residual, members: list[int], speed: float, allowed: Callable[[int, int], bool],
                max_rings: int) -> list[list[int]]:
    """As many capacity-respecting Hamiltonian cycles at ``speed`` as a bounded
    backtracking search finds: the greedy first choice, revisited when it blocks later
    rings (e.g. on DGX-1V a ring mixing 1- and 2-lane links can leave no room for the
    sixth). ``_ring_bound`` prunes and stops the search once it is met."""
    budget = [DFS_BUDGET]
    best: list[list[int]] = []
    limit = min(max_rings, _ring_bound(res, members, speed, allowed))
    rings: list[list[int]] = []

    def search() -> bool:
        nonlocal best
        if len(rings) > len(best):
            best = [list(r) for r in rings]
        if len(best) >= limit:
            return True
        if len(rings) >= max_rings or len(rings) + _ring_bound(res, members, speed, allowed) <= len(best):
            return False
        gen = _cycles(res, members, speed, allowed, budget)
        try:
            for ring in gen:
                rings.append(ring)
                done = search()
                rings.pop()
                if done or budget[0] < 0:
                    return done
        finally:
            gen.close()
        return False

    search()
    return best


def _search_cycles(topology: Topology, members: list[int], max_rings: int
                   ) -> tuple[list[list[int]], LinkKind] | None:
    """Best set of capacity-respecting Hamiltonian cycles over ``members`` (module doc)."""
    for kind, allowed in _tiers(topology):
        best: tuple[float, list[list[int]]] | None = None
        for speed in _candidate_speeds(topology, members, allowed):
            if best is not None and speed * max_rings <= best[0] * (1 + 1e-9):
                break
            rings = _max_cycles(_Residual(topology), members, speed, allowed, max_rings)
            if rings:
                total = speed * len(rings)
                if best is None or total > best[0] * (1 + 1e-9):
                    best = (total, rings)
        if best is not None:
            return best[1], kind
    return None


# ------------------------------------------------------------------------- rings ---
def _hosts(topology: Topology) -> list[list[int]]:
    by_host: dict[int, list[int]] = {}
    for i, g in enumerate(topology.ranks):
        h = topology.devices[g].host
        by_host.setdefault(-1 if h is None else h, []).append(i)
    return [by_host[h] for h in sorted(by_host)]


def _nics_of(topology: Topology, host_ranks: list[int]) -> list[str]:
    host = topology.devices[topology.ranks[host_ranks[0]]].host
    return sorted((d.id for d in topology.devices.values() if d.kind is DeviceKind.NIC and d.host == host),
                  key=lambda d: (topology.devices[d].index if topology.devices[d].index is not None else 0, d))


def _hop_distance(topology: Topology, a: str, b: str) -> tuple[int, float]:
    if not topology.can_route(a, b):
        return (1 << 30, 0.0)
    r = topology.route(a, b)
    return (r.hops, -r.bandwidth)


def _make_schedule(topology: Topology, rings: list[list[int]], kind: LinkKind, intra: LinkKind,
                   nodes: int, forced: dict[tuple[int, int], tuple[str, ...]] | None = None) -> RingSchedule:
    """Finish a schedule: hop paths (routes, or ``forced[(ring, hop)]``) and fair-share
    bandwidths."""
    hops = []
    for i, ring in enumerate(rings):
        walk = _paths(topology, _cycle_hops(ring))
        for k in range(len(walk)):
            if forced and (i, k) in forced:
                walk[k] = forced[(i, k)]
        hops.append(walk)
    bws = _fair_share(topology, hops)
    sched = RingSchedule(rings, kind, [b if math.isfinite(b) else 0.0 for b in bws], intra, nodes, hops)
    sched.validate(topology.num_ranks)
    return sched


def nccl_rings(topology: Topology, max_rings: int = DEFAULT_MAX_RINGS) -> RingSchedule:
    """The rings NCCL's search would build on ``topology`` (module doc)."""
    if max_rings < 1:
        raise SynthesisError(f"max_rings must be >= 1, got {max_rings}")
    n = topology.num_ranks
    _check_reachable(topology, range(n))
    hosts = _hosts(topology)
    if n == 1:
        return RingSchedule([[0]], LinkKind.NVLINK, [0.0], LinkKind.NVLINK, 1, [[]])
    if len(hosts) == 1:
        found = _search_cycles(topology, list(range(n)), max_rings)
        if found is None:  # pragma: no cover - any-route tier always has a cycle when reachable
            raise SynthesisError(f"{topology.name}: no ring found")
        rings, kind = found
        return _make_schedule(topology, rings, kind, kind, 1)
    return _multi_node_rings(topology, hosts, max_rings)


def _node_ends(topology: Topology, members: list[int], nic: str | None, channel: int) -> tuple[int, list[int], list[int]]:
    """Where channel ``channel``'s chain through a node starts and may end: at GPUs
    nearest (fewest hops) to the channel's NIC, rotating with the channel so the GPUs
    next to a NIC take turns entering and leaving. Returns (start, ends, search order)."""
    if nic is None:
        return members[0], [r for r in members if r != members[0]], list(members)
    dist = {r: _hop_distance(topology, topology.ranks[r], nic) for r in members}
    close = sorted(members, key=lambda r: (dist[r], r))
    near = [r for r in close if dist[r][0] == dist[close[0]][0]]
    start = near[channel % len(near)]
    k = (channel + 1) % len(near)
    ends = [r for r in near[k:] + near[:k] if r != start] or [r for r in close if r != start]
    return start, ends, [start] + [r for r in close if r != start]


def _multi_node_rings(topology: Topology, hosts: list[list[int]], max_rings: int) -> RingSchedule:
    """Rings that enter and leave every node once (module doc): one channel per NIC of
    the node with fewest NICs (one channel without NICs), every channel's chains found
    at one common speed - the highest at which all of them fit."""
    nics = [_nics_of(topology, h) for h in hosts]
    channels = max(1, min(max_rings, min(len(x) for x in nics))) if all(nics) else 1
    for kind, allowed in _tiers(topology):
        speeds = sorted({s for h in hosts for s in _candidate_speeds(topology, h, allowed)}, reverse=True)
        for speed in speeds or [1.0]:
            res = _Residual(topology)
            chains: list[list[list[int]]] = []
            for c in range(channels):
                per_host = []
                for h, members in enumerate(hosts):
                    nic = nics[h][c % len(nics[h])] if nics[h] else None
                    start, ends, order = _node_ends(topology, members, nic, c)
                    chain = [start] if len(members) == 1 else \
                        _dfs_chain(res, order, start, ends, speed, allowed)
                    if chain is None:
                        break
                    per_host.append(chain)
                if len(per_host) < len(hosts):
                    break
                chains.append(per_host)
            if len(chains) == channels:
                rings = [[r for chain in per_host for r in chain] for per_host in chains]
                forced: dict[tuple[int, int], tuple[str, ...]] = {}
                if all(nics):
                    # the hop leaving node h goes out through the channel's NIC of node h and in
                    # through the channel's NIC of the next node
                    for c, per_host in enumerate(chains):
                        pos = 0
                        for h, chain in enumerate(per_host):
                            pos += len(chain)
                            nxt = (h + 1) % len(hosts)
                            a, b = topology.ranks[chain[-1]], topology.ranks[per_host[nxt][0]]
                            na, nb = nics[h][c % len(nics[h])], nics[nxt][c % len(nics[nxt])]
                            forced[(c, pos - 1)] = (topology.route(a, na).path + topology.route(na, nb).path[1:]
                                                    + topology.route(nb, b).path[1:])
                return _make_schedule(topology, rings, LinkKind.NETWORK, kind, len(hosts), forced)
    raise SynthesisError(f"{topology.name}: no chain through the GPUs of some node")  # pragma: no cover


def plain_ring(topology: Topology) -> RingSchedule:
    """One ring in rank order 0 -> 1 -> ... -> n-1 -> 0, whatever links that crosses."""
    n = topology.num_ranks
    _check_reachable(topology, range(n))
    ring = list(range(n))
    hosts = _hosts(topology)
    nvl = all(_nvlink_only(topology, topology.ranks[a], topology.ranks[b]) for a, b in _cycle_hops(ring))
    intra = LinkKind.NVLINK if nvl or n == 1 else LinkKind.PCIE
    if len(hosts) > 1:
        intra = LinkKind.NVLINK if all(_nvlink_only(topology, topology.ranks[a], topology.ranks[b])
                                       for h in hosts for a, b in zip(h, h[1:])) else LinkKind.PCIE
    kind = LinkKind.NETWORK if len(hosts) > 1 else intra
    if n == 1:
        return RingSchedule([[0]], kind, [0.0], intra, 1, [[]])
    return _make_schedule(topology, [ring], kind, intra, len(hosts))


# ----------------------------------------------------------- double binary tree ---
def _btree_parent(n: int, r: int) -> int | None:
    """Parent of ``r`` in NCCL's first binary tree over 0..n-1: clear r's lowest set bit
    and set the next higher one; if that leaves the range, just clear the bit. Rank 0
    is the root (its only child is the largest power of two below n)."""
    if r == 0:
        return None
    low = r & -r
    up = (r ^ low) | (low << 1)
    return up if up < n else r ^ low


def double_binary_tree_nodes(n: int) -> tuple[dict[int, int | None], dict[int, int | None]]:
    """The two node-level trees: the first as :func:`_btree_parent`, the second its
    mirror image (``n-1-r``) when n is even or its shift by one when n is odd, so that a
    node is interior in at most one of the two trees (for even n)."""
    if n < 1:
        raise SynthesisError(f"a double binary tree needs at least one node, got {n}")
    first = {r: _btree_parent(n, r) for r in range(n)}
    if n % 2 == 0:
        second = {r: (None if first[n - 1 - r] is None else n - 1 - first[n - 1 - r]) for r in range(n)}  # type: ignore[operator]
    else:
        second = {}
        for r in range(n):
            p = first[(r - 1) % n]
            second[r] = None if p is None else (p + 1) % n
    return first, second


def double_binary_tree(topology: Topology, rings: RingSchedule | None = None) -> DoubleBinaryTree:
    """NCCL's double binary tree: node trees from :func:`double_binary_tree_nodes`,
    chains inside each node taken from the first NCCL ring (its stretch in that node),
    the chain's first rank being the node's head in both trees. Edges between heads go
    through a NIC next to each head (the two trees alternate among equally near NICs);
    ``bandwidths`` share every link fairly among the edges of both trees."""
    n = topology.num_ranks
    rings = rings if rings is not None else nccl_rings(topology)
    hosts = _hosts(topology)
    host_of = {r: k for k, h in enumerate(hosts) for r in h}
    ring = rings.rings[0]
    if len(hosts) == 1:
        chains = [list(ring)]
    else:
        chains = [[r for r in ring if host_of[r] == k] for k in range(len(hosts))]
    node_trees = double_binary_tree_nodes(len(hosts))
    parents = []
    for nt in node_trees:
        par: dict[int, int | None] = {}
        for k, chain in enumerate(chains):
            up = nt[k]
            par[chain[0]] = None if up is None else chains[up][0]
            for a, b in zip(chain, chain[1:]):
                par[b] = a
        parents.append(par)
    # a head-to-head edge between nodes goes through a NIC next to each head; the two
    # trees take turns among equally near NICs so they do not share one
    nics = [_nics_of(topology, h) for h in hosts]

    def nic_for(k: int, tree: int) -> str | None:
        if not nics[k]:
            return None
        head = topology.ranks[chains[k][0]]
        dist = {x: _hop_distance(topology, head, x) for x in nics[k]}
        best = min(dist.values())[0]
        near = [x for x in nics[k] if dist[x][0] == best]
        return near[tree % len(near)]

    walks = []
    for t, par in enumerate(parents):
        walk = []
        for r, p in sorted(par.items()):
            if p is None:
                continue
            a, b = topology.ranks[r], topology.ranks[p]
            ka, kb = host_of[r], host_of[p]
            na, nb = (nic_for(ka, t), nic_for(kb, t)) if ka != kb else (None, None)
            if na is not None and nb is not None:
                walk.append(topology.route(a, na).path + topology.route(na, nb).path[1:]
                            + topology.route(nb, b).path[1:])
            else:
                walk.append(topology.route(a, b).path)
        walks.append(walk)
    bws = _fair_share(topology, walks)
    dbt = DoubleBinaryTree(chains, (node_trees[0], node_trees[1]), (parents[0], parents[1]),
                           (bws[0] if math.isfinite(bws[0]) else 0.0, bws[1] if math.isfinite(bws[1]) else 0.0),
                           rings.intra_link_kind)
    dbt.validate(n)
    return dbt


def _check_tree(parent: dict[int, int | None], ranks: list[int], what: str) -> None:
    if sorted(parent) != ranks:
        raise SynthesisError(f"{what} does not span the ranks")
    roots = [r for r, p in parent.items() if p is None]
    if len(roots) != 1:
        raise SynthesisError(f"{what} has {len(roots)} roots")
    for r in parent:
        seen = set()
        v: int | None = r
        while v is not None:
            if v in seen:
                raise SynthesisError(f"{what} has a cycle through rank {r}")
            seen.add(v)
            v = parent[v]


# ------------------------------------------------------- recursive halving-doubling ---
def recursive_halving_doubling(n: int) -> HalvingDoublingSchedule:
    """Pairings of recursive halving (reduce-scatter) / doubling (all-gather) over n
    ranks (Thakur, Rabenseifner & Gropp 2005; BlueConnect eq. (2) for the cost)."""
    if n < 1:
        raise SynthesisError(f"halving-doubling needs at least one rank, got {n}")
    k = n.bit_length() - 1
    extra = n - (1 << k)
    # first 2*extra ranks pair up (2i, 2i+1); the even one folds into the odd one
    fold = [(2 * i, 2 * i + 1) for i in range(extra)]
    core = [2 * i + 1 for i in range(extra)] + list(range(2 * extra, n))
    steps = []
    for s in range(k):
        dist = 1 << (k - 1 - s)
        steps.append([(core[i], core[i ^ dist]) for i in range(len(core)) if i < (i ^ dist)])
    sched = HalvingDoublingSchedule(n, core, fold, steps)
    sched.validate()
    return sched


# --------------------------------------------------------------- NCCL cost model ---
PROTOCOLS = ("LL", "LL128", "Simple")
ALGORITHMS = ("ring", "tree")
COLLECTIVES = ("allreduce", "reducescatter", "allgather", "broadcast", "reduce")

#: base latency (us) per algorithm, per protocol (baselines-and-benchmarks.md)
NCCL_BASE_LATENCY_US = {"tree": {"LL": 6.8, "LL128": 14.0, "Simple": 8.4},
                        "ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}}
#: per-hop latency (us) by link class, algorithm and protocol
NCCL_HOP_LATENCY_US = {
    "nvlink": {"tree": {"LL": 0.6, "LL128": 1.25, "Simple": 4.0}, "ring": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4}},
    "pcie": {"tree": {"LL": 1.0, "LL128": 1.9, "Simple": 4.0}, "ring": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7}},
    "network": {"tree": {"LL": 5.0, "LL128": 8.5, "Simple": 14.0}, "ring": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0}},
}
#: share of the wire each protocol delivers (LL: half, LL128: about 92%)
NCCL_PROTOCOL_EFFICIENCY = {"LL": 0.5, "LL128": 0.92, "Simple": 1.0}


@dataclass(frozen=True)
class NcclEstimate:
    """Breakdown of :func:`nccl_predicted_time` (seconds, B/s)."""

    latency: float
    bus_bandwidth: float
    algorithm_bandwidth: float
    time: float


def _hop_class(kind: LinkKind) -> str:
    return "nvlink" if kind is LinkKind.NVLINK else "network" if kind is LinkKind.NETWORK else "pcie"


def nccl_estimate(collective: str, algorithm: str, protocol: str, n_bytes: float,
                  target: Topology | RingSchedule | DoubleBinaryTree) -> NcclEstimate:
    """NCCL's alpha-beta model (baselines-and-benchmarks.md):

    * ring latency = base + (steps - inter steps) x intra hop + inter steps x inter hop,
      steps = 2(n-1) for all-reduce, n-1 otherwise; inter steps = 2(nodes-1) resp. nodes-1;
    * tree (all-reduce only) latency = base + 2((ranks per node - 1) x intra + log2(nodes) x inter);
    * bus bandwidth = sum over channels of their bandwidth, times the protocol's share;
      ring algorithm bandwidth = bus x n / steps for all-reduce, bus x n/(n-1) for
      reduce-scatter/all-gather, bus for broadcast/reduce; tree halves the bus bandwidth;
    * time = latency + n_bytes / algorithm bandwidth.

    ``target`` is a topology (its NCCL rings/trees are built) or a built schedule.
    """
    if collective not in COLLECTIVES:
        raise SynthesisError(f"unknown collective {collective!r} (known: {', '.join(COLLECTIVES)})")
    if algorithm not in ALGORITHMS:
        raise SynthesisError(f"unknown NCCL algorithm {algorithm!r} (known: {', '.join(ALGORITHMS)})")
    if protocol not in PROTOCOLS:
        raise SynthesisError(f"unknown NCCL protocol {protocol!r} (known: {', '.join(PROTOCOLS)})")
    if not n_bytes >= 0:
        raise SynthesisError(f"n_bytes must be >= 0, got {n_bytes}")
    if algorithm == "tree" and collective != "allreduce":
        raise SynthesisError(f"NCCL's tree algorithm implements allreduce only, not {collective}")
    if isinstance(target, Topology):
        rings = nccl_rings(target)
        target = double_binary_tree(target, rings) if algorithm == "tree" else rings
    if isinstance(target, DoubleBinaryTree):
        n, nodes = sum(len(c) for c in target.chains), target.nodes
        intra_kind = target.intra_link_kind
        bus = float(sum(target.bandwidths))
    else:
        n, nodes = target.num_ranks, target.nodes
        intra_kind = target.intra_link_kind
        bus = target.bus_bandwidth
    intra = NCCL_HOP_LATENCY_US[_hop_class(intra_kind)][algorithm][protocol]
    inter = NCCL_HOP_LATENCY_US["network"][algorithm][protocol]
    base = NCCL_BASE_LATENCY_US[algorithm][protocol]
    bus *= NCCL_PROTOCOL_EFFICIENCY[protocol]
    if n <= 1:
        return NcclEstimate(0.0, bus, math.inf, 0.0)
    if algorithm == "ring":
        if collective == "allreduce":
            steps, inter_steps, ratio = 2 * (n - 1), 2 * (nodes - 1), n / (2 * (n - 1))
        elif collective in ("reducescatter", "allgather"):
            steps, inter_steps, ratio = n - 1, nodes - 1, n / (n - 1)
        else:
            steps, inter_steps, ratio = n - 1, nodes - 1, 1.0
        lat_us = base + (steps - inter_steps) * intra + inter_steps * inter
        algbw = bus * ratio
    else:
        per_node = n // nodes
        lat_us = base + 2 * ((per_node - 1) * intra + math.log2(nodes) * inter)
        algbw = bus * 0.5
    latency = lat_us * 1e-6
    time = latency + (n_bytes / algbw if algbw > 0 else (0.0 if n_bytes == 0 else math.inf))
    return NcclEstimate(latency, bus, algbw, time)


def nccl_predicted_time(collective: str, algorithm: str, protocol: str, n_bytes: float,
                        target: Topology | RingSchedule | DoubleBinaryTree) -> float:
    """Seconds NCCL's cost model predicts; see :func:`nccl_estimate`."""
    return nccl_estimate(collective, algorithm, protocol, n_bytes, target).time
