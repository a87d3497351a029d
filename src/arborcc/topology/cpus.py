"""This machine's CPUs as the shared-memory runtime sees them: sockets, NUMA nodes,
last-level-cache (L3) domains and physical cores, read from Linux sysfs.

:func:`read_cpu_layout` reads ``<root>/cpu`` (``online``; per CPU
``topology/physical_package_id``, ``topology/core_id`` and the cache index of the highest
level, normally ``cache/index3``, its ``shared_cpu_list``) and ``<root>/node`` (NUMA
nodes, :func:`arborcc.topology.detect.detect_numa_nodes`) under ``root``, by default
``/sys/devices/system``; a test passes a directory it wrote. What a container hides is
filled in plainly and said so in :attr:`CpuLayout.missing`: no package id - socket 0; no
core id - every CPU a core of its own; no cache directory - no cache domains; no NUMA
directory - one node holding every CPU. A file that is there but unreadable (a CPU list
that is not one) is an error naming the file.

:func:`placement_order` is the order in which ranks take the CPUs a job may use: the first
hardware thread of every core before any second one and, within that, socket by socket
and cache domain by cache domain (so consecutive ranks share a socket and an L3, as MPI
launchers fill a socket first: 8 ranks on 2 sockets of 4 cores put ranks 0-3 on socket 0).
:func:`pinned_cpu` is rank ``r``'s CPU in that order, modulo the CPUs' count - where
:func:`arborcc.runtime.communicator.pin_to_cpu` pins it. :func:`rank_placement` answers
which ranks then share a cache domain, a socket, a NUMA node or a core, and
:func:`rank_groups` the groups the runtime's plan reduces within first (a hierarchical
all-reduce, :mod:`arborcc.runtime.plan`) when the ranks span more than one socket or L3.
:func:`job_layout` is the layout a communicator reads at its creation (``ARBORCC_SYSFS_ROOT``
names another tree).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from arborcc.errors import InputError, TopologyError
from arborcc.topology.detect import detect_numa_nodes
from arborcc.topology.nvidia_smi import parse_cpu_list

SYSTEM_ROOT = "/sys/devices/system"


@dataclass(frozen=True)
class Cpu:
    """One logical CPU (a hardware thread) and where it sits."""

    id: int
    socket: int  #: ``physical_package_id``
    core: int  #: ``core_id`` (unique within its socket)
    numa: int  #: its NUMA node
    cache: int | None  #: its last-level-cache domain (the lowest CPU id sharing it); None: unknown


@dataclass(frozen=True)
class CpuLayout:
    """The online CPUs of one machine, by id, and the size and level of the last-level cache."""

    cpus: tuple[Cpu, ...]
    cache_level: int | None = None  #: 3 for an L3; None: no cache information
    cache_bytes: int | None = None  #: one domain's size
    missing: tuple[str, ...] = field(default=())  #: what sysfs did not give (and what was assumed)

    def cpu(self, cpu_id: int) -> Cpu:
        for c in self.cpus:
            if c.id == cpu_id:
                return c
        raise KeyError(cpu_id)

    def _groups(self, key) -> dict[int, tuple[int, ...]]:
        groups: dict[int, list[int]] = {}
        for c in self.cpus:
            k = key(c)
            if k is not None:
                groups.setdefault(k, []).append(c.id)
        return {k: tuple(v) for k, v in sorted(groups.items())}

    @property
    def sockets(self) -> dict[int, tuple[int, ...]]:
        """Socket id -> its CPUs."""
        return self._groups(lambda c: c.socket)

    @property
    def numa_nodes(self) -> dict[int, tuple[int, ...]]:
        """NUMA node id -> its (online) CPUs."""
        return self._groups(lambda c: c.numa)

    @property
    def cache_domains(self) -> dict[int, tuple[int, ...]]:
        """Last-level-cache domain (its lowest CPU id) -> the CPUs sharing it; empty when unknown."""
        return self._groups(lambda c: c.cache)

    @property
    def domains(self) -> dict[tuple[int, int], tuple[int, ...]]:
        """(socket, last-level-cache domain or -1 when unknown) -> its CPUs: the groups a
        hierarchical all-reduce reduces within first (:func:`rank_groups`)."""
        groups: dict[tuple[int, int], list[int]] = {}
        for c in self.cpus:
            groups.setdefault(domain_key(c), []).append(c.id)
        return {k: tuple(v) for k, v in sorted(groups.items())}

    @property
    def cores(self) -> dict[tuple[int, int], tuple[int, ...]]:
        """(socket, core id) -> the hardware threads of that physical core."""
        groups: dict[tuple[int, int], list[int]] = {}
        for c in self.cpus:
            groups.setdefault((c.socket, c.core), []).append(c.id)
        return {k: tuple(v) for k, v in sorted(groups.items())}

    def to_dict(self) -> dict:
        return {"cpus": len(self.cpus), "cores": len(self.cores), "sockets": _listed(self.sockets),
                "numa_nodes": _listed(self.numa_nodes), "cache_level": self.cache_level,
                "cache_bytes": self.cache_bytes, "cache_domains": _listed(self.cache_domains),
                "missing": list(self.missing)}


def domain_key(cpu: Cpu) -> tuple[int, int]:
    """The domain of a CPU: its socket and last-level-cache domain (-1: unknown)."""
    return cpu.socket, -1 if cpu.cache is None else cpu.cache


def _listed(groups: dict) -> list[dict]:
    return [{"id": k, "cpus": format_cpu_list(v)} for k, v in groups.items()]


def format_cpu_list(cpus: Iterable[int]) -> str:
    """CPU ids as Linux writes them: ``0-3,8,10-11``."""
    ids = sorted(set(cpus))
    parts = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


#: the most a sysfs attribute holds (a page; larger is not one, and is not read further)
MAX_ATTRIBUTE_BYTES = 4096


def _read(path: Path) -> str | None:
    """The file's text, or None when it is not there (a container may hide it); a file
    that is not a regular one (a FIFO would block the read) or longer than a sysfs
    attribute is an error naming it."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise TopologyError("not a regular file", source=str(path))
        with open(path, "rb") as f:
            data = f.read(MAX_ATTRIBUTE_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise TopologyError(f"cannot read: {e.strerror or e}", source=str(path)) from None
    if len(data) > MAX_ATTRIBUTE_BYTES:
        raise TopologyError(f"longer than a sysfs attribute ({MAX_ATTRIBUTE_BYTES} bytes)", source=str(path))
    return data.decode("utf-8", "replace")


def _cpu_list(path: Path) -> frozenset[int] | None:
    text = _read(path)
    if text is None:
        return None
    try:
        return parse_cpu_list(text)
    except ValueError as e:
        raise TopologyError(f"not a CPU list: {e}", source=str(path)) from None


def _number(path: Path) -> int | None:
    text = _read(path)
    if text is None:
        return None
    value = text.strip()
    if not re.fullmatch(r"-?\d+", value):
        raise TopologyError(f"not a number: {value[:40]!r}", source=str(path))
    return int(value)


def _cache_bytes(path: Path) -> int | None:
    """``32768K`` -> bytes (sysfs writes cache sizes in K or M)."""
    text = _read(path)
    if text is None:
        return None
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip())
    if not m:
        raise TopologyError(f"not a cache size: {text.strip()[:40]!r}", source=str(path))
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def _online(cpu_root: Path) -> tuple[int, ...]:
    listed = _cpu_list(cpu_root / "online")
    if listed is not None:
        if not listed:
            raise TopologyError("lists no CPU", source=str(cpu_root / "online"))
        return tuple(sorted(listed))
    try:
        found = sorted(int(m.group(1)) for e in cpu_root.iterdir() if (m := re.fullmatch(r"cpu(\d+)", e.name)))
    except OSError as e:
        raise TopologyError(f"cannot list CPUs: {e.strerror or e}", source=str(cpu_root)) from None
    if not found:
        raise TopologyError("no CPU (neither an online file nor cpu* directories)", source=str(cpu_root))
    return tuple(found)


