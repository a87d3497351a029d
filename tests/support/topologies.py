"""Helpers shared by the topology reader tests."""

from __future__ import annotations

from arborcc.topology.model import DeviceKind, LinkKind, Topology

#: NVLink lanes between DGX-1V GPUs, restated from shared/reference/topologies.md so the
#: readers are checked against the reference, not against the built-in machine
DGX1V_NVLINKS = [
    [0, 1, 1, 2, 2, 0, 0, 0],
    [1, 0, 2, 1, 0, 2, 0, 0],
    [1, 2, 0, 2, 0, 0, 1, 0],
    [2, 1, 2, 0, 0, 0, 0, 1],
    [2, 0, 0, 0, 0, 1, 1, 2],
    [0, 2, 0, 0, 1, 0, 2, 1],
    [0, 0, 1, 0, 1, 2, 0, 2],
    [0, 0, 0, 1, 2, 1, 2, 0],
]


def pcie_parent(t: Topology, dev: str) -> str:
    """The device one PCIe hop closer to a CPU."""
    depth = {c.id: 0 for c in t.devices_of_kind(DeviceKind.CPU)}
    frontier = list(depth)
    while frontier:
        nxt = []
        for x in frontier:
            for l in t.out_links(x):
                if l.kind is LinkKind.PCIE and l.dst not in depth:
                    depth[l.dst] = depth[x] + 1
                    nxt.append(l.dst)
        frontier = nxt
    (parent,) = [l.dst for l in t.out_links(dev) if l.kind is LinkKind.PCIE and depth[l.dst] == depth[dev] - 1]
    return parent
