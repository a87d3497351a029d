"""CPU-only jobs: the topology of processes on CPU cores, read from Linux sysfs.

A CPU host is its NUMA nodes (``/sys/devices/system/node/node*/cpulist``; one node
holding every online CPU when the kernel exposes none), the CPUs the job's ranks run
on, and how fast it reaches the network (``/sys/class/net/*/speed`` of the interfaces
that are up, loopback excluded). :func:`read_cpu_host` reads one host;
:func:`cpu_topology` joins any number of them into a :class:`Topology`:

- per NUMA node a ``cpu`` device ``n{h}.cpu{k}`` (index and numa ``k``), nodes joined by
  ``inter_socket`` links;
- per rank a ``core`` device ``rank{r}`` (``r`` the rank; ``index`` the Linux CPU it
  runs on, ``numa`` its node) joined to its node by a ``memory`` link;
- with more than one host, per host a ``nic`` device ``n{h}.nic0`` on node 0 (PCIe)
  and one ``net_switch`` ``switch0`` that every NIC links to (``network`` links).

Rank ``j`` of a host runs on the ``j``-th CPU the process may use (its affinity), the
placement arborcc's shared-memory runtime pins ranks to; with more ranks than CPUs the
ranks wrap around.

Bandwidths the files do not give are parameters with defaults (bytes/s):
``memory_bandwidth`` (one core's copy bandwidth), ``inter_socket_bandwidth``
(:data:`arborcc.topology.defaults.INTER_SOCKET`), the NIC speed when sysfs has none
(:data:`arborcc.topology.defaults.NIC_BANDWIDTH`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from arborcc.errors import TopologyError
from arborcc.topology import defaults
from arborcc.topology.detect import NUMA_ROOT, detect_numa_nodes
from arborcc.topology.model import GB, Device, DeviceKind, LinkKind, Topology, TopologyBuilder
from arborcc.topology.nvidia_smi import parse_cpu_list

NET_ROOT = "/sys/class/net"
ONLINE_CPUS = "/sys/devices/system/cpu/online"

#: one core's memory-copy bandwidth when not measured (bytes/s): a DDR4 server core
MEMORY_BANDWIDTH = 10 * GB


@dataclass(frozen=True)
class CpuHost:
    """What a topology needs to know of one host: its NUMA nodes, the ranks it runs and
    on which CPUs, and its network speed. Plain data, so ranks can exchange it."""

    name: str
    numa: tuple[tuple[int, tuple[int, ...]], ...]  #: (node id, its CPUs), by node id
    ranks: tuple[int, ...]  #: the job's ranks on this host
    cpus: tuple[int, ...]  #: the CPU each of those ranks runs on
    nic_bandwidth: float | None = None  #: bytes/s per direction; None: unknown

    def to_dict(self) -> dict:
        return {"name": self.name, "numa": [[n, list(c)] for n, c in self.numa], "ranks": list(self.ranks),
                "cpus": list(self.cpus), "nic_bandwidth": self.nic_bandwidth}

    @classmethod
    def from_dict(cls, d: dict) -> "CpuHost":
        return cls(d["name"], tuple((int(n), tuple(c)) for n, c in d["numa"]), tuple(d["ranks"]), tuple(d["cpus"]),
                   d.get("nic_bandwidth"))

    def node_of(self, cpu: int) -> int:
        for node, cpus in self.numa:
            if cpu in cpus:
                return node
        return self.numa[0][0]


def _online_cpus(path: str) -> tuple[int, ...]:
    try:
        return tuple(sorted(parse_cpu_list(Path(path).read_text())))
    except (OSError, ValueError):
        return tuple(range(os.cpu_count() or 1))


def read_numa(node_root: str | os.PathLike = NUMA_ROOT, online: str = ONLINE_CPUS) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """The NUMA nodes and their CPUs; one node 0 with every online CPU when sysfs has no
    NUMA directory (as in some containers)."""
    try:
        nodes = detect_numa_nodes(node_root)
    except TopologyError:
        return ((0, _online_cpus(online)),)
    with_cpus = tuple((n.id, n.cpus) for n in nodes if n.cpus)
    return with_cpus or ((0, _online_cpus(online)),)


def read_nic_bandwidth(net_root: str | os.PathLike = NET_ROOT) -> float | None:
    """The fastest network interface that is up (bytes/s), or None when sysfs gives no
    speed (loopback only, virtual interfaces)."""
    base = Path(net_root)
    best = None
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return None
    for entry in entries:
        if entry.name == "lo":
            continue
        try:
            if (entry / "operstate").read_text().strip() != "up":
                continue
            mbits = int((entry / "speed").read_text().strip())
        except (OSError, ValueError):
            continue
        if mbits > 0:
            bw = mbits * 1e6 / 8
            best = bw if best is None else max(best, bw)
    return best


def read_cpu_host(ranks: Sequence[int], name: str = "localhost", cpus: Sequence[int] | None = None,
                  node_root: str | os.PathLike = NUMA_ROOT, net_root: str | os.PathLike = NET_ROOT) -> CpuHost:
    """This host as :class:`CpuHost`: ``ranks`` run on the CPUs this process may use
    (``cpus``, default its affinity), in order, wrapping around."""
    if not ranks:
        raise TopologyError("a host runs at least one rank", source=name)
    allowed = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
    placed = tuple(allowed[j % len(allowed)] for j in range(len(ranks)))
    return CpuHost(name, read_numa(node_root), tuple(ranks), placed, read_nic_bandwidth(net_root))


def cpu_topology(hosts: Sequence[CpuHost], name: str | None = None, memory_bandwidth: float = MEMORY_BANDWIDTH,
                 inter_socket_bandwidth: float = defaults.INTER_SOCKET) -> Topology:
    """The topology of ``hosts`` (see the module docstring); ranks are the union of the
    hosts' ranks, which must be 0..n-1, in rank order."""
    if not hosts:
        raise TopologyError("no host", source=name or "cpu topology")
    name = name or (f"{len(hosts)}x{hosts[0].name}" if len(hosts) > 1 else hosts[0].name)
    b = TopologyBuilder(name, source=name, meta={"format": "sysfs", "hosts": [h.name for h in hosts]})
    multi = len(hosts) > 1
    all_ranks: list[int] = []
    if multi:
        b.add_device(Device("switch0", DeviceKind.NET_SWITCH, None, 0))
    for h, host in enumerate(hosts):
        prefix = f"n{h}." if multi else ""
        nodes = [n for n, _ in host.numa]
        for n in nodes:
            b.add_device(Device(f"{prefix}cpu{n}", DeviceKind.CPU, h, n, n))
        for i, a in enumerate(nodes):
            for c in nodes[i + 1:]:
                b.connect(f"{prefix}cpu{a}", f"{prefix}cpu{c}", LinkKind.INTER_SOCKET, inter_socket_bandwidth,
                          defaults.LATENCY[LinkKind.INTER_SOCKET])
        if len(host.ranks) != len(host.cpus):
            raise TopologyError(f"{len(host.ranks)} ranks but {len(host.cpus)} CPUs", source=host.name)
        for r, cpu in zip(host.ranks, host.cpus):
            node = host.node_of(cpu)
            b.add_device(Device(f"rank{r}", DeviceKind.CORE, h, cpu, node))
            b.connect(f"rank{r}", f"{prefix}cpu{node}", LinkKind.MEMORY, memory_bandwidth,
                      defaults.LATENCY[LinkKind.MEMORY])
            all_ranks.append(r)
        if multi:
            nic = b.add_device(Device(f"{prefix}nic0", DeviceKind.NIC, h, 0, nodes[0])).id
            nic_bw = host.nic_bandwidth or defaults.NIC_BANDWIDTH
            b.connect(nic, f"{prefix}cpu{nodes[0]}", LinkKind.PCIE, defaults.PCIE_X16[3],
                      defaults.LATENCY[LinkKind.PCIE])
            b.connect(nic, "switch0", LinkKind.NETWORK, nic_bw, defaults.LATENCY[LinkKind.NETWORK])
    if sorted(all_ranks) != list(range(len(all_ranks))):
        raise TopologyError(f"the hosts' ranks {sorted(all_ranks)} are not 0..{len(all_ranks) - 1}", source=name)
    return b.build(ranks=[f"rank{r}" for r in range(len(all_ranks))])


def detect_cpu_topology(ranks: int) -> Topology:
    """This machine running ``ranks`` ranks, as :func:`cpu_topology` of one host."""
    return cpu_topology([read_cpu_host(range(ranks), os.uname().nodename)])
