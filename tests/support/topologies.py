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


def nvlink_pcie_box_topology(n: int, lanes: dict[tuple[int, int], int]) -> Topology:
    """``n`` GPUs on one PCIe switch, with ``lanes[(i, j)]`` NVLink lanes between GPUs i and j."""
    from arborcc.topology.model import GB, Device, TopologyBuilder

    b = TopologyBuilder("random")
    for i in range(n):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, 0, i))
    b.add_device(Device("pcie0", DeviceKind.PCIE_SWITCH, 0, 0))
    for i in range(n):
        b.connect(f"gpu{i}", "pcie0", LinkKind.PCIE, 12 * GB)
    for (i, j), lane in lanes.items():
        if lane:
            b.connect(f"gpu{i}", f"gpu{j}", LinkKind.NVLINK, lane * 25 * GB, count=lane)
    return b.build()


def nvlink_pcie_box(min_gpus: int, max_gpus: int):
    """A hypothesis strategy: ``min_gpus``-``max_gpus`` GPUs with random NVLink lane
    counts (0-2 per pair), every GPU also on one PCIe switch."""
    from hypothesis import strategies as st

    @st.composite
    def box(draw):
        n = draw(st.integers(min_gpus, max_gpus))
        lanes = {(i, j): draw(st.integers(0, 2)) for i in range(n) for j in range(i + 1, n)}
        return nvlink_pcie_box_topology(n, lanes)

    return box()
