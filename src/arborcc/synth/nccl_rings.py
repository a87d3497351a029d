"""The rings NCCL builds: its depth-first ring search, as a schedule over the ranks.

NCCL (NVIDIA, https://github.com/NVIDIA/nccl, ``src/graph/search.cc``) searches rings
depth-first using only the fastest link type it can - NVLink when an NVLink ring
exists, else through PCIe - and gives each ring (channel) a share of the links' bandwidth.
:func:`nccl_rings` is modelled on that search:

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
  to it, and the chains of the nodes joined in node order. Where no other GPU is next
  to the NIC (DGX H100: one NIC per GPU) the chain's last GPU sends to the NIC as
  NCCL's PXN does (:func:`nic_path`: over NVLink to the NIC's GPU, then PCIe), not
  through the CPUs; every channel is searched at one speed, down to a shared port's
  bandwidth over the channel count (DGX-2: 8 channels over 6 NVLinks).

:meth:`RingSchedule.nccl_estimate` asks NCCL's own cost model
(:mod:`arborcc.sim.nccl_model`) what NCCL would predict for the rings.
Rank indices are positions in ``topology.ranks``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

from arborcc.errors import SynthesisError
from arborcc.memo import BoundedCache
from arborcc.sim.nccl_model import NcclEstimate, nccl_estimate
from arborcc.synth.flowgraph import check_routable
from arborcc.synth.hosts import hop_distance, host_groups, host_nics
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

    def nccl_estimate(self, collective: str, protocol: str, n_bytes: float) -> NcclEstimate:
        """What NCCL's cost model predicts for ``n_bytes`` of ``collective`` on these rings."""
        return nccl_estimate(collective, "ring", protocol, n_bytes, ranks=self.num_ranks, nodes=self.nodes,
                             intra_link=link_class(self.intra_link_kind), bus_bandwidth=self.bus_bandwidth)


def link_class(kind: LinkKind) -> str:
    """The link class of NCCL's cost model (``nvlink``, ``pcie``, ``network``) of a link kind."""
    return "nvlink" if kind is LinkKind.NVLINK else "network" if kind is LinkKind.NETWORK else "pcie"


# ---------------------------------------------------------------- route helpers ---
def _route_links(topology: Topology, a: str, b: str) -> list[tuple[str, str]]:
    return list(topology.route(a, b).pairs())


def _nvlink_only(topology: Topology, a: str, b: str) -> bool:
    return all(topology.links[p].kind is LinkKind.NVLINK for p in _route_links(topology, a, b))


def _paths(topology: Topology, walk: list[tuple[int, int]]) -> list[tuple[str, ...]]:
    return [topology.route(topology.ranks[a], topology.ranks[b]).path for a, b in walk]


def fair_share(topology: Topology, walks: list[list[tuple[str, ...]]]) -> list[float]:
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
def nics_of(topology: Topology, host_ranks: list[int]) -> list[str]:
    """The NICs of the host of ``host_ranks`` (rank indices of one host)."""
    return host_nics(topology, topology.devices[topology.ranks[host_ranks[0]]].host)


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
    bws = fair_share(topology, hops)
    sched = RingSchedule(rings, kind, [b if math.isfinite(b) else 0.0 for b in bws], intra, nodes, hops)
    sched.validate(topology.num_ranks)
    return sched


#: the rings found per topology object: ``compare`` asks for them for the NCCL baseline and
#: again for the strategies built on NCCL's rings (6.6 s each on 128 DGX A100 nodes)
_FOUND = BoundedCache("synth.nccl_rings.schedules", 4, weak=True,
                      purpose="NCCL's rings by topology object and ring count")


def nccl_rings(topology: Topology, max_rings: int = DEFAULT_MAX_RINGS) -> RingSchedule:
    """The rings NCCL's search would build on ``topology`` (module doc). The schedule is
    shared by every caller that asks for the same topology object's: none changes it."""
    if max_rings < 1:
        raise SynthesisError(f"max_rings must be >= 1, got {max_rings}")
    found = _FOUND.get_for(topology, max_rings)
    if found is None:
        found = _search_rings(topology, max_rings)
        _FOUND.put_for(topology, found, max_rings)
    return found


def _search_rings(topology: Topology, max_rings: int) -> RingSchedule:
    """:func:`nccl_rings`' search."""
    n = topology.num_ranks
    check_routable(topology)
    hosts = host_groups(topology)
    if n == 1:
        return RingSchedule([[0]], LinkKind.NVLINK, [0.0], LinkKind.NVLINK, 1, [[]])
    if len(hosts) == 1:
        found = _search_cycles(topology, list(range(n)), max_rings)
        if found is None:  # pragma: no cover - any-route tier always has a cycle when reachable
            raise SynthesisError(f"{topology.name}: no ring found")
        rings, kind = found
        return _make_schedule(topology, rings, kind, kind, 1)
    return _multi_node_rings(topology, hosts, max_rings)


def _through_cpu(topology: Topology, path: Sequence[str]) -> bool:
    """Whether a device path passes a CPU (NCCL's PHB/SYS: worse than PXB)."""
    return any(topology.devices[d].kind is DeviceKind.CPU for d in path[1:-1])


