"""Read the matrix printed by ``nvidia-smi topo -m`` into a :class:`Topology`.

Format (the legend nvidia-smi prints under the matrix, and dumps from real machines): a header line naming the columns (``GPU0 .. GPUn``,
then the NICs, as ``mlx5_0`` on older drivers or ``NIC0`` with a "NIC Legend" below on
newer ones), then ``CPU Affinity`` and, on newer drivers, ``NUMA Affinity`` and
``GPU NUMA ID``; one row per GPU and per NIC. A cell is ``X`` (self), ``NV#`` (a bonded
set of # NVLinks), or the PCIe relation of the pair: ``PIX`` (at most one PCIe bridge),
``PXB`` (several bridges, no host bridge), ``PHB`` (through a host bridge, i.e. the
CPU), ``NODE`` (across host bridges within a NUMA node), ``SYS`` (across the
inter-socket link); old drivers print ``SOC`` for ``SYS``.

The dump does not carry bandwidths, so they are parameters (defaults from
:mod:`arborcc.topology.defaults`). The PCIe tree is reconstructed from the relations by
:func:`build_host_topology`, which live detection (:mod:`arborcc.topology.detect`) also
uses with the same relations read from NVML.

Reconstruction rules (documented in ``docs/topology-format.md``):

* devices related by anything but ``SYS`` (or with the same NUMA node / CPU affinity)
  share a CPU; a CPU device is one NUMA node; all CPUs are joined pairwise by
  ``inter_socket`` links;
* ``PIX`` pairs share a PCIe switch; devices related by ``PXB`` (but not ``PIX``) sit
  under different switches below a common upper switch; devices related to everything
  by ``PHB``/``NODE`` hang directly off their CPU;
* a pair joined by NVLink has no printed PCIe relation; it is placed by its relations
  to third devices (usually NICs); with none, the device hangs off its CPU;
* if every GPU pair reads the same ``NV#`` and ``# x (GPUs - 1)`` exceeds the most
  NVLinks any GPU has (:data:`~arborcc.topology.defaults.MAX_NVLINKS_PER_GPU`), the
  GPUs sit on an NVSwitch fabric, modelled as one non-blocking ``nvswitch0``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from arborcc.errors import TopologyError
from arborcc.files import read_input_text
from arborcc.limits import limit
from arborcc.topology import defaults
from arborcc.topology.model import Device, DeviceKind, LinkKind, Topology, TopologyBuilder

#: the PCIe relations of the legend, nearest first
PCIE_RELATIONS = ("PIX", "PXB", "PHB", "NODE", "SYS")
#: relations that keep two devices on the same CPU (NUMA node)
SAME_CPU = frozenset({"PIX", "PXB", "PHB", "NODE"})
#: old spellings
RELATION_ALIASES = {"SOC": "SYS"}

#: bandwidth of a NIC when the caller gives none: 100 Gb/s (EDR InfiniBand, as on DGX-1)


_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
_NV = re.compile(r"NV(\d+)")
_GPU_LABEL = re.compile(r"GPU(\d+)")
_LABEL = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]*")
_LOOKS_LIKE_ROW = re.compile(r"(GPU\d+|NIC\d+|mlx\d+_\d+)")
_NIC_LEGEND = re.compile(r"\s*(NIC\d+)\s*:\s*(\S+)\s*$")
#: the columns after the device columns, as printed (multi-word names)
_TRAILING = (("CPU", "Affinity"), ("NUMA", "Affinity"), ("GPU", "NUMA", "ID"))
_TRAILING_START = frozenset(w[0] for w in _TRAILING) | {"Affinity"}


# --------------------------------------------------------------------------------------
# Assembly of a host from pairwise relations (shared with live detection)
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Endpoint:
    """A GPU or NIC whose PCIe placement is known only through pairwise relations.

    ``numa`` and ``cpus`` (CPU affinity) are what the source states, if anything.
    """

    id: str
    kind: DeviceKind
    index: int
    numa: int | None = None
    cpus: frozenset[int] | None = None
    pci: str | None = None


class _UnionFind:
    def __init__(self, items: Iterable[str]):
        self.parent = {i: i for i in items}

    def find(self, x: str) -> str:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra

    def groups(self, order: Sequence[str]) -> list[list[str]]:
        """Groups in order of their first member in ``order``; members in that order."""
        by_root: dict[str, list[str]] = {}
        for x in order:
            by_root.setdefault(self.find(x), []).append(x)
        return list(by_root.values())


def _pair(a: str, b: str) -> frozenset[str]:
    return frozenset((a, b))


def _cpu_groups(endpoints: Sequence[Endpoint], relations: Mapping[frozenset[str], str],
                hidden: Iterable[tuple[str, str]]) -> list[tuple[int, list[Endpoint]]]:
    """Split endpoints by CPU (NUMA node); returns ``(cpu index, members)`` by index."""
    ids = [e.id for e in endpoints]
    by_id = {e.id: e for e in endpoints}
    uf = _UnionFind(ids)

    def key(e: Endpoint):
        if e.numa is not None:
            return ("numa", e.numa)
        if e.cpus:
            return ("cpus", e.cpus)
        return None

    first_with_key: dict[object, str] = {}
    for e in endpoints:
        k = key(e)
        if k is not None:
            uf.union(first_with_key.setdefault(k, e.id), e.id)
    for pair, rel in relations.items():
        if rel in SAME_CPU:
            a, b = sorted(pair)
            uf.union(a, b)

    def members(root: str) -> list[str]:
        return [x for x in ids if uf.find(x) == root]

    # A pair hidden behind NVLink shares a CPU unless something says otherwise.
    for a, b in hidden:
        ra, rb = uf.find(a), uf.find(b)
        if ra == rb:
            continue
        ma, mb = members(ra), members(rb)
        ka = {key(by_id[x]) for x in ma} - {None}
        kb = {key(by_id[x]) for x in mb} - {None}
        if ka and kb and ka != kb:
            continue
        if any(relations.get(_pair(x, y)) == "SYS" for x in ma for y in mb):
            continue
        uf.union(a, b)

    groups = [[by_id[x] for x in g] for g in uf.groups(ids)]
    numbered: dict[int, list[Endpoint]] = {}
    rest: list[tuple[tuple, list[Endpoint]]] = []
    for pos, g in enumerate(groups):
        numas = sorted({e.numa for e in g if e.numa is not None})
        if numas:
            numbered.setdefault(numas[0], []).extend(g)
        else:
            cpus = [min(e.cpus) for e in g if e.cpus]
            rest.append(((0, min(cpus), pos) if cpus else (1, 0, pos), g))
    free = (i for i in range(len(groups) + len(numbered) + 1) if i not in numbered)
    for _, g in sorted(rest, key=lambda t: t[0]):
        numbered[next(free)] = g
    return sorted(numbered.items())


def build_host_topology(
    name: str,
    endpoints: Sequence[Endpoint],
    relations: Mapping[frozenset[str], str],
    *,
    nvlinks: Mapping[tuple[str, str], int] | None = None,
    nvswitch_lanes: Mapping[str, int] | None = None,
    lane_bandwidth: float = defaults.NVLINK_LANE["nvlink2"],
    pcie_bandwidth: float = defaults.PCIE_X16[3],
    inter_socket_bandwidth: float = defaults.INTER_SOCKET,
    source: str | None = None,
    meta: Mapping[str, object] | None = None,
) -> Topology:
    """Build one host from GPUs/NICs and their pairwise PCIe relations.

    ``relations`` maps ``frozenset({a, b})`` to one of :data:`PCIE_RELATIONS` (pairs not
    present are unknown); ``nvlinks`` maps GPU pairs to their NVLink lane count;
    ``nvswitch_lanes`` maps each GPU on an NVSwitch fabric to its lanes into it.
    Bandwidths are in B/s per direction. The rules are in the module docstring.
    """
    nvlinks = dict(nvlinks or {})
    nvswitch_lanes = dict(nvswitch_lanes or {})
    order = [e.id for e in endpoints]
    position = {x: i for i, x in enumerate(order)}
    # pairs joined by NVLink (directly or through the fabric) whose PCIe relation is unknown
    joined = {_pair(a, b) for a, b in nvlinks}
    on_switch = [x for x in order if x in nvswitch_lanes]
    joined |= {_pair(a, b) for i, a in enumerate(on_switch) for b in on_switch[i + 1:]}
    hidden = sorted((tuple(sorted(p, key=position.__getitem__)) for p in joined if p not in relations),
                    key=lambda p: (position[p[0]], position[p[1]]))
    cpus = _cpu_groups(endpoints, relations, hidden)

    # Switches. A leaf switch holds a PIX group. A PXB group spanning several units (leaf
    # switches or lone devices) gets an upper switch above them; a lone device in such a
    # group sits behind a bridge of its own, else it would read PIX with its neighbours.
    leaf_groups: list[tuple[list[str], int]] = []  # (members, cpu index)
    upper_groups: list[tuple[list[str], int]] = []  # (first member of each unit, cpu index)
    for cpu_index, members in cpus:
        ids = [e.id for e in members]
        pix, pxb = _UnionFind(ids), _UnionFind(ids)
        for pair, rel in relations.items():
            a, b = sorted(pair)
            if a in pix.parent and b in pix.parent:
                if rel == "PIX":
                    pix.union(a, b)
                    pxb.union(a, b)
                elif rel == "PXB":
                    pxb.union(a, b)
        units = {x: g for g in pix.groups(ids) for x in g}  # member -> its PIX group
        for group in pxb.groups(ids):
            heads = list(dict.fromkeys(units[x][0] for x in group))
            if len(heads) > 1:
                upper_groups.append((heads, cpu_index))
            for head in heads:
                if len(units[head]) > 1 or len(heads) > 1:
                    leaf_groups.append((units[head], cpu_index))

    leaf_groups.sort(key=lambda t: position[t[0][0]])
    upper_groups.sort(key=lambda t: position[t[0][0]])
    switch_cpu: dict[str, int] = {}
    parent_of: dict[str, str] = {}  # endpoint or switch -> switch or cpu
    leaf_of_head: dict[str, str] = {}
    for k, (group, cpu_index) in enumerate(leaf_groups):
        sw = f"pcie{k}"
        switch_cpu[sw] = cpu_index
        leaf_of_head[group[0]] = sw
        parent_of[sw] = f"cpu{cpu_index}"
        for x in group:
            parent_of[x] = sw
    for k, (heads, cpu_index) in enumerate(upper_groups, start=len(leaf_groups)):
        sw = f"pcie{k}"
        switch_cpu[sw] = cpu_index
        parent_of[sw] = f"cpu{cpu_index}"
        for head in heads:
            parent_of[leaf_of_head[head]] = sw
    cpu_of = {e.id: cpu for cpu, members in cpus for e in members}
    for e in endpoints:
        parent_of.setdefault(e.id, f"cpu{cpu_of[e.id]}")

    b = TopologyBuilder(name, source=source, meta=meta)
    for cpu_index, _ in cpus:
        b.add_device(Device(f"cpu{cpu_index}", DeviceKind.CPU, host=0, index=cpu_index, numa=cpu_index))
    for sw in sorted(switch_cpu, key=lambda s: int(s[4:])):
        b.add_device(Device(sw, DeviceKind.PCIE_SWITCH, host=0, index=int(sw[4:]), numa=switch_cpu[sw]))
    for e in endpoints:
        if e.kind is DeviceKind.GPU:
            b.add_device(Device(e.id, e.kind, host=0, index=e.index, numa=cpu_of[e.id], pci=e.pci))
    if nvswitch_lanes:
        b.add_device(Device("nvswitch0", DeviceKind.NVSWITCH, host=0, index=0))
    for e in endpoints:
        if e.kind is not DeviceKind.GPU:
            b.add_device(Device(e.id, e.kind, host=0, index=e.index, numa=cpu_of[e.id], pci=e.pci))

    lat = defaults.LATENCY
    cpu_ids = [f"cpu{i}" for i, _ in cpus]
    for i, a in enumerate(cpu_ids):
        for c in cpu_ids[i + 1:]:
            b.connect(a, c, LinkKind.INTER_SOCKET, inter_socket_bandwidth, lat[LinkKind.INTER_SOCKET])
    children = sorted(parent_of, key=lambda x: (0, int(x[4:])) if x in switch_cpu else (1, position[x]))
    for child in children:
        b.connect(child, parent_of[child], LinkKind.PCIE, pcie_bandwidth, lat[LinkKind.PCIE])
    for (a, c), count in sorted(nvlinks.items(), key=lambda t: (position[t[0][0]], position[t[0][1]])):
        b.connect(a, c, LinkKind.NVLINK, count * lane_bandwidth, lat[LinkKind.NVLINK], count=count)
    for g, count in sorted(nvswitch_lanes.items(), key=lambda t: position[t[0]]):
        b.connect(g, "nvswitch0", LinkKind.NVLINK, count * lane_bandwidth, lat[LinkKind.NVLINK], count=count)
    return b.build()


# --------------------------------------------------------------------------------------
# Parsing the text
# --------------------------------------------------------------------------------------
def parse_cpu_list(text: str) -> frozenset[int]:
    """``"0-19,40-59"`` -> the set of CPU numbers (Linux cpulist syntax); ValueError if bad."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"bad CPU list {text!r}")
        lo_i, hi_i = int(lo), int(hi) if sep else int(lo)
        if hi_i < lo_i:
            raise ValueError(f"bad CPU range {part!r}")
        if hi_i >= limit("cpus").value:
            raise ValueError(limit("cpus").message(hi_i + 1, f"CPU list {part!r}"))
        cpus.update(range(lo_i, hi_i + 1))
    return frozenset(cpus)


