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

:func:`rank_placement` answers what a plan would use: which ranks share a cache domain,
a socket, a NUMA node or a core, when rank ``r`` runs on the ``r``-th allowed CPU modulo
their count - the placement :func:`arborcc.runtime.communicator.pin_to_cpu` gives.
Nothing chooses algorithms by it yet.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from arborcc.errors import TopologyError
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


def _read(path: Path) -> str | None:
    """The file's text, or None when it is not there (a container may hide it)."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise TopologyError(f"cannot read: {e.strerror or e}", source=str(path)) from None


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

def pinned_cpu(rank: int, allowed: Sequence[int]) -> int:
    """The CPU rank ``rank`` runs on when pinned: the ``rank``-th allowed CPU (in id order)
    modulo their count, as :func:`arborcc.runtime.communicator.pin_to_cpu` pins."""
    cpus = sorted(allowed)
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
    ``allowed`` (default: every CPU of ``layout``) and the groups of ranks that share a
    last-level cache, a socket, a NUMA node and a physical core."""
    if world_size < 1:
        raise TopologyError(f"a communicator has at least one rank, got {world_size}", source="world size")
    known = {c.id for c in layout.cpus}
    allowed = sorted(known if allowed is None else allowed)
    strangers = [c for c in allowed if c not in known]
    if strangers:
        raise TopologyError(f"CPUs {format_cpu_list(strangers)} are not online CPUs of the layout "
                            f"({format_cpu_list(known)})", source="CPU affinity")
    cpu_of = tuple(pinned_cpu(r, allowed) for r in range(world_size))

    def by(attr):
        return _ranks_by(world_size, lambda r: getattr(layout.cpu(cpu_of[r]), attr))

    return RankPlacement(cpu_of, by("cache"), by("socket"), by("numa"),
                         _ranks_by(world_size, lambda r: (layout.cpu(cpu_of[r]).socket, layout.cpu(cpu_of[r]).core)))


def this_machine_placement(world_size: int, root: str | os.PathLike = SYSTEM_ROOT) -> RankPlacement:
    """:func:`rank_placement` of this machine's layout over this process's CPU affinity.
    (The runtime pins only when that affinity is not restricted; under ``taskset`` or a
    cpuset its ranks float over these CPUs, and this is where pinning would put them.)"""
    return rank_placement(read_cpu_layout(root), world_size, sorted(os.sched_getaffinity(0)))