def _last_level_cache(cpu_dir: Path) -> tuple[int, frozenset[int], int | None] | None:
    """(level, the CPUs sharing it, its size) of the highest-level data or unified cache."""
    best = None
    try:
        indexes = sorted(e for e in (cpu_dir / "cache").iterdir() if re.fullmatch(r"index\d+", e.name))
    except OSError:
        return None
    for index in indexes:
        if (_read(index / "type") or "").strip() == "Instruction":
            continue
        level = _number(index / "level")
        shared = _cpu_list(index / "shared_cpu_list")
        if level is None or shared is None:
            continue
        if best is None or level > best[0]:
            best = (level, shared, _cache_bytes(index / "size"))
    return best


def read_cpu_layout(root: str | os.PathLike = SYSTEM_ROOT) -> CpuLayout:
    """The online CPUs under ``root`` (see the module docstring); TopologyError naming the
    file when one is there but unreadable."""
    base = Path(root)
    cpu_root = base / "cpu"
    if not cpu_root.is_dir():
        raise TopologyError("no CPU information: the directory does not exist", source=str(cpu_root))
    online = _online(cpu_root)
    missing: list[str] = []

    numa_of: dict[int, int] = {}
    if (base / "node").is_dir():
        for node in detect_numa_nodes(base / "node"):
            for c in node.cpus:
                numa_of[c] = node.id
    else:
        missing.append("NUMA nodes (no node directory: one node 0)")

    cpus = []
    caches: dict[int, tuple[int, frozenset[int], int | None]] = {}
    no_socket = no_core = 0
    for cpu_id in online:
        d = cpu_root / f"cpu{cpu_id}"
        socket = _number(d / "topology" / "physical_package_id")
        core = _number(d / "topology" / "core_id")
        no_socket += socket is None
        no_core += core is None
        cache = _last_level_cache(d)
        if cache is not None:
            caches[cpu_id] = cache
        cpus.append((cpu_id, 0 if socket is None or socket < 0 else socket, cpu_id if core is None else core))
    if no_socket:
        missing.append(f"sockets ({no_socket} CPUs without physical_package_id: socket 0)")
    if no_core:
        missing.append(f"cores ({no_core} CPUs without core_id: a core each)")
    level = max((c[0] for c in caches.values()), default=None)
    domain_of: dict[int, int] = {}
    size = None
    for cpu_id, (lvl, shared, nbytes) in caches.items():
        if lvl == level:
            domain_of[cpu_id] = min(shared | {cpu_id})
            size = size or nbytes
    if len(domain_of) < len(online):
        missing.append(f"cache domains ({len(online) - len(domain_of)} CPUs without cache information)")
    return CpuLayout(tuple(Cpu(i, s, k, numa_of.get(i, 0), domain_of.get(i)) for i, s, k in cpus), level, size,
                     tuple(missing))