@dataclass
class _Row:
    label: str
    line: int
    cells: list[str]
    trailing: list[str]


def _split_header(tokens: list[str]) -> tuple[list[str], list[str]]:
    """Device labels, then the names of the trailing columns."""
    labels: list[str] = []
    i = 0
    while i < len(tokens) and tokens[i] not in _TRAILING_START:
        labels.append(tokens[i])
        i += 1
    trailing: list[str] = []
    while i < len(tokens):
        for phrase in _TRAILING:
            if tuple(tokens[i:i + len(phrase)]) == phrase:
                trailing.append(" ".join(phrase))
                i += len(phrase)
                break
        else:
            trailing.append(tokens[i])
            i += 1
    return labels, trailing


def _read_cell(cell: str) -> tuple[str, int]:
    """``("X", 0)``, ``("NV", lanes)`` or ``(relation, 0)``; ValueError if unreadable."""
    if cell == "X":
        return "X", 0
    m = _NV.fullmatch(cell)
    if m and int(m.group(1)) >= 1:
        return "NV", int(m.group(1))
    rel = RELATION_ALIASES.get(cell, cell)
    if rel in PCIE_RELATIONS:
        return rel, 0
    raise ValueError(cell)


def _header_index(lines: Sequence[str]) -> int | None:
    """The first line naming a GPU column that is not itself a row (rows hold an X)."""
    for i, line in enumerate(lines):
        tokens = line.split()
        if any(_GPU_LABEL.fullmatch(t) for t in tokens) and "X" not in tokens:
            return i
    return None


