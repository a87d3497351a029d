"""Read and write NCCL topology XML (the ``NCCL_TOPO_FILE`` format).

Format (as NCCL reads and writes it, https://github.com/NVIDIA/nccl, ``src/graph/topo.cc``
and ``src/graph/xml.cc``): root ``<system version="1">``;
``<cpu numaid affinity arch vendor familyid modelid>`` elements hold nested
``<pci busid class link_speed link_width>`` elements (class ``0x060400`` is a PCIe
switch); a ``<pci>`` holding a ``<gpu dev sm rank gdr>`` is that GPU, whose
``<nvlink target count tclass>`` children name the peer's bus id and class
(``0x0302..`` GPU, ``0x068000`` NVSwitch, ``0x068001`` CPU); a ``<pci>`` (or the
``<cpu>`` itself) holding ``<nic>`` holds its ports as ``<net name dev speed ...>``,
speed in Mb/s.

Bandwidths, as NCCL computes them:

* a ``<pci>`` element's link to its parent: ``link_width x code / 80`` GB/s, where the
  ``link_speed`` codes are 2.5 GT/s -> 15, 5 -> 30, 8 -> 60, 16 -> 120, 32 -> 240,
  64 -> 480, and anything else 60 (so x16 gen3 is 12 GB/s, gen4 24);
* one NVLink lane by the GPU's ``sm``: sm60 18, sm70 20, sm80 20, sm86 12, sm90 20.6,
  sm100 40.1 GB/s, unless the caller gives ``lane_bandwidth``;
* CPUs are joined pairwise by ``inter_socket`` links (NCCL derives them too).

Mapping to arborcc ids: ``<cpu numaid=k>`` -> ``cpuk``; PCIe switches ``pcie0..`` in
bus-id order; ``<gpu dev=k>`` -> ``gpuk``; ``<net dev=k>`` -> ``nick``; every NVSwitch
target -> the one non-blocking ``nvswitch0`` (NCCL also merges them into one node).
Ranks follow the ``rank`` attributes. NIC speeds and names, GPU ``sm`` and CPU
attributes go to ``meta`` so that writing the topology back reproduces them.

The writer emits what NCCL's own (non-standard) XML parser reads: no XML declaration,
double-quoted attributes, two-space indentation. Devices without a PCI bus id get
deterministic synthetic ones, marked ``arborcc_synthetic="1"`` (NCCL ignores unknown
attributes) so that reading the file back gives ``pci=None`` again. NCCL XML describes
one node: a multi-host topology needs ``host=N`` to pick the node to write.
"""

from __future__ import annotations

import logging
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping
from xml.parsers import expat

from arborcc.errors import TopologyError
from arborcc.files import read_input_text, write_output
from arborcc.limits import limit
from arborcc.topology import defaults
from arborcc.topology.defaults import NIC_BANDWIDTH
from arborcc.topology.model import GB, Device, DeviceKind, Link, LinkKind, Topology, TopologyBuilder

log = logging.getLogger(__name__)

SYNTHETIC_ATTR = "arborcc_synthetic"
PCI_BRIDGE_CLASSES = ("0x060400", "0x080100")  # NCCL treats both as PCIe switches
GPU_CLASS, NIC_CLASS = "0x030200", "0x020700"
NVSWITCH_TCLASS, CPU_TCLASS = "0x068000", "0x068001"

#: NCCL's PCIe speed codes (100 Mb/s per lane) by GT/s; unknown speeds count as 60
SPEED_CODES = {2.5: 15, 5.0: 30, 8.0: 60, 16.0: 120, 32.0: 240, 64.0: 480}
DEFAULT_SPEED_CODE = 60
_SPEED_TEXT = {2.5: "2.5 GT/s", 5.0: "5 GT/s", 8.0: "8 GT/s", 16.0: "16 GT/s", 32.0: "32 GT/s",
               64.0: "64.0 GT/s PCIe"}
_BUSID = re.compile(r"([0-9a-fA-F]{1,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])")
_INT = re.compile(r"[+-]?(0[xX][0-9a-fA-F]+|[0-9]+)")
_SAFE_VALUE = re.compile(r'[^"<>&\r\n]*')
#: CPU attributes written when the topology says nothing (a Skylake-class Xeon)
DEFAULT_CPU_ATTRIBUTES = {"arch": "x86_64", "vendor": "GenuineIntel", "familyid": "6", "modelid": "85"}


def nccl_lane_bandwidth(sm: int) -> float:
    """Bandwidth of one NVLink lane (B/s per direction) that NCCL assumes for a GPU ``sm``."""
    gbps = (40.1 if sm >= 100 else 20.6 if sm >= 90 else 12.0 if sm == 86 else
            20.0 if sm >= 80 else 20.0 if sm >= 70 else 18.0 if sm >= 60 else 20.0)
    return gbps * GB


def pcie_link_bandwidth(width: int, speed: str) -> float:
    """NCCL's PCIe bandwidth (B/s) for ``link_width`` and ``link_speed`` text; width 0 means 16."""
    m = re.match(r"\s*([0-9]+(?:\.[0-9]+)?)\s*GT/s", speed)
    code = SPEED_CODES.get(float(m.group(1)), DEFAULT_SPEED_CODE) if m else DEFAULT_SPEED_CODE
    return (width or 16) * code / 80 * GB


