"""The topology model: devices, directed links, hosts and ranks.

A :class:`Topology` is immutable once built. Everything that makes one (built-in
machines, file readers, live detection, allocations) goes through
:class:`TopologyBuilder`, which is the single place where a topology is validated, so
every reader reports bad input the same way (``source:place: problem``).

Units are SI inside: bandwidth in bytes/s per direction, latency in seconds. A
physical full-duplex link is two directed :class:`Link` objects. ``Link.count`` is the
number of bonded lanes (NVLinks) and ``Link.bandwidth`` their total.

References:

* BlueConnect: M. Cho, U. Finkler, D. Kung, H. Hunter, "BlueConnect: Decomposing All-Reduce for
  Deep Learning on Heterogeneous Network Hierarchy", MLSys (SysML) 2019, https://proceedings.mlsys.org/
  paper_files/paper/2019/hash/0c8abcf158ed12d0dd94480681186fda-Abstract.html
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

from arborcc.errors import TopologyError
from arborcc.limits import limit
from arborcc.topology.routing import Route, can_route, route

GB = 1e9  #: bytes per GB (decimal, as link bandwidths are quoted)
US = 1e-6  #: seconds per microsecond
#: what a link can be: from 1 kB/s to 1 PB/s per direction, at most a second of latency
MIN_BANDWIDTH, MAX_BANDWIDTH, MAX_LATENCY = 1e3, 1e15, 1.0


class DeviceKind(str, enum.Enum):
    GPU = "gpu"
    CPU = "cpu"  #: a CPU socket / NUMA node (the hub of its memory and PCIe)
    CORE = "core"  #: a CPU core that runs one rank of a CPU-only job
    PCIE_SWITCH = "pcie_switch"
    NVSWITCH = "nvswitch"
    NIC = "nic"
    NET_SWITCH = "net_switch"


class LinkKind(str, enum.Enum):
    NVLINK = "nvlink"
    PCIE = "pcie"
    INTER_SOCKET = "inter_socket"
    MEMORY = "memory"  #: a core's path to its NUMA node's memory (CPU-only jobs)
    NETWORK = "network"
    SWITCH_PORT = "switch_port"  #: a port of a generic hierarchy's switch (BlueConnect Fig. 1)


@dataclass(frozen=True)
class Device:
    """One device. ``host`` is None for devices outside any host (network switches).

    ``index`` is the device's number within its host and kind (GPU 3 is what
    ``nvidia-smi`` calls GPU3); ``pci`` an optional PCI bus id; ``numa`` the NUMA node.
    """

    id: str
    kind: DeviceKind
    host: int | None = 0
    index: int | None = None
    numa: int | None = None
    pci: str | None = None

    @property
    def is_gpu(self) -> bool:
        return self.kind is DeviceKind.GPU

    @property
    def is_nic(self) -> bool:
        return self.kind is DeviceKind.NIC

    @property
    def can_be_rank(self) -> bool:
        """GPUs, and the cores of CPU-only jobs, run ranks."""
        return self.kind is DeviceKind.GPU or self.kind is DeviceKind.CORE


@dataclass(frozen=True)
class Link:
    """A directed link ``src -> dst``: ``count`` bonded lanes, ``bandwidth`` B/s in total."""

    src: str
    dst: str
    kind: LinkKind
    bandwidth: float
    latency: float = 0.0
    count: int = 1



class Topology:
    """An immutable machine (or cluster, or allocation) graph with ordered ranks.

    ``ranks`` are the GPUs of the job in rank order (the cores, for a CPU-only job); by
    default every GPU ordered by (host, index). ``meta`` carries provenance (machine name
    and parameters).
    """

    def __init__(
        self,
        name: str,
        devices: Sequence[Device],
        links: Sequence[Link],
        ranks: Sequence[str],
        meta: Mapping[str, object] | None = None,
    ):
        self.name = name
        self.devices: dict[str, Device] = {d.id: d for d in devices}
        self.links: dict[tuple[str, str], Link] = {(l.src, l.dst): l for l in links}
        self.ranks: tuple[str, ...] = tuple(ranks)
        self.meta: dict[str, object] = dict(meta or {})
        self._out: dict[str, list[Link]] = {d: [] for d in self.devices}
        for l in links:
            self._out[l.src].append(l)

    # --- queries -------------------------------------------------------------------
    @property
    def num_ranks(self) -> int:
        return len(self.ranks)

    @property
    def gpus(self) -> tuple[str, ...]:
        """The GPUs of this topology in rank order (same as ``ranks``)."""
        return self.ranks

    @property
    def hosts(self) -> tuple[int, ...]:
        return tuple(sorted({d.host for d in self.devices.values() if d.host is not None}))

    def rank_of(self, device_id: str) -> int:
        try:
            return self.ranks.index(device_id)
        except ValueError:
            raise TopologyError(f"{device_id} is not a rank of this topology", source=self.name) from None

    def devices_of_kind(self, kind: DeviceKind) -> list[Device]:
        return [d for d in self.devices.values() if d.kind is kind]

    def link(self, src: str, dst: str) -> Link | None:
        return self.links.get((src, dst))

    def out_links(self, device_id: str) -> list[Link]:
        return self._out[device_id]

    def route(self, src: str, dst: str) -> Route:
        """The route of a transfer ``src -> dst`` (:func:`arborcc.topology.routing.route`)."""
        return route(self, src, dst)

    def can_route(self, src: str, dst: str) -> bool:
        """Whether a transfer ``src -> dst`` has a route."""
        return can_route(self, src, dst)

    def with_ranks(self, ranks: Sequence[str]) -> "Topology":
        """The same machine with another rank order (every id must be a GPU)."""
        b = TopologyBuilder(self.name, source=self.name, meta=self.meta)
        for d in self.devices.values():
            b.add_device(d)
        for l in self.links.values():
            b.add_link(l)
        return b.build(ranks=ranks)

    def to_networkx(self):
        """A ``networkx.DiGraph`` with device and link attributes (``capacity`` = bandwidth)."""
        import networkx as nx

        g = nx.DiGraph(name=self.name)
        for d in self.devices.values():
            g.add_node(d.id, kind=d.kind.value, host=d.host)
        for l in self.links.values():
            g.add_edge(l.src, l.dst, kind=l.kind.value, capacity=l.bandwidth, count=l.count, latency=l.latency)
        return g

    def __repr__(self) -> str:
        return f"Topology({self.name!r}, {len(self.ranks)} ranks, {len(self.devices)} devices, {len(self.links)} links)"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Topology):
            return NotImplemented
        return (
            self.devices == other.devices
            and self.links == other.links
            and self.ranks == other.ranks
        )

    __hash__ = None  # type: ignore[assignment]


@dataclass
class TopologyBuilder:
    """Collects devices and links, validating each as it comes; ``build()`` finishes.

    ``source`` names the input in error messages; each ``add_*`` call may pass
    ``place`` (a line number or a path inside the input) to point at the culprit.
    """

    name: str
    source: str | None = None
    meta: Mapping[str, object] | None = None
    _devices: dict[str, Device] = field(default_factory=dict)
    _links: dict[tuple[str, str], Link] = field(default_factory=dict)

    def error(self, problem: str, place: str | int | None = None) -> TopologyError:
        return TopologyError(problem, source=self.source, place=place)

    def add_device(self, device: Device, place: str | int | None = None) -> Device:
        if not device.id or not isinstance(device.id, str):
            raise self.error(f"device id {device.id!r} is not a non-empty string", place)
        if device.id in self._devices:
            raise self.error(f"duplicate device id {device.id}", place)
        self._devices[device.id] = device
        return device

    def has_device(self, device_id: str) -> bool:
        return device_id in self._devices

    def add_link(self, link: Link, place: str | int | None = None, merge: bool = False) -> Link:
        """Add a directed link. With ``merge``, a second link on the same pair adds lanes."""
        what = f"link {link.src}->{link.dst}"
        for end in (link.src, link.dst):
            if end not in self._devices:
                raise self.error(f"{what}: {end} is not defined", place)
        if link.src == link.dst:
            raise self.error(f"{what}: a link cannot join a device to itself", place)
        if not (isinstance(link.count, int) and link.count >= 1):
            raise self.error(f"{what}: count must be an integer >= 1, got {link.count!r}", place)
        if link.count > limit("lanes").value:
            raise self.error(limit("lanes").message(link.count, what), place)
        if not (isinstance(link.bandwidth, (int, float)) and math.isfinite(link.bandwidth) and link.bandwidth > 0):
            raise self.error(f"{what}: bandwidth must be a positive number, got {link.bandwidth!r}", place)
        if not MIN_BANDWIDTH <= link.bandwidth <= MAX_BANDWIDTH:
            raise self.error(f"{what}: {link.bandwidth / GB:g} GB/s is outside what a link can have "
                             f"({MIN_BANDWIDTH / GB:g} to {MAX_BANDWIDTH / GB:g} GB/s)", place)
        if not (isinstance(link.latency, (int, float)) and math.isfinite(link.latency) and link.latency >= 0):
            raise self.error(f"{what}: latency must be a number >= 0, got {link.latency!r}", place)
        if link.latency > MAX_LATENCY:
            raise self.error(f"{what}: a latency of {link.latency:g} s is more than a link can have "
                             f"(at most {MAX_LATENCY:g} s)", place)
        key = (link.src, link.dst)
        if key in self._links:
            old = self._links[key]
            if not merge:
                raise self.error(f"duplicate {what}", place)
            if old.kind is not link.kind:
                raise self.error(f"{what}: declared both as {old.kind.value} and {link.kind.value}", place)
            link = replace(old, bandwidth=min(old.bandwidth + link.bandwidth, MAX_BANDWIDTH),
                           count=old.count + link.count, latency=max(old.latency, link.latency))
        if link.count > limit("lanes").value:
            raise self.error(limit("lanes").message(link.count, what), place)
        self._links[key] = link
        return link

    def connect(self, a: str, b: str, kind: LinkKind, bandwidth: float, latency: float = 0.0,
                count: int = 1, place: str | int | None = None, merge: bool = False) -> None:
        """Add a full-duplex link as two directed links of equal bandwidth."""
        self.add_link(Link(a, b, kind, bandwidth, latency, count), place, merge)
        self.add_link(Link(b, a, kind, bandwidth, latency, count), place, merge)

    def build(self, ranks: Sequence[str] | None = None, place: str | int | None = None) -> Topology:
        if ranks is None:  # every GPU by (host, index); a CPU-only job: every core
            kind = DeviceKind.GPU if any(d.is_gpu for d in self._devices.values()) else DeviceKind.CORE
            ranks = [d.id for d in sorted((d for d in self._devices.values() if d.kind is kind),
                                          key=lambda d: (d.host if d.host is not None else -1,
                                                         d.index if d.index is not None else 1 << 30, d.id))]
        limit("ranks").check(len(ranks), self.source, place, error=TopologyError)
        seen: set[str] = set()
        for r in ranks:
            if r not in self._devices:
                raise self.error(f"rank {r} is not a defined device", place)
            if not self._devices[r].can_be_rank:
                raise self.error(f"rank {r} is a {self._devices[r].kind.value}, not a gpu or core", place)
            if r in seen:
                raise self.error(f"rank {r} is listed twice", place)
            seen.add(r)
        if not ranks:
            raise self.error("the topology has no GPU (and no core)", place)
        return Topology(self.name, list(self._devices.values()), list(self._links.values()), ranks, self.meta)
