"""Routes between devices: the path a transfer takes when there is no direct link.

A transfer between two devices goes over a direct link when there is one, otherwise
through relays that forward in hardware - PCIe switches, CPUs (and the inter-socket
link), NVSwitches, NICs and network switches - never through another GPU (GPUs do
not forward peer traffic without a kernel running on them).

Among the possible paths we pick the widest (largest bottleneck bandwidth) and among
those the shortest (fewest hops), breaking ties by device order so the result is
deterministic. This is how NCCL's path search ranks paths as well: by bandwidth, then
by path type / hop count.

A route leaves its host at most once and never passes through a third host: it runs
through the source's host, then the network (devices without a host), then the
destination's host. Without that rule a cross-socket transfer inside one node could
"win" by going out through a NIC and back, and cross-rail traffic could bounce
through another node's PCIe switch - neither of which a runtime does.

This module owns the routes it computes: :func:`route` and :func:`can_route` keep, per
topology (which is immutable) and source device, a table of the searches made so far -
one per destination host, as a route never crosses a third host (:class:`RouteTable`) -
for the last :data:`ROUTED_TOPOLOGIES` topologies used, dropping a topology's when it is
garbage-collected (:class:`arborcc.memo.BoundedCache` with weak keys). It reads a topology only through its
``devices`` (``host``, ``index``, ``is_gpu``, ``is_nic``) and ``links`` (``bandwidth``,
``latency``), so it needs nothing else of :mod:`arborcc.topology.model`, which calls it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Iterator

from arborcc.errors import TopologyError
from arborcc.memo import BoundedCache


@dataclass(frozen=True)
class Route:
    """The path a transfer between two devices takes, with its bottleneck bandwidth."""

    path: tuple[str, ...]
    bandwidth: float
    latency: float

    @property
    def hops(self) -> int:
        return len(self.path) - 1

    def pairs(self) -> Iterator[tuple[str, str]]:
        return zip(self.path, self.path[1:])


class _TopologyRoutes:
    """What is known about one topology's routes: its graph and a table per source."""

    def __init__(self, topology) -> None:
        self.graph = _Graph(topology)
        self.tables: dict[str, RouteTable] = {}


#: the most topologies whose routes are kept at once (the least recently used go first)
ROUTED_TOPOLOGIES = 64
#: per topology object (held weakly), its routes
_ROUTES = BoundedCache("topology.routing.routes", ROUTED_TOPOLOGIES, weak=True,
                       purpose="graph and route tables per topology object, while it lives")


def _routes_of(topology) -> _TopologyRoutes:
    known = _ROUTES.get_for(topology)
    if known is None:
        known = _TopologyRoutes(topology)
        _ROUTES.put_for(topology, known)
    return known


def _table(topology, src: str) -> "RouteTable":
    known = _routes_of(topology)
    table = known.tables.get(src)
    if table is None:
        if src not in known.graph.index:
            raise TopologyError(f"{src} is not a device", source=topology.name)
        table = known.tables[src] = routes_from(topology, src)
    return table


def route(topology, src: str, dst: str) -> Route:
    """The route of a transfer ``src -> dst`` on ``topology`` (TopologyError if none)."""
    table = _table(topology, src)
    if dst not in table:
        raise TopologyError(f"no route from {src} to {dst}", source=topology.name)
    return table[dst]


def can_route(topology, src: str, dst: str) -> bool:
    """Whether a transfer ``src -> dst`` has a route on ``topology``."""
    return dst in _table(topology, src)


class _Graph:
    """The topology as integer arrays, built once per topology (see :func:`routes_from`)."""

    def __init__(self, topology) -> None:
        self.ids = list(topology.devices)
        index = {d: i for i, d in enumerate(self.ids)}
        devs = [topology.devices[d] for d in self.ids]
        self.host = [d.host for d in devs]
        self.relay = [not d.is_gpu for d in devs]
        self.nic_index = [d.index if d.is_nic else None for d in devs]
        self.gpu_index = [d.index if d.is_gpu else None for d in devs]
        self.out: list[list[tuple[int, float]]] = [[] for _ in devs]
        for l in topology.links.values():
            self.out[index[l.src]].append((index[l.dst], l.bandwidth))
        for adj in self.out:
            adj.sort()
        self.index = index
        self.widths = sorted({l.bandwidth for l in topology.links.values()}, reverse=True)
        self.members: dict[object, list[int]] = {}  #: host (None: the network) -> its devices
        for i, h in enumerate(self.host):
            self.members.setdefault(h, []).append(i)
        self.toward_cache: dict[tuple[int, object], list[tuple[int, float]]] = {}

    def toward(self, u: int, target) -> list[tuple[int, float]]:
        """The links out of ``u`` that a search toward host ``target`` (None: the source's
        host and the network alone) may take from ``u``, in the order of ``out[u]``: a
        route never re-enters the source's host once it left it, and enters no host but
        ``target`` (module doc). ``u`` is on the source's host, the network or ``target``;
        each list is built once (a large cluster's switches have a link to every host)."""
        key = (u, target)
        found = self.toward_cache.get(key)
        if found is None:
            hu = self.host[u]
            if hu is None:  # the network: on through it, or into the target host
                allowed = {None, target}
            elif hu == target:  # inside the target host: it is never left
                allowed = {target}
            else:  # the source's host: within it, into the network or straight into the target host
                allowed = {hu, None, target}
            found = self.toward_cache[key] = [(v, bw) for v, bw in self.out[u] if self.host[v] in allowed]
        return found


