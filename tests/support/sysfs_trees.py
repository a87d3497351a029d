"""Synthetic sysfs ``devices/system`` trees (CPUs with their socket, core and L3, NUMA
nodes): what :func:`arborcc.topology.cpus.read_cpu_layout` reads, for machines these
tests do not run on (two sockets, hardware threads, CCXs)."""

from __future__ import annotations

from pathlib import Path

#: two sockets of two cores with two hardware threads each, Linux's numbering: CPUs 0-3
#: are the first threads (0, 1 socket 0; 2, 3 socket 1), 4-7 their siblings
TWO_SOCKETS = {cpu: {"socket": (cpu % 4) // 2, "core": cpu % 2} for cpu in range(8)}
SOCKET_CPUS = {0: "0-1,4-5", 1: "2-3,6-7"}


def write_sysfs(root: Path, cpus: dict = TWO_SOCKETS, *, nodes: dict | None = SOCKET_CPUS,
                l3: dict | None = SOCKET_CPUS, online: str | None = "0-7") -> Path:
    """A sysfs ``devices/system`` tree: per CPU its socket, core and L3 (index3, with an L1
    index0 beside it); NUMA node n holding ``nodes[n]``."""
    cpu_root = root / "cpu"
    cpu_root.mkdir(parents=True)
    if online is not None:
        (cpu_root / "online").write_text(online + "\n")
    for cpu, where in cpus.items():
        d = cpu_root / f"cpu{cpu}"
        (d / "topology").mkdir(parents=True)
        (d / "topology" / "physical_package_id").write_text(f"{where['socket']}\n")
        (d / "topology" / "core_id").write_text(f"{where['core']}\n")
        l1 = d / "cache" / "index0"
        l1.mkdir(parents=True)
        for name, value in (("level", "1"), ("type", "Data"), ("size", "48K"), ("shared_cpu_list", str(cpu))):
            (l1 / name).write_text(value + "\n")
        if l3 is not None:
            index3 = d / "cache" / "index3"
            index3.mkdir()
            shared = next(v for v in l3.values() if cpu in cpu_ids(v))
            for name, value in (("level", "3"), ("type", "Unified"), ("size", "32768K"), ("shared_cpu_list", shared)):
                (index3 / name).write_text(value + "\n")
    if nodes is not None:
        for n, listed in nodes.items():
            (root / "node" / f"node{n}").mkdir(parents=True)
            (root / "node" / f"node{n}" / "cpulist").write_text(listed + "\n")
    return root


def write_sockets(root: Path, sockets: list[list[int]], threads: int = 1) -> Path:
    """A tree of ``len(sockets)`` sockets, socket s holding the CPUs ``sockets[s]`` (one L3
    and one NUMA node per socket); with ``threads`` > 1 consecutive CPUs of a socket are
    hardware threads of one core."""
    cpus = {cpu: {"socket": s, "core": i // threads} for s, ids in enumerate(sockets) for i, cpu in enumerate(ids)}
    per_socket = {s: ",".join(map(str, ids)) for s, ids in enumerate(sockets)}
    return write_sysfs(root, cpus, nodes=per_socket, l3=per_socket, online=",".join(map(str, sorted(cpus))))


def cpu_ids(listed: str) -> set[int]:
    """The CPUs of a Linux CPU list (``0-1,4-5``)."""
    out = set()
    for part in listed.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out