def canonical_busid(text: str) -> str | None:
    """``"00000000:07:00.0"`` -> ``"0000:07:00.0"`` (NCCL's form); None if not a bus id."""
    m = _BUSID.fullmatch(text.strip())
    if not m:
        return None
    domain, bus, dev, fn = (int(g, 16) for g in m.groups())
    return f"{domain:04x}:{bus:02x}:{dev:02x}.{fn}"


def _busid_key(canon: str) -> tuple[int, ...]:
    return tuple(int(p, 16) for p in re.split(r"[:.]", canon))


# --------------------------------------------------------------------------------------
# XML elements with line numbers
# --------------------------------------------------------------------------------------
@dataclass
class _Element:
    tag: str
    attrs: dict[str, str]
    line: int
    children: list["_Element"] = field(default_factory=list)

    def label(self) -> str:
        for key in ("busid", "dev", "numaid", "name", "target"):
            if key in self.attrs:
                return f'<{self.tag} {key}="{self.attrs[key]}">'
        return f"<{self.tag}>"


def _parse_elements(text: str, source: str | None) -> _Element:
    parser = expat.ParserCreate()
    stack: list[_Element] = []
    root: list[_Element] = []

    max_depth = limit("nesting").value

    def start(tag: str, attrs: dict[str, str]) -> None:
        if len(stack) >= max_depth:
            raise TopologyError(limit("nesting").message(len(stack) + 1, f"<{tag}>"), source=source,
                                place=parser.CurrentLineNumber)
        el = _Element(tag, dict(attrs), parser.CurrentLineNumber)
        (stack[-1].children if stack else root).append(el)
        stack.append(el)

    def end(tag: str) -> None:
        stack.pop()

    def no_entities(*args) -> None:
        raise TopologyError("XML entity declarations are not allowed in a topology file",
                            source=source, place=parser.CurrentLineNumber)

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.EntityDeclHandler = no_entities
    try:
        parser.Parse(text, True)
    except expat.ExpatError as e:
        raise TopologyError(f"not well-formed XML: {expat.ErrorString(e.code)}", source=source, place=e.lineno) from None
    if not root:
        raise TopologyError("no XML element found", source=source)
    return root[0]