class RouteTable:
    """Routes from one source, searched by :func:`routes_from` and read back on demand.

    A route leaves its host at most once and never crosses a third host (module doc),
    so the routes to the devices of one other host use only the source's host, the
    network and that host: the table searches that part of the topology alone, the
    first time a device of the host is asked for (``scope``), instead of the whole
    cluster at once. For every device of a scope the search keeps the widest bandwidth
    class that reaches it and, within it, all parents on shortest paths;
    ``table[dst]`` builds the Route once.
    """

    def __init__(self, topology, g: _Graph, src: int):
        # the links, not the topology: the route cache holds tables weakly by topology
        self.links, self.g, self.src = topology.links, g, src
        self.scopes: dict[object, dict[int, dict[int, list[int]]]] = {}  #: scope -> device -> its parents
        self._built: dict[str, Route] = {}

    def scope(self, v: int) -> object:
        """Which search reaches device ``v``: its host when that is another host than
        the source's, else the source's own search (its host and the network)."""
        h = self.g.host[v]
        return None if h is None or h == self.g.host[self.src] else h

    def reached(self, v: int) -> dict[int, dict[int, list[int]]]:
        """Device -> its parents, for every device the search of ``v``'s scope reaches."""
        key = self.scope(v)
        found = self.scopes.get(key)
        if found is None:
            found = self.scopes[key] = _search(self.g, self.src, key)
        return found

    def __contains__(self, dst: str) -> bool:
        v = self.g.index.get(dst)
        return v is not None and v != self.src and v in self.reached(v)

    def __getitem__(self, dst: str) -> Route:
        route = self._built.get(dst)
        if route is None:
            if dst not in self:
                raise KeyError(dst)
            route = self._built[dst] = self._build(self.g.index[dst])
        return route

    def _build(self, v: int) -> Route:
        g, parents = self.g, self.reached(v)[v]
        home = g.host[self.src]

        def preference(p: int) -> tuple[int, int]:
            nic = g.nic_index[p]
            if nic is None:
                return (1, p)
            end = self.src if g.host[p] == home else v
            return (0 if nic == g.gpu_index[end] else 1, p)

        path = [v]
        while parents[path[-1]]:
            path.append(min(parents[path[-1]], key=preference))
        path.reverse()
        links = [self.links[(g.ids[a], g.ids[b])] for a, b in zip(path, path[1:])]
        return Route(tuple(g.ids[x] for x in path), min(l.bandwidth for l in links),
                     sum(l.latency for l in links))


def routes_from(topology, src: str) -> RouteTable:
    """Widest-then-shortest routes from ``src`` to every device it can reach, searched
    per destination host as they are asked for (:class:`RouteTable`).

    Each search runs one breadth-first search per distinct link bandwidth
    (descending), each on the links at least that wide, and keeps for each target the
    first (widest) threshold that reaches it - O(#bandwidth classes x links of the
    hosts involved), tiny for real machines. Among equally short paths the search keeps
    every parent, and a path is read back preferring, on each host, the NIC whose number
    is that host's endpoint GPU's (GPU i uses NIC i when several are equally close, as
    rail-aligned NCCL does), then device order.
    """
    g = _routes_of(topology).graph
    return RouteTable(topology, g, g.index[src])


def _search(g: _Graph, s: int, target) -> dict[int, dict[int, list[int]]]:
    """The widest-then-shortest search from device ``s`` over its own host, the network
    and host ``target`` (None: its own host and the network alone); device -> parents.

    Every path it would take into a host other than ``target`` is one no route to a
    device of ``target``, the source's host or the network can use (a route never
    leaves a host it entered), so leaving those hosts out changes none of the results."""
    home = g.host[s]
    size = sum(len(g.members.get(h, ())) for h in {home, None, target})
    reached: dict[int, dict[int, list[int]]] = {}
    for width in g.widths:
        depth = {s: 0}
        parents: dict[int, list[int]] = {s: []}
        queue = deque([s])
        while queue:
            u = queue.popleft()
            if u != s and not g.relay[u]:
                continue  # a GPU ends a path, it does not forward
            du = depth[u]
            for v, bw in g.toward(u, target):
                if bw < width:
                    continue
                dv = depth.get(v)
                if dv is None:
                    depth[v] = du + 1
                    parents[v] = [u]
                    queue.append(v)
                elif dv == du + 1:
                    parents[v].append(u)
        for v in depth:
            if v not in reached:
                reached[v] = parents
        if len(reached) == size:
            break
    reached.pop(s, None)
    return reached
