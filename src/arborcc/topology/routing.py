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
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from arborcc.topology.model import Route, Topology


def routes_from(topology: "Topology", src: str) -> dict[str, "Route"]:
    """Widest-then-shortest routes from ``src`` to every device it can reach.

    Runs one breadth-first search per distinct link bandwidth (descending), each on
    the links at least that wide, and keeps for each target the first (widest)
    threshold that reaches it - O(#bandwidth classes x links), tiny for real machines.
    """
    from arborcc.topology.model import Route

    relays = {d.id for d in topology.devices.values() if not d.is_gpu}
    order = {d: i for i, d in enumerate(topology.devices)}
    home = topology.devices[src].host

    def phase(dev: str) -> int:  # 0: source host, 1: network, 2: another host
        host = topology.devices[dev].host
        return 1 if host is None else (0 if host == home else 2)

    def allowed(u: str, v: str) -> bool:
        pu, pv = phase(u), phase(v)
        return pv >= pu and (pu != 2 or topology.devices[u].host == topology.devices[v].host)

    widths = sorted({l.bandwidth for l in topology.links.values()}, reverse=True)
    routes: dict[str, Route] = {}
    for width in widths:
        parent: dict[str, str | None] = {src: None}
        queue = deque([src])
        while queue:
            u = queue.popleft()
            if u != src and u not in relays:
                continue  # a GPU ends a path, it does not forward
            for link in sorted(topology.out_links(u), key=lambda l: order[l.dst]):
                if link.bandwidth >= width and link.dst not in parent and allowed(u, link.dst):
                    parent[link.dst] = u
                    queue.append(link.dst)
        for dst in parent:
            if dst == src or dst in routes:
                continue
            path = [dst]
            while parent[path[-1]] is not None:
                path.append(parent[path[-1]])  # type: ignore[arg-type]
            path.reverse()
            links = [topology.links[(a, b)] for a, b in zip(path, path[1:])]
            routes[dst] = Route(tuple(path), min(l.bandwidth for l in links), sum(l.latency for l in links))
        if len(routes) == len(topology.devices) - 1:
            break
    return routes