# --------------------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------------------
class _XmlReader:
    def __init__(self, source: str | None, lane_bandwidth: float | None, inter_socket: float, cpu_nic_pcie: float):
        self.source = source
        self.lane_bandwidth = lane_bandwidth
        self.inter_socket = inter_socket
        self.cpu_nic_pcie = cpu_nic_pcie
        self.cpus: dict[int, int] = {}  # numaid -> line
        self.host_hashes: set[str] = set()
        self.switches: list[tuple[str, tuple[int, ...], str | None, int, int]] = []
        self.gpus: dict[str, tuple[Device, int]] = {}
        self.nics: dict[str, tuple[Device, int]] = {}
        self.edges: list[tuple[str, str, float, int]] = []  # child, parent, bandwidth, line
        self.nvlinks: list[tuple[str, _Element]] = []
        self.gpu_of_busid: dict[str, str] = {}
        self.ranks: list[tuple[int, int, str, int]] = []
        self.gpu_sm: dict[str, int] = {}
        self.nic_names: dict[str, str] = {}
        self.nic_bandwidth: dict[str, float] = {}
        self.cpu_attributes: dict[str, dict[str, str]] = {}

    # --- attribute access -------------------------------------------------------------
    def error(self, el: _Element, problem: str) -> TopologyError:
        return TopologyError(f"{el.label()}: {problem}", source=self.source, place=el.line)

    def text(self, el: _Element, name: str) -> str:
        if name not in el.attrs:
            raise self.error(el, f"missing attribute '{name}'")
        return el.attrs[name]

    def integer(self, el: _Element, name: str, minimum: int | None = 0, required: bool = True) -> int | None:
        if name not in el.attrs and not required:
            return None
        value = self.text(el, name)
        if not _INT.fullmatch(value.strip()):
            raise self.error(el, f"attribute '{name}': expected an integer, got {value!r}")
        number = int(value.strip(), 0) if "x" in value.lower() else int(value.strip(), 10)
        if minimum is not None and number < minimum:
            raise self.error(el, f"attribute '{name}': must be >= {minimum}, got {value!r}")
        return number

    def real(self, el: _Element, name: str) -> None:
        if name in el.attrs:
            try:
                if not math.isfinite(float(el.attrs[name])):
                    raise ValueError
            except ValueError:
                raise self.error(el, f"attribute '{name}': expected a number, got {el.attrs[name]!r}") from None

    def busid(self, el: _Element, name: str) -> str:
        value = self.text(el, name)
        canon = canonical_busid(value)
        if canon is None:
            raise self.error(el, f"attribute '{name}': expected a PCI bus id like 0000:07:00.0, got {value!r}")
        return canon

    # --- elements ---------------------------------------------------------------------
    def system(self, root: _Element) -> None:
        if root.tag != "system":
            raise TopologyError(f"root element is <{root.tag}>, not <system>: not an NCCL topology file",
                                source=self.source, place=root.line)
        version = self.integer(root, "version")
        if version != 1:
            raise self.error(root, f"attribute 'version': NCCL topology version {version} is not supported (expected 1)")
        for child in root.children:
            if child.tag == "cpu":
                self.cpu(child)
            else:
                log.debug("%s:%s: ignoring <%s>", self.source, child.line, child.tag)

    def cpu(self, el: _Element) -> None:
        numa = self.integer(el, "numaid")
        arch = self.text(el, "arch")
        if arch == "x86_64":
            vendor = self.text(el, "vendor")
            if vendor == "GenuineIntel":
                self.integer(el, "familyid")
                self.integer(el, "modelid")
            elif vendor == "AuthenticAMD":
                self.integer(el, "familyid")
        if "affinity" in el.attrs and not re.fullmatch(r"[0-9a-fA-F,]+", el.attrs["affinity"]):
            raise self.error(el, f"attribute 'affinity': expected a hexadecimal CPU mask, got {el.attrs['affinity']!r}")
        self.host_hashes.add(el.attrs.get("host_hash", ""))
        if len(self.host_hashes) > 1:
            raise self.error(el, "the file describes several hosts (host_hash differs); arborcc reads one node per file")
        if numa in self.cpus:
            raise self.error(el, f"numaid {numa} appears twice (first at line {self.cpus[numa]})")
        self.cpus[numa] = el.line
        cpu_id = f"cpu{numa}"
        self.cpu_attributes[cpu_id] = {k: el.attrs[k] for k in ("affinity", "arch", "vendor", "familyid", "modelid")
                                       if k in el.attrs}
        for child in el.children:
            if child.tag == "pci":
                self.pci(child, cpu_id, numa)
            elif child.tag == "nic":
                self.nic(child, cpu_id, numa, None, self.cpu_nic_pcie)

    def pci(self, el: _Element, parent: str, numa: int) -> None:
        cls = self.text(el, "class")
        if not re.fullmatch(r"0x[0-9a-fA-F]+", cls):
            raise self.error(el, f"attribute 'class': expected a hexadecimal PCI class like 0x060400, got {cls!r}")
        canon = self.busid(el, "busid")
        width = self.integer(el, "link_width")
        bandwidth = pcie_link_bandwidth(width, self.text(el, "link_speed"))
        pci = None if el.attrs.get(SYNTHETIC_ATTR) == "1" else canon
        gpus = [c for c in el.children if c.tag == "gpu"]
        nics = [c for c in el.children if c.tag == "nic"]
        if len(gpus) > 1:
            raise self.error(gpus[1], "several <gpu> in one <pci> (MLOPart partitions) are not supported")
        if gpus:
            self.gpu(gpus[0], canon, pci, parent, numa, bandwidth)
        elif nics:
            for nic in nics:
                self.nic(nic, parent, numa, pci, bandwidth)
        elif cls.lower() in PCI_BRIDGE_CLASSES:
            key = f"~switch{len(self.switches)}"
            self.switches.append((key, _busid_key(canon), pci, numa, el.line))
            self.edges.append((key, parent, bandwidth, el.line))
            for child in el.children:
                if child.tag == "pci":
                    self.pci(child, key, numa)
        else:  # NCCL ignores other PCI functions (NVSwitches, storage, ...) and what is under them
            log.debug("%s:%s: ignoring %s of class %s", self.source, el.line, el.label(), cls)

    def gpu(self, el: _Element, canon: str, pci: str | None, parent: str, numa: int, bandwidth: float) -> None:
        dev = self.integer(el, "dev")
        sm = self.integer(el, "sm")
        rank = self.integer(el, "rank")
        self.integer(el, "gdr", required=False)
        gid = f"gpu{dev}"
        if gid in self.gpus:
            raise self.error(el, f"GPU dev {dev} appears twice (first at line {self.gpus[gid][1]})")
        if canon in self.gpu_of_busid:
            raise self.error(el, f"bus id {canon} is used by two GPUs")
        self.gpu_of_busid[canon] = gid
        self.gpus[gid] = (Device(gid, DeviceKind.GPU, host=0, index=dev, numa=numa, pci=pci), el.line)
        self.gpu_sm[gid] = sm
        self.ranks.append((rank, dev, gid, el.line))
        self.edges.append((gid, parent, bandwidth, el.line))
        self.nvlinks.extend((gid, c) for c in el.children if c.tag == "nvlink")

    def nic(self, el: _Element, parent: str, numa: int, pci: str | None, bandwidth: float) -> None:
        for net in el.children:
            if net.tag != "net" or "dev" not in net.attrs:  # NCCL skips <net> without dev
                continue
            dev = self.integer(net, "dev")
            speed = self.integer(net, "speed", minimum=None, required=False)
            for name in ("port", "maxconn", "gdr"):
                self.integer(net, name, minimum=None, required=False)
            self.real(net, "latency")
            if "guid" in net.attrs and not re.fullmatch(r"(0[xX])?[0-9a-fA-F]+", net.attrs["guid"]):
                raise self.error(net, f"attribute 'guid': expected a hexadecimal number, got {net.attrs['guid']!r}")
            nid = f"nic{dev}"
            if nid in self.nics:
                raise self.error(net, f"net dev {dev} appears twice (first at line {self.nics[nid][1]})")
            self.nics[nid] = (Device(nid, DeviceKind.NIC, host=0, index=dev, numa=numa, pci=pci), net.line)
            self.edges.append((nid, parent, bandwidth, net.line))
            self.nic_names[nid] = net.attrs.get("name", nid)
            mbps = speed if speed is not None and speed > 0 else 10000  # NCCL: unknown speed -> 10 Gb/s
            self.nic_bandwidth[nid] = mbps * 1e6 / 8

    # --- assembly ---------------------------------------------------------------------
    def build(self, name: str, meta_source: str | None) -> Topology:
        meta: dict[str, object] = {"format": "nccl-xml"}
        if meta_source:
            meta["source"] = meta_source
        meta["gpu_sm"] = dict(sorted(self.gpu_sm.items(), key=lambda t: self.gpus[t[0]][0].index))
        if self.nics:
            order = sorted(self.nics, key=lambda n: self.nics[n][0].index)
            meta["nic_names"] = {n: self.nic_names[n] for n in order}
            meta["nic_bandwidth"] = {n: self.nic_bandwidth[n] for n in order}
        meta["nccl_cpu"] = {f"cpu{k}": self.cpu_attributes[f"cpu{k}"] for k in sorted(self.cpus)}
        b = TopologyBuilder(name, source=self.source, meta=meta)

        for numa in sorted(self.cpus):
            b.add_device(Device(f"cpu{numa}", DeviceKind.CPU, host=0, index=numa, numa=numa), place=self.cpus[numa])
        rename: dict[str, str] = {}
        for k, (key, _, pci, numa, line) in enumerate(sorted(self.switches, key=lambda s: s[1])):
            rename[key] = f"pcie{k}"
            b.add_device(Device(f"pcie{k}", DeviceKind.PCIE_SWITCH, host=0, index=k, numa=numa, pci=pci), place=line)
        for gid in sorted(self.gpus, key=lambda g: self.gpus[g][0].index):
            b.add_device(self.gpus[gid][0], place=self.gpus[gid][1])
        if any(_tclass_kind(el.attrs.get("tclass", "")) == "nvswitch" for _, el in self.nvlinks):
            b.add_device(Device("nvswitch0", DeviceKind.NVSWITCH, host=0, index=0))
        for nid in sorted(self.nics, key=lambda n: self.nics[n][0].index):
            b.add_device(self.nics[nid][0], place=self.nics[nid][1])

        lat = defaults.LATENCY
        cpu_ids = [f"cpu{k}" for k in sorted(self.cpus)]
        for i, a in enumerate(cpu_ids):
            for c in cpu_ids[i + 1:]:
                b.connect(a, c, LinkKind.INTER_SOCKET, self.inter_socket, lat[LinkKind.INTER_SOCKET])
        pcie_parent: dict[str, str] = {}
        for child, parent, bandwidth, line in sorted(self.edges, key=lambda e: _edge_order(e, rename)):
            child, parent = rename.get(child, child), rename.get(parent, parent)
            pcie_parent[child] = parent
            b.connect(child, parent, LinkKind.PCIE, bandwidth, lat[LinkKind.PCIE], place=line)

        for gid, el in self.nvlinks:
            count = self.integer(el, "count")
            kind = _tclass_kind(self.text(el, "tclass"))
            if count == 0:
                continue
            lane = self.lane_bandwidth if self.lane_bandwidth is not None else nccl_lane_bandwidth(self.gpu_sm[gid])
            link_lat = lat[LinkKind.NVLINK]
            if kind == "gpu":
                target = self.busid(el, "target")
                peer = self.gpu_of_busid.get(target)
                if peer is None:  # NCCL ignores links to GPUs it does not know (partial files)
                    log.debug("%s:%s: NVLink target %s is not a GPU of this file", self.source, el.line, target)
                    continue
                if peer == gid:
                    raise self.error(el, "an NVLink from a GPU to itself")
                b.add_link(Link(gid, peer, LinkKind.NVLINK, count * lane, link_lat, count), place=el.line, merge=True)
            elif kind == "nvswitch":
                b.connect(gid, "nvswitch0", LinkKind.NVLINK, count * lane, link_lat, count, place=el.line, merge=True)
            elif kind == "cpu":
                cpu = self.gpus[gid][0].numa
                if pcie_parent.get(gid) == f"cpu{cpu}":
                    raise self.error(el, f"{gid} reaches cpu{cpu} by both PCIe and NVLink, which arborcc cannot model")
                b.connect(gid, f"cpu{cpu}", LinkKind.NVLINK, count * lane, link_lat, count, place=el.line, merge=True)
            else:
                raise self.error(el, f"attribute 'tclass': unknown NVLink target class {el.attrs['tclass']!r} "
                                     f"(expected 0x030200 GPU, 0x068000 NVSwitch or 0x068001 CPU)")

        ranks = [gid for _, _, gid, _ in sorted(self.ranks)]
        seen: dict[int, int] = {}
        for rank, _, gid, line in self.ranks:
            if rank in seen:
                raise TopologyError(f"<gpu dev=\"{self.gpus[gid][0].index}\">: rank {rank} appears twice "
                                    f"(first at line {seen[rank]})", source=self.source, place=line)
            seen[rank] = line
        return b.build(ranks=ranks or None)