# -- where a communicator's ranks run -----------------------------------------------------

def placement_order(layout: CpuLayout | None, allowed: Iterable[int]) -> tuple[int, ...]:
    """``allowed`` in the order ranks take them (see the module docstring): by hardware
    thread (a core's first thread, then its second, ...), then socket, last-level-cache
    domain, core and id. Without a layout, or with allowed CPUs the layout does not list
    (sysfs hid them), in id order."""
    cpus = sorted(set(allowed))
    if layout is None:
        return tuple(cpus)
    by_id = {c.id: c for c in layout.cpus}
    if any(c not in by_id for c in cpus):
        return tuple(cpus)
    thread = {cpu: i for siblings in layout.cores.values() for i, cpu in enumerate(siblings)}

    def key(cpu: int) -> tuple:
        c = by_id[cpu]
        return thread[cpu], c.socket, -1 if c.cache is None else c.cache, c.core, cpu

    return tuple(sorted(cpus, key=key))


def pinned_cpu(rank: int, allowed: Sequence[int], layout: CpuLayout | None = None) -> int:
    """The CPU rank ``rank`` runs on when pinned: the ``rank``-th allowed CPU in
    :func:`placement_order` (id order without a layout) modulo their count, as
    :func:`arborcc.runtime.communicator.pin_to_cpu` pins."""
    cpus = placement_order(layout, allowed)
    if not cpus:
        raise TopologyError("no CPU to run on", source="CPU affinity")
    return cpus[rank % len(cpus)]