def looks_like_nvidia_smi(text: str) -> bool:
    """Whether ``text`` has the header line of a ``nvidia-smi topo -m`` matrix."""
    return _header_index([_ANSI.sub("", line) for line in text.splitlines()]) is not None


def parse_nvidia_smi(
    text: str,
    source: str | None = None,
    *,
    name: str | None = None,
    lane_bandwidth: float = defaults.NVLINK_LANE["nvlink2"],
    pcie_bandwidth: float = defaults.PCIE_X16[3],
    inter_socket_bandwidth: float = defaults.INTER_SOCKET,
    nic_bandwidth: float = defaults.NIC_BANDWIDTH,
) -> Topology:
    """Parse ``nvidia-smi topo -m`` output; bandwidths in B/s per direction.

    ``lane_bandwidth`` is one NVLink lane (default NVLink2, 25 GB/s); ``pcie_bandwidth``
    every PCIe link (default gen3 x16); ``nic_bandwidth`` is recorded per NIC in
    ``meta["nic_bandwidth"]`` (a single host has no network link to put it on).
    Errors name the line, row and column: ``dump.txt:3: row GPU2, column GPU5: ...``.
    """
    for what, value in (("lane_bandwidth", lane_bandwidth), ("pcie_bandwidth", pcie_bandwidth),
                        ("inter_socket_bandwidth", inter_socket_bandwidth), ("nic_bandwidth", nic_bandwidth)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise TopologyError(f"{what} must be a positive number of B/s, got {value!r}", source=source)
    lines = [_ANSI.sub("", raw).rstrip() for raw in text.splitlines()]

    header_at = _header_index(lines)
    if header_at is None:
        raise TopologyError("no `nvidia-smi topo -m` matrix found (no header line naming GPU0, GPU1, ...)",
                            source=source)
    labels, trailing_names = _split_header(lines[header_at].split())
    header_line = header_at + 1
    seen: set[str] = set()
    for label in labels:
        if not _LABEL.fullmatch(label):
            raise TopologyError(f"header: cannot read column name {label!r}", source=source, place=header_line)
        if label in seen:
            raise TopologyError(f"header: column {label} appears twice", source=source, place=header_line)
        seen.add(label)
    n = len(labels)

    rows: dict[str, _Row] = {}
    for i in range(header_at + 1, len(lines)):
        tokens = lines[i].split()
        if not tokens:
            if rows:
                break
            continue
        label = tokens[0]
        if label not in seen:
            if _LOOKS_LIKE_ROW.fullmatch(label):
                raise TopologyError(f"row {label} is not one of the header's columns", source=source, place=i + 1)
            break
        if label in rows:
            raise TopologyError(f"row {label} appears twice", source=source, place=i + 1)
        if len(tokens) - 1 < n:
            raise TopologyError(f"row {label}: expected {n} cells (one per column), found {len(tokens) - 1}",
                                source=source, place=i + 1)
        trailing = tokens[1 + n:]
        if trailing and not trailing_names:
            raise TopologyError(f"row {label}: {len(tokens) - 1} cells for {n} columns", source=source, place=i + 1)
        rows[label] = _Row(label, i + 1, tokens[1:1 + n], trailing)
    if not rows:
        raise TopologyError("the matrix has a header but no rows", source=source, place=header_line)

    gpu_labels = [lb for lb in labels if _GPU_LABEL.fullmatch(lb)]
    for lb in gpu_labels:
        if lb not in rows:
            raise TopologyError(f"column {lb} has no row", source=source, place=header_line)

    # cells -> relations, NVLink counts; check the diagonal and symmetry
    value: dict[tuple[str, str], tuple[str, int, int]] = {}  # (row, col) -> (kind, lanes, line)
    for row in rows.values():
        for col, cell in zip(labels, row.cells):
            where = f"row {row.label}, column {col}"
            try:
                kind, lanes = _read_cell(cell)
            except ValueError:
                raise TopologyError(f"{where}: cannot read cell {cell!r}", source=source, place=row.line) from None
            if (kind == "X") != (col == row.label):
                problem = "'X' is only valid on the diagonal" if kind == "X" else f"expected 'X' on the diagonal, got {cell!r}"
                raise TopologyError(f"{where}: {problem}", source=source, place=row.line)
            if kind == "NV" and not (row.label in gpu_labels and col in gpu_labels):
                raise TopologyError(f"{where}: NVLink ({cell}) between a GPU and a NIC is not supported",
                                    source=source, place=row.line)
            other = value.get((col, row.label))
            if other is not None and other[:2] != (kind, lanes):
                raise TopologyError(f"{where}: {cell!r} disagrees with row {col}, column {row.label} "
                                    f"(line {other[2]})", source=source, place=row.line)
            value[(row.label, col)] = (kind, lanes, row.line)

    # ids: GPUk -> gpuk; NICs numbered in column order
    nic_legend: dict[str, str] = {}
    for line in lines[header_at + 1:]:
        m = _NIC_LEGEND.fullmatch(line)
        if m:
            nic_legend[m.group(1)] = m.group(2)
    ident: dict[str, str] = {}
    endpoints: list[Endpoint] = []
    nic_names: dict[str, str] = {}
    for lb in gpu_labels:
        row = rows[lb]
        numa, cpus = _affinity(row, trailing_names, source)
        index = int(_GPU_LABEL.fullmatch(lb).group(1))
        ident[lb] = f"gpu{index}"
        endpoints.append(Endpoint(ident[lb], DeviceKind.GPU, index, numa=numa, cpus=cpus))
    for k, lb in enumerate(lb for lb in labels if lb not in gpu_labels):
        ident[lb] = f"nic{k}"
        nic_names[ident[lb]] = nic_legend.get(lb, lb)
        endpoints.append(Endpoint(ident[lb], DeviceKind.NIC, k))

    relations: dict[frozenset[str], str] = {}
    nv: dict[tuple[str, str], int] = {}
    for (r, c), (kind, lanes, _) in value.items():
        a, b = ident[r], ident[c]
        if kind == "NV":
            if (b, a) not in nv:
                nv[(a, b)] = lanes
        elif kind != "X":
            relations[_pair(a, b)] = kind

    gpu_ids = [ident[lb] for lb in gpu_labels]
    totals = {g: 0 for g in gpu_ids}
    for (a, b), lanes in nv.items():
        totals[a] += lanes
        totals[b] += lanes
    pairs = len(gpu_ids) * (len(gpu_ids) - 1) // 2
    lane_counts = set(nv.values())
    nvswitch: dict[str, int] = {}
    if len(gpu_ids) > 1 and len(nv) == pairs and len(lane_counts) == 1:
        lanes = lane_counts.pop()
        if lanes * (len(gpu_ids) - 1) > defaults.MAX_NVLINKS_PER_GPU:
            nvswitch = {g: lanes for g in gpu_ids}
            nv = {}
    for lb in gpu_labels:
        if not nvswitch and totals[ident[lb]] > defaults.MAX_NVLINKS_PER_GPU:
            raise TopologyError(f"row {lb}: {totals[ident[lb]]} NVLinks in all, more than any GPU has "
                                f"({defaults.MAX_NVLINKS_PER_GPU}), and the matrix is not an NVSwitch fabric",
                                source=source, place=rows[lb].line)

    meta: dict[str, object] = {"format": "nvidia-smi"}
    if source:
        meta["source"] = source
    if nic_names:
        meta["nic_names"] = nic_names
        meta["nic_bandwidth"] = {nic: float(nic_bandwidth) for nic in nic_names}
    return build_host_topology(
        name or (Path(source).stem if source else "nvidia-smi"),
        endpoints, relations, nvlinks=nv, nvswitch_lanes=nvswitch,
        lane_bandwidth=lane_bandwidth, pcie_bandwidth=pcie_bandwidth,
        inter_socket_bandwidth=inter_socket_bandwidth, source=source, meta=meta,
    )


def _affinity(row: _Row, names: Sequence[str], source: str | None) -> tuple[int | None, frozenset[int] | None]:
    """The NUMA node and CPU set a GPU row states in its trailing columns (or None)."""
    values = dict(zip(names, row.trailing))
    numa = cpus = None
    text = values.get("CPU Affinity")
    if text is not None and text.upper() != "N/A":
        try:
            cpus = parse_cpu_list(text) or None
        except ValueError as e:
            raise TopologyError(f"row {row.label}, column CPU Affinity: cannot read {text!r} ({e})",
                                source=source, place=row.line) from None
    text = values.get("NUMA Affinity")
    if text is not None and text.upper() != "N/A":
        try:
            nodes = parse_cpu_list(text)
        except ValueError as e:
            raise TopologyError(f"row {row.label}, column NUMA Affinity: cannot read {text!r} ({e})",
                                source=source, place=row.line) from None
        if len(nodes) == 1:
            numa = next(iter(nodes))
    return numa, cpus


def read_nvidia_smi(path: str | Path, **options) -> Topology:
    """Read a file holding ``nvidia-smi topo -m`` output (options as :func:`parse_nvidia_smi`)."""
    text = read_input_text(path, TopologyError)
    return parse_nvidia_smi(text, str(path), **options)