def _tclass_kind(tclass: str) -> str:
    t = tclass.strip().lower()
    if t.startswith("0x03"):
        return "gpu"
    if t == NVSWITCH_TCLASS:
        return "nvswitch"
    if t == CPU_TCLASS:
        return "cpu"
    return "unknown"


def _edge_order(edge: tuple[str, str, float, int], rename: Mapping[str, str]) -> tuple:
    child = rename.get(edge[0], edge[0])
    kind = {"pcie": 0, "gpu": 1, "nic": 2}.get(re.sub(r"\d+$", "", child), 3)
    return kind, int(re.sub(r"\D", "", child) or 0)


def parse_nccl_xml(
    text: str,
    source: str | None = None,
    *,
    name: str | None = None,
    lane_bandwidth: float | None = None,
    inter_socket_bandwidth: float = defaults.INTER_SOCKET,
    cpu_nic_pcie_bandwidth: float = defaults.PCIE_X16[3],
) -> Topology:
    """Parse NCCL topology XML text; bandwidths in B/s.

    ``lane_bandwidth`` overrides NCCL's per-``sm`` NVLink lane bandwidth;
    ``cpu_nic_pcie_bandwidth`` is used for a ``<nic>`` placed directly under a ``<cpu>``
    (it has no PCIe link description).
    """
    for what, value in (("lane_bandwidth", lane_bandwidth), ("inter_socket_bandwidth", inter_socket_bandwidth),
                        ("cpu_nic_pcie_bandwidth", cpu_nic_pcie_bandwidth)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
            raise TopologyError(f"{what} must be a positive number of B/s, got {value!r}", source=source)
    root = _parse_elements(text, source)
    reader = _XmlReader(source, lane_bandwidth, inter_socket_bandwidth, cpu_nic_pcie_bandwidth)
    reader.system(root)
    default = root.attrs.get("name") or (Path(source).stem if source else "nccl-topology")
    return reader.build(name or default, source)


def read_nccl_xml(path: str | os.PathLike, **options) -> Topology:
    """Read an NCCL topology XML file (options as :func:`parse_nccl_xml`)."""
    text = read_input_text(path, TopologyError)
    return parse_nccl_xml(text, str(path), **options)


# --------------------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------------------
def _pcie_attributes(bandwidth: float, what: str) -> tuple[int, str]:
    """``(link_width, link_speed)`` whose NCCL bandwidth is ``bandwidth`` (or the nearest)."""
    combos = [(w, gts) for w in (16, 8, 4, 2, 1, 32) for gts in sorted(SPEED_CODES)]
    for w, gts in combos:
        if math.isclose(pcie_link_bandwidth(w, _SPEED_TEXT[gts]), bandwidth, rel_tol=1e-12):
            return w, _SPEED_TEXT[gts]
    w, gts = min(combos, key=lambda c: abs(pcie_link_bandwidth(c[0], _SPEED_TEXT[c[1]]) - bandwidth))
    log.warning("%s: %.3g GB/s is not a PCIe width x speed NCCL knows; writing x%d at %s (%.3g GB/s)",
                what, bandwidth / GB, w, _SPEED_TEXT[gts], pcie_link_bandwidth(w, _SPEED_TEXT[gts]) / GB)
    return w, _SPEED_TEXT[gts]


def _default_sm(topology: Topology, gpu: str) -> int:
    """The GPU generation suggested by its NVLink lane total (P100 4, V100 6, A100 12, H100 18)."""
    lanes = sum(l.count for l in topology.out_links(gpu) if l.kind is LinkKind.NVLINK)
    if lanes == 0:
        return 80
    return 60 if lanes <= 4 else 70 if lanes <= 6 else 80 if lanes <= 12 else 90


class _XmlWriter:
    def __init__(self, topology: Topology, host: int | None, sm, nic_bandwidth, cpu_attributes):
        self.t = topology
        self.sm = sm
        self.nic_bandwidth = nic_bandwidth
        self.cpu_attributes = cpu_attributes
        hosts = topology.hosts
        if host is None:
            if len(hosts) > 1:
                raise TopologyError(f"the topology spans hosts {', '.join(map(str, hosts))}; NCCL XML describes "
                                    "one node: choose one with host=N", source=topology.name)
            host = hosts[0] if hosts else 0
        elif host not in hosts:
            raise TopologyError(f"host {host} is not in the topology (hosts: {', '.join(map(str, hosts))})",
                                source=topology.name)
        self.devs = {i: d for i, d in topology.devices.items() if d.host == host}
        self.meta = topology.meta

    def error(self, problem: str) -> TopologyError:
        return TopologyError(problem, source=self.t.name)

    def of_kind(self, kind: DeviceKind) -> list[Device]:
        return sorted((d for d in self.devs.values() if d.kind is kind),
                      key=lambda d: (d.index if d.index is not None else 1 << 30, d.id))

    def tree(self) -> dict[str, str]:
        """PCIe parent of every non-CPU device, checking the links form a tree under the CPUs."""
        for d in self.devs.values():
            if d.kind is DeviceKind.NET_SWITCH:
                raise self.error(f"{d.id}: a network switch cannot be written in NCCL XML")
        neighbours: dict[str, set[str]] = {i: set() for i in self.devs}
        for l in self.t.links.values():
            if l.src not in self.devs or l.dst not in self.devs:
                continue
            if l.kind is LinkKind.PCIE:
                neighbours[l.src].add(l.dst)
                neighbours[l.dst].add(l.src)
            elif l.kind is LinkKind.INTER_SOCKET:
                if not (self.devs[l.src].kind is DeviceKind.CPU and self.devs[l.dst].kind is DeviceKind.CPU):
                    raise self.error(f"link {l.src}->{l.dst}: an inter_socket link must join two CPUs")
            elif l.kind is not LinkKind.NVLINK:
                raise self.error(f"link {l.src}->{l.dst}: a {l.kind.value} link inside a node cannot be written in NCCL XML")
        cpus = self.of_kind(DeviceKind.CPU)
        if not cpus:
            raise self.error("NCCL XML needs at least one CPU: every GPU sits under a <cpu>")
        parent: dict[str, str] = {}
        for cpu in cpus:
            queue = [cpu.id]
            while queue:
                x = queue.pop(0)
                for y in sorted(neighbours[x]):
                    if y == parent.get(x):
                        continue
                    if self.devs[y].kind is DeviceKind.CPU:
                        raise self.error(f"PCIe link between {x} and {y}: CPUs are joined by inter_socket links")
                    if self.devs[y].kind is DeviceKind.NVSWITCH:
                        raise self.error(f"PCIe link between {x} and {y}: NCCL XML has no place for an NVSwitch "
                                         "on the PCIe tree")
                    if y in parent:
                        raise self.error(f"the PCIe links at {y} form a cycle; NCCL XML describes a tree")
                    if self.devs[x].kind in (DeviceKind.GPU, DeviceKind.NIC, DeviceKind.NVSWITCH):
                        raise self.error(f"{y} is attached below {x} over PCIe, which NCCL XML cannot describe")
                    parent[y] = x
                    queue.append(y)
        for d in self.devs.values():
            if d.kind in (DeviceKind.GPU, DeviceKind.NIC, DeviceKind.PCIE_SWITCH) and d.id not in parent:
                raise self.error(f"{d.id} has no PCIe path to a CPU; NCCL XML needs every device under a <cpu>")
        return parent

    def bus_ids(self) -> tuple[dict[str, str], set[str]]:
        busid: dict[str, str] = {}
        for d in self.devs.values():
            if d.pci is not None:
                canon = canonical_busid(d.pci)
                if canon is None:
                    raise self.error(f"{d.id}: pci {d.pci!r} is not a PCI bus id like 0000:07:00.0")
                busid[d.id] = canon
        used = set(busid.values())
        synthetic: set[str] = set()
        counter = 0
        for kind in (DeviceKind.PCIE_SWITCH, DeviceKind.GPU, DeviceKind.NIC, DeviceKind.NVSWITCH):
            for d in self.of_kind(kind):
                if d.id in busid:
                    continue
                while True:
                    counter += 1
                    candidate = f"{counter >> 8:04x}:{counter & 0xff:02x}:00.0"
                    if candidate not in used:
                        break
                busid[d.id] = candidate
                synthetic.add(d.id)
        return busid, synthetic

    def gpu_sm(self, gpu: Device) -> int:
        if isinstance(self.sm, Mapping) and gpu.id in self.sm:
            return int(self.sm[gpu.id])
        if isinstance(self.sm, int):
            return self.sm
        known = self.meta.get("gpu_sm")
        if isinstance(known, Mapping) and isinstance(known.get(gpu.id), int):
            return known[gpu.id]
        return _default_sm(self.t, gpu.id)

    def nic_speed(self, nic: Device) -> int:
        bw = None
        if isinstance(self.nic_bandwidth, Mapping):
            bw = self.nic_bandwidth.get(nic.id)
        elif self.nic_bandwidth is not None:
            bw = self.nic_bandwidth
        if bw is None:
            net = [l.bandwidth for l in self.t.out_links(nic.id) if l.kind is LinkKind.NETWORK]
            bw = max(net) if net else None
        if bw is None:
            known = self.meta.get("nic_bandwidth")
            if isinstance(known, Mapping) and isinstance(known.get(nic.id), (int, float)):
                bw = known[nic.id]
        if bw is None:  # a built-in machine records its parameters (GB/s)
            params = self.meta.get("params")
            if isinstance(params, Mapping) and isinstance(params.get("nic_gbps"), (int, float)):
                bw = params["nic_gbps"] * GB
        return max(1, round((bw if bw is not None else NIC_BANDWIDTH) * 8 / 1e6))

    def cpu_attrs(self, cpu: Device) -> dict[str, str]:
        if self.cpu_attributes is not None:
            return {k: str(v) for k, v in self.cpu_attributes.items()}
        known = self.meta.get("nccl_cpu")
        if isinstance(known, Mapping) and isinstance(known.get(cpu.id), Mapping) and "arch" in known[cpu.id]:
            return {k: str(v) for k, v in known[cpu.id].items()}
        return dict(DEFAULT_CPU_ATTRIBUTES)

    def text(self) -> str:
        parent = self.tree()
        busid, synthetic = self.bus_ids()
        children: dict[str, list[str]] = {}
        for child, p in parent.items():
            children.setdefault(p, []).append(child)

        gpus = self.of_kind(DeviceKind.GPU)
        order = [r for r in self.t.ranks if r in self.devs]
        order += [g.id for g in gpus if g.id not in order]
        rank = {g: i for i, g in enumerate(order)}
        devs_seen: dict[int, str] = {}
        for g in gpus:
            if g.index is None:
                raise self.error(f"{g.id}: a GPU needs an index (its CUDA device number) to be written in NCCL XML")
            if g.index in devs_seen:
                raise self.error(f"{g.id} and {devs_seen[g.index]} have the same index {g.index}")
            devs_seen[g.index] = g.id
        for n in self.of_kind(DeviceKind.NIC):
            if n.index is None:
                raise self.error(f"{n.id}: a NIC needs an index (its net dev number) to be written in NCCL XML")

        out: list[str] = []

        def emit(depth: int, tag: str, attrs: list[tuple[str, object]], inner: list | None = None) -> None:
            parts = []
            for k, v in attrs:
                v = str(v)
                if not _SAFE_VALUE.fullmatch(v):
                    raise self.error(f"<{tag}> attribute {k}={v!r} has characters NCCL's XML parser cannot read")
                parts.append(f' {k}="{v}"')
            pad = "  " * depth
            if inner:
                out.append(f"{pad}<{tag}{''.join(parts)}>")
                for item in inner:
                    item(depth + 1)
                out.append(f"{pad}</{tag}>")
            else:
                out.append(f"{pad}<{tag}{''.join(parts)}/>")

        def pci_attrs(dev: str, cls: str, vendor: str | None) -> list[tuple[str, object]]:
            link = self.t.link(dev, parent[dev]) or self.t.link(parent[dev], dev)
            back = self.t.link(parent[dev], dev)
            if back is not None and link is not None and back.bandwidth != link.bandwidth:
                log.warning("%s: PCIe link %s<->%s differs by direction; writing %s->%s", self.t.name, dev,
                            parent[dev], dev, parent[dev])
            width, speed = _pcie_attributes(link.bandwidth, f"{self.t.name}: PCIe link {dev}<->{parent[dev]}")
            attrs: list[tuple[str, object]] = [("busid", busid[dev]), ("class", cls)]
            if vendor:
                attrs.append(("vendor", vendor))
            attrs += [("link_speed", speed), ("link_width", width)]
            if dev in synthetic:
                attrs.append((SYNTHETIC_ATTR, 1))
            return attrs

        def nvlinks(g: Device) -> list:
            items = []
            for l in sorted(self.t.out_links(g.id), key=lambda l: busid.get(l.dst, l.dst)):
                if l.kind is not LinkKind.NVLINK:
                    continue
                peer = self.devs.get(l.dst)
                if peer is None:
                    raise self.error(f"NVLink {g.id}->{l.dst} leaves the node; NCCL XML describes one node")
                if peer.kind is DeviceKind.GPU:
                    attrs = [("target", busid[peer.id]), ("count", l.count), ("tclass", GPU_CLASS)]
                elif peer.kind is DeviceKind.NVSWITCH:
                    attrs = [("target", busid[peer.id]), ("count", l.count), ("tclass", NVSWITCH_TCLASS)]
                elif peer.kind is DeviceKind.CPU:
                    root = g.id
                    while self.devs[root].kind is not DeviceKind.CPU:
                        root = parent[root]
                    if root != peer.id:
                        raise self.error(f"NVLink {g.id}->{peer.id}: NCCL only knows NVLinks to the GPU's own CPU ({root})")
                    attrs = [("count", l.count), ("tclass", CPU_TCLASS)]
                else:
                    raise self.error(f"NVLink {g.id}->{peer.id}: NCCL XML has NVLinks only to GPUs, NVSwitches and CPUs")
                items.append(lambda depth, attrs=attrs: emit(depth, "nvlink", attrs))
            return items

        def node(dev: str):
            d = self.devs[dev]

            def write(depth: int) -> None:
                if d.kind is DeviceKind.PCIE_SWITCH:
                    emit(depth, "pci", pci_attrs(dev, PCI_BRIDGE_CLASSES[0], None),
                         [node(c) for c in sorted(children.get(dev, []), key=lambda c: _busid_key(busid[c]))
                          if not self._grouped_away(c, busid, synthetic, parent)])
                elif d.kind is DeviceKind.GPU:
                    gpu = lambda depth2: emit(depth2, "gpu", [("dev", d.index), ("sm", self.gpu_sm(d)),
                                                               ("rank", rank[dev]), ("gdr", 1)], nvlinks(d))
                    emit(depth, "pci", pci_attrs(dev, GPU_CLASS, "0x10de"), [gpu])
                elif d.kind is DeviceKind.NIC:
                    ports = self._ports(d, busid, synthetic, parent)
                    nets = [lambda depth3, n=n: emit(depth3, "net", self.net_attrs(n)) for n in ports]
                    nic = lambda depth2: emit(depth2, "nic", [], nets)
                    emit(depth, "pci", pci_attrs(dev, NIC_CLASS, "0x15b3"), [nic])
            return write

        def cpu_node(cpu: Device):
            attrs: list[tuple[str, object]] = [("numaid", cpu.numa if cpu.numa is not None else cpu.index)]
            extra = self.cpu_attrs(cpu)
            if "affinity" in extra:
                attrs.append(("affinity", extra.pop("affinity")))
            attrs += list(extra.items())
            kids = [node(c) for c in sorted(children.get(cpu.id, []), key=lambda c: _busid_key(busid[c]))
                    if not self._grouped_away(c, busid, synthetic, parent)]
            return lambda depth: emit(depth, "cpu", attrs, kids)

        cpus = self.of_kind(DeviceKind.CPU)
        numaids = [c.numa if c.numa is not None else c.index for c in cpus]
        if None in numaids or len(set(numaids)) != len(numaids):
            raise self.error("every CPU needs a distinct NUMA node (numa or index) to be written in NCCL XML")
        system_attrs: list[tuple[str, object]] = [("version", 1)]
        if re.fullmatch(r"[\w.+-]+", self.t.name):
            system_attrs.append(("name", self.t.name))
        emit(0, "system", system_attrs, [cpu_node(c) for c in cpus])
        return "\n".join(out) + "\n"

    def net_attrs(self, nic: Device) -> list[tuple[str, object]]:
        names = self.meta.get("nic_names")
        name = names.get(nic.id) if isinstance(names, Mapping) else None
        return [("name", name or f"mlx5_{nic.index}"), ("dev", nic.index), ("speed", self.nic_speed(nic)),
                ("port", 1), ("latency", "0.000000"), ("guid", f"0x{nic.index + 1:x}"), ("maxconn", 131072),
                ("gdr", 1)]

    def _ports(self, nic: Device, busid, synthetic, parent) -> list[Device]:
        """The NICs written in ``nic``'s <pci>: those sharing its real bus id and parent."""
        if nic.id in synthetic:
            return [nic]
        return [n for n in self.of_kind(DeviceKind.NIC)
                if n.id not in synthetic and busid[n.id] == busid[nic.id] and parent[n.id] == parent[nic.id]]

    def _grouped_away(self, dev: str, busid, synthetic, parent) -> bool:
        """True for the second and later ports of a multi-port NIC (written with the first)."""
        d = self.devs[dev]
        if d.kind is not DeviceKind.NIC:
            return False
        return self._ports(d, busid, synthetic, parent)[0].id != dev


def dump_nccl_xml(
    topology: Topology,
    *,
    host: int | None = None,
    sm: int | Mapping[str, int] | None = None,
    nic_bandwidth: float | Mapping[str, float] | None = None,
    cpu_attributes: Mapping[str, object] | None = None,
) -> str:
    """The NCCL topology XML of one node of ``topology``.

    ``host`` picks the node of a multi-host topology (required then). ``sm`` sets the
    GPUs' compute capability (default: ``meta["gpu_sm"]``, else guessed from the GPU's
    NVLink count: 4 -> 60, 6 -> 70, 12 -> 80, more -> 90, none -> 80). ``nic_bandwidth``
    (B/s) defaults to the NIC's network link, else ``meta["nic_bandwidth"]``, else a
    built-in machine's ``meta["params"]["nic_gbps"]``, else 100 Gb/s.
    ``cpu_attributes`` (arch, vendor, familyid, modelid, affinity) default to
    ``meta["nccl_cpu"]``, else :data:`DEFAULT_CPU_ATTRIBUTES`.
    """
    return _XmlWriter(topology, host, sm, nic_bandwidth, cpu_attributes).text()


def write_nccl_xml(topology: Topology, path: str | os.PathLike | None = None, **options) -> str:
    """Write :func:`dump_nccl_xml` to ``path`` (nothing is written on failure); returns the text.

    Without ``path`` only the text is returned.
    """
    if path is None:
        return dump_nccl_xml(topology, **options)
    path = Path(path)
    try:
        text = dump_nccl_xml(topology, **options)
    except TopologyError as e:
        raise TopologyError(e.problem, source=str(path), place=e.place) from None
    write_output(path, text, TopologyError)
    return text
