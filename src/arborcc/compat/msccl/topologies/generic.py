"""``msccl.topologies.generic``: fully connected, ring, line, star topologies."""

from __future__ import annotations

from arborcc.compat.msccl.topologies.topology import Topology

_arborcc_compat = True


def _check(n) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"a topology needs a positive number of nodes, got {n!r}")
    return n


def fully_connected(num_nodes: int) -> Topology:
    n = _check(num_nodes)
    return Topology(f"FullyConnected(n={n})", [[0 if i == j else 1 for j in range(n)] for i in range(n)])


def ring(num_nodes: int) -> Topology:
    n = _check(num_nodes)
    links = [[1 if n > 1 and j in ((i + 1) % n, (i - 1) % n) and j != i else 0 for j in range(n)]
             for i in range(n)]
    return Topology(f"Ring(n={n})", links)


def line(num_nodes: int) -> Topology:
    n = _check(num_nodes)
    return Topology(f"Line(n={n})", [[1 if abs(i - j) == 1 else 0 for j in range(n)] for i in range(n)])


def star(num_nodes: int, non_blocking: bool = True) -> Topology:
    n = _check(num_nodes)
    links = [[1 if (i == 0) != (j == 0) else 0 for j in range(n)] for i in range(n)]
    switches = []
    if not non_blocking and n > 1:
        points = list(range(1, n))
        switches = [([0], points, 1, "to_points"), (points, [0], 1, "from_points")]
    return Topology(f"Star(n={n})", links, switches)


def hub_and_spoke(num_nodes: int) -> Topology:
    n = _check(num_nodes)
    switches = []
    for node in range(n):
        others = [o for o in range(n) if o != node]
        switches.append(([node], others, 1, f"node_{node}_out"))
        switches.append((others, [node], 1, f"node_{node}_in"))
    return Topology(f"HubAndSpoke(n={n})", [[0 if i == j else 1 for j in range(n)] for i in range(n)], switches)