def nic_path(topology: Topology, gpu: str, nic: str, members: Sequence[int]) -> tuple[str, ...]:
    """The device path by which ``gpu`` sends to ``nic``, as NCCL routes it (PXN,
    ``src/graph/paths.cc``, on by default since NCCL 2.12): when the direct route passes
    a CPU and a GPU of ``members`` (rank indices of the host) reaches the NIC without one
    and is joined to ``gpu`` by NVLink alone, the data goes over NVLink to that GPU and
    from it through its PCIe switch to the NIC. On DGX H100 every GPU has its own NIC: a
    ring's chain through a node ends at another GPU than the one next to the channel's
    NIC, and without PXN every channel leaving a node would share the inter-socket link."""
    direct = topology.route(gpu, nic).path
    if not _through_cpu(topology, direct):
        return direct
    best = None
    for r in members:
        peer = topology.ranks[r]
        if peer == gpu or not _nvlink_only(topology, gpu, peer):
            continue
        tail = topology.route(peer, nic).path
        if _through_cpu(topology, tail):
            continue
        key = (len(tail), topology.route(peer, nic).bandwidth * -1, r)
        if best is None or key < best[0]:
            best = (key, topology.route(gpu, peer).path + tail[1:])
    return direct if best is None else best[1]


def _node_ends(topology: Topology, members: list[int], nic: str | None, channel: int) -> tuple[int, list[int], list[int]]:
    """Where channel ``channel``'s chain through a node starts and may end: at GPUs
    nearest (fewest hops) to the channel's NIC, rotating with the channel so the GPUs
    next to a NIC take turns entering and leaving. Returns (start, ends, search order)."""
    if nic is None:
        return members[0], [r for r in members if r != members[0]], list(members)
    dist = {r: hop_distance(topology, topology.ranks[r], nic) for r in members}
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
    nics = [nics_of(topology, h) for h in hosts]
    channels = max(1, min(max_rings, min(len(x) for x in nics))) if all(nics) else 1
    for kind, allowed in _tiers(topology):
        lanes = {s for h in hosts for s in _candidate_speeds(topology, h, allowed)}
        # a port shared by every channel (DGX-2: 8 channels over 6 lanes) fits them at 1/channels
        speeds = sorted(lanes | {s / channels for s in lanes}, reverse=True)
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
                            for x, y in ((a, na), (na, nb), (nb, b)):
                                if not topology.can_route(x, y):
                                    raise SynthesisError(f"{topology.name}: ring channel {c} cannot route {x} -> {y} "
                                                         "(the channel's NIC is out of reach)")
                            forced[(c, pos - 1)] = (nic_path(topology, a, na, hosts[h]) + topology.route(na, nb).path[1:]
                                                    + topology.route(nb, b).path[1:])
                return _make_schedule(topology, rings, LinkKind.NETWORK, kind, len(hosts), forced)
    raise SynthesisError(f"{topology.name}: no chain through the GPUs of some node")  # pragma: no cover


# ------------------------------------------------------------- rings for a file ---
def _host_chains(ring: list[int], host_of: list[object]) -> list[list[int]]:
    """``ring`` cut into its chains through one host each, starting where a chain starts."""
    start = next((k for k in range(len(ring)) if host_of[ring[k]] != host_of[ring[k - 1]]), 0)
    chains: list[list[int]] = []
    for r in ring[start:] + ring[:start]:
        if chains and host_of[chains[-1][-1]] == host_of[r]:
            chains[-1].append(r)
        else:
            chains.append([r])
    return chains


def _exit_nic(topology: Topology, a: int, b: int) -> str | None:
    """The first NIC on the route of ``a -> b`` (rank indices), None if it has none."""
    path = topology.route(topology.ranks[a], topology.ranks[b]).path
    return next((d for d in path if topology.devices[d].kind is DeviceKind.NIC), None)


def file_rings(topology: Topology, schedule: RingSchedule) -> RingSchedule:
    """``schedule``'s rings as an MSCCL file runs them: on every pair's own route.

    A file names no route, so the hop leaving a node takes the route of its two GPUs,
    out through the last GPU's own NIC - not the channel's NIC that NCCL reaches over
    NVLink (PXN, :func:`nic_path`). Where every chain leaves a node from the same GPU
    (DGX H100: NCCL's chains all end at GPU 7), every channel would share one NIC. So
    each chain keeps its first GPU (entered through the channel's NIC) and is re-ordered
    to leave from the GPU whose NIC the fewest channels leave through so far; the
    re-chained rings are kept when all of them run at once at least as fast on their own
    routes (:func:`fair_share`) as ``schedule``'s do. The schedule returned has no
    planned hops (``hops`` empty): its rings run on the routes a file gets."""
    ranks = topology.ranks
    if schedule.nodes <= 1 or not schedule.hops or all(
            path == topology.route(ranks[a], ranks[b]).path
            for ring, walk in zip(schedule.rings, schedule.hops) for (a, b), path in zip(_cycle_hops(ring), walk)):
        return schedule
    host_of = [topology.devices[r].host for r in ranks]
    leaving: dict[str | None, int] = {}
    rings = []
    for ring in schedule.rings:
        chains = _host_chains(ring, host_of)
        out: list[int] = []
        for i, chain in enumerate(chains):
            after = chains[(i + 1) % len(chains)][0]
            if len(chain) > 2:
                last = min(chain[1:], key=lambda x: (leaving.get(_exit_nic(topology, x, after), 0), x != chain[-1]))
                chain = [chain[0]] + [x for x in chain[1:] if x != last] + [last]
            nic = _exit_nic(topology, chain[-1], after)
            leaving[nic] = leaving.get(nic, 0) + 1
            out += chain
        rings.append(out)

    def own_routes(rs: list[list[int]]) -> list[float]:
        return fair_share(topology, [_paths(topology, _cycle_hops(r)) for r in rs])

    before, after = own_routes(schedule.rings), own_routes(rings)
    if sum(after) < sum(before):
        rings, after = schedule.rings, before
    out_schedule = RingSchedule(rings, schedule.link_kind, after, schedule.intra_link_kind, schedule.nodes, [])
    out_schedule.validate(topology.num_ranks)
    return out_schedule