@dataclass(frozen=True)
class RankPlacement:
    """Where each rank of a communicator runs, and which ranks share what."""

    cpu_of_rank: tuple[int, ...]
    cache_groups: tuple[tuple[int, ...], ...]  #: ranks by last-level-cache domain (empty: unknown)
    socket_groups: tuple[tuple[int, ...], ...]  #: ranks by socket
    numa_groups: tuple[tuple[int, ...], ...]  #: ranks by NUMA node
    core_groups: tuple[tuple[int, ...], ...]  #: ranks by physical core (several: hardware threads or a shared CPU)

    def shares_cache(self, a: int, b: int) -> bool:
        return any(a in g and b in g for g in self.cache_groups)

    def shares_socket(self, a: int, b: int) -> bool:
        return any(a in g and b in g for g in self.socket_groups)


def _ranks_by(world_size: int, key) -> tuple[tuple[int, ...], ...]:
    groups: dict = {}
    for r in range(world_size):
        k = key(r)
        if k is not None:
            groups.setdefault(k, []).append(r)
    return tuple(tuple(v) for _, v in sorted(groups.items()))


def rank_placement(layout: CpuLayout, world_size: int, allowed: Sequence[int] | None = None) -> RankPlacement:
    """The placement of ``world_size`` ranks pinned rank ``r`` -> :func:`pinned_cpu` over
    ``allowed`` (default: every CPU of ``layout``) in the layout's order, and the groups of ranks that share a
    last-level cache, a socket, a NUMA node and a physical core."""
    if world_size < 1:
        raise TopologyError(f"a communicator has at least one rank, got {world_size}", source="world size")
    known = {c.id for c in layout.cpus}
    allowed = sorted(known if allowed is None else allowed)
    strangers = [c for c in allowed if c not in known]
    if strangers:
        raise TopologyError(f"CPUs {format_cpu_list(strangers)} are not online CPUs of the layout "
                            f"({format_cpu_list(known)})", source="CPU affinity")
    cpu_of = tuple(pinned_cpu(r, allowed, layout) for r in range(world_size))

    def by(attr):
        return _ranks_by(world_size, lambda r: getattr(layout.cpu(cpu_of[r]), attr))

    return RankPlacement(cpu_of, by("cache"), by("socket"), by("numa"),
                         _ranks_by(world_size, lambda r: (layout.cpu(cpu_of[r]).socket, layout.cpu(cpu_of[r]).core)))


def this_machine_placement(world_size: int, root: str | os.PathLike = SYSTEM_ROOT) -> RankPlacement:
    """:func:`rank_placement` of this machine's layout over this process's CPU affinity.
    (The runtime pins only when that affinity is not restricted; under ``taskset`` or a
    cpuset its ranks float over these CPUs, and this is where pinning would put them.)"""
    return rank_placement(read_cpu_layout(root), world_size, sorted(os.sched_getaffinity(0)))


def rank_groups(layout: CpuLayout, cpu_of_rank: Sequence[int]) -> tuple[tuple[int, ...], ...] | None:
    """The ranks by domain (:attr:`CpuLayout.domains`: socket and last-level cache), each
    group in rank order, the groups in the domains' order, when rank ``r`` runs on
    ``cpu_of_rank[r]``; None when a rank's CPU is not known (-1: it floats over several)
    or not a CPU of the layout."""
    by_id = {c.id: c for c in layout.cpus}
    if any(cpu not in by_id for cpu in cpu_of_rank):
        return None
    return _ranks_by(len(cpu_of_rank), lambda r: domain_key(by_id[cpu_of_rank[r]]))


def job_layout(root: str | os.PathLike | None = None, source: str = "$ARBORCC_SYSFS_ROOT") -> CpuLayout | None:
    """The layout a communicator places its ranks by and plans with. ``root`` None or
    empty: this machine's sysfs, or None when it cannot be read (a container may hide it;
    the ranks are then pinned in CPU id order and every all-reduce runs flat). A root
    given (``ARBORCC_SYSFS_ROOT``) must be readable: InputError naming ``source`` and the
    file otherwise."""
    if not root:
        try:
            return read_cpu_layout(SYSTEM_ROOT)
        except (TopologyError, OSError):
            return None
    try:
        return read_cpu_layout(root)
    except TopologyError as e:
        raise InputError(f"{e.source}: {e.problem}", source=source) from None
