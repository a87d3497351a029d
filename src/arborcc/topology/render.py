"""Human-readable views of a topology: an ``nvidia-smi topo -m``-like matrix and a
link table, plus the JSON form the CLI prints with ``--json``."""

from __future__ import annotations

from arborcc.topology.model import GB, DeviceKind, LinkKind, Topology


def relation(topology: Topology, a: str, b: str) -> str:
    """The nvidia-smi legend cell for a transfer a -> b (``NET`` across nodes)."""
    if a == b:
        return "X"
    if not topology.can_route(a, b):
        return "-"
    route = topology.route(a, b)
    links = [topology.links[p] for p in route.pairs()]
    kinds = {l.kind for l in links}
    if kinds == {LinkKind.NVLINK}:
        return f"NV{min(l.count for l in links)}"
    if kinds & {LinkKind.NETWORK, LinkKind.SWITCH_PORT}:
        return "NET"
    if LinkKind.INTER_SOCKET in kinds:
        return "SYS"
    middle = [topology.devices[d].kind for d in route.path[1:-1]]
    if DeviceKind.CPU in middle:
        return "PHB"
    return "PIX" if len(middle) <= 1 else "PXB"


def _label(topology: Topology, dev_id: str) -> str:
    d = topology.devices[dev_id]
    if len(topology.hosts) > 1 or d.index is None:
        return dev_id
    return f"{'GPU' if d.is_gpu else 'NIC'}{d.index}"


def matrix_text(topology: Topology, with_nics: bool = True) -> str:
    """GPUs (and, on a single host, NICs) against each other, cells as nvidia-smi prints them."""
    cols = list(topology.ranks)
    if with_nics and len(topology.hosts) <= 1:
        cols += sorted((d.id for d in topology.devices_of_kind(DeviceKind.NIC)),
                       key=lambda i: topology.devices[i].index or 0)
    labels = [_label(topology, c) for c in cols]
    width = max(5, *(len(x) for x in labels)) + 1
    lines = [" " * width + "".join(f"{x:>{width}}" for x in labels)]
    for r, rl in zip(cols, labels):
        lines.append(f"{rl:<{width}}" + "".join(f"{relation(topology, r, c):>{width}}" for c in cols))
    lines.append("")
    lines.append("Legend: X self, NV# # NVLinks (or an NVSwitch path of # lanes), PIX one PCIe switch, "
                 "PXB several PCIe switches, PHB through the CPU, SYS across sockets, NET over the network")
    return "\n".join(lines)


def link_rows(topology: Topology) -> list[dict]:
    """Every directed link as a JSON-ready dict (GB/s and microseconds)."""
    return [
        {"src": l.src, "dst": l.dst, "kind": l.kind.value, "count": l.count,
         "bandwidth_gbps": round(l.bandwidth / GB, 6), "latency_us": round(l.latency * 1e6, 6)}
        for l in topology.links.values()
    ]


def link_table_text(topology: Topology) -> str:
    """Physical links, a full-duplex pair on one line (``<->``), a one-way link with ``->``."""
    rows, seen = [], set()
    for l in topology.links.values():
        if (l.dst, l.src) in seen:
            continue
        seen.add((l.src, l.dst))
        back = topology.link(l.dst, l.src)
        duplex = back is not None and back.bandwidth == l.bandwidth and back.count == l.count
        if back is not None and not duplex:
            seen.discard((l.src, l.dst))  # asymmetric: list both directions
        rows.append((l.src, "<->" if duplex else "->", l.dst, l.kind.value, str(l.count),
                     f"{l.bandwidth / GB:g}", f"{l.latency * 1e6:g}"))
    head = ("src", "", "dst", "kind", "lanes", "GB/s", "lat us")
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    fmt = lambda r: "  ".join(f"{x:<{w}}" for x, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(head)] + [fmt(r) for r in rows])


def topology_summary(topology: Topology, with_matrix: bool = True) -> dict:
    """The JSON object of ``arborcc topo show --json`` (``matrix`` None without the matrix)."""
    return {
        "name": topology.name,
        "gpus": list(topology.ranks),
        "hosts": list(topology.hosts),
        "devices": [{"id": d.id, "kind": d.kind.value, "host": d.host, "index": d.index}
                    for d in topology.devices.values()],
        "links": link_rows(topology),
        "matrix": {a: {b: relation(topology, a, b) for b in topology.ranks} for a in topology.ranks}
        if with_matrix else None,
        "meta": topology.meta,
    }
