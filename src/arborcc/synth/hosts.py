"""The host structure of a job: its ranks grouped by host, each host's NICs, distances.

Multi-node strategies (NCCL's rings and trees, Blink's three phases, the hierarchical
and BlueConnect stages) all start from which ranks share a host and where a host's
exits to the network are. Rank indices are positions in ``topology.ranks``.
"""

from __future__ import annotations

from arborcc.topology.model import DeviceKind, Topology


def ranks_by_host(topology: Topology) -> dict[int | None, list[int]]:
    """Rank indices per host (``None``: GPUs that belong to no host), hosts in the order
    of their first rank, ranks in rank order."""
    out: dict[int | None, list[int]] = {}
    for i, g in enumerate(topology.ranks):
        out.setdefault(topology.devices[g].host, []).append(i)
    return out


def host_groups(topology: Topology) -> list[list[int]]:
    """Rank indices per host, hosts by id (GPUs that belong to no host first)."""
    groups = ranks_by_host(topology)
    return [groups[h] for h in sorted(groups, key=lambda h: -1 if h is None else h)]


def host_nics(topology: Topology, host: int | None) -> list[str]:
    """The NICs of ``host``, by their index on the host."""
    return sorted((d.id for d in topology.devices.values() if d.kind is DeviceKind.NIC and d.host == host),
                  key=lambda d: (topology.devices[d].index if topology.devices[d].index is not None else 0, d))


def hop_distance(topology: Topology, a: str, b: str) -> tuple[int, float]:
    """``(hops, -bandwidth)`` of the route from device ``a`` to ``b`` (smaller is nearer;
    unroutable pairs are farthest)."""
    if not topology.can_route(a, b):
        return (1 << 30, 0.0)
    r = topology.route(a, b)
    return (r.hops, -r.bandwidth)
