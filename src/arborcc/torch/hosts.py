"""Which ranks share a host: the job's topology, found when the backend starts.

Every rank publishes the name of the machine it runs on (``ARBORCC_HOST`` if set, else
the host name and torchrun's node rank ``GROUP_RANK``, so that two torchrun "nodes" on
one machine are two hosts, as a multi-node job on loopback is). The first rank of each
host reads that host from sysfs (:func:`arborcc.topology.sysfs.read_cpu_host`) and
publishes it; every rank joins the hosts into one topology
(:func:`arborcc.topology.sysfs.cpu_topology`). A topology file named by
``ARBORCC_TOPOLOGY`` replaces the detected one; its hosts must agree with where the
ranks really run (shared memory cannot cross machines).

The layout is what the backend runs on: ranks on one host share a shared-memory
communicator; ranks with the same position on their hosts form the inter-host groups.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, replace

from arborcc.errors import InputError

KEY = "arborcc/hosts"


@dataclass(frozen=True)
class HostLayout:
    """The hosts of a job: ``hosts[h]`` is the ranks of host ``h``, in rank order."""

    hosts: tuple[tuple[int, ...], ...]
    colocated: int = 1  #: ranks of the job on this rank's physical machine (hosts may share one, as on loopback)

    def host_of(self, rank: int) -> int:
        return next(h for h, ranks in enumerate(self.hosts) if rank in ranks)

    @property
    def uniform(self) -> bool:
        """Every host runs the same number of ranks."""
        return len({len(r) for r in self.hosts}) == 1

    def peers(self, rank: int) -> tuple[int, ...]:
        """The ranks at ``rank``'s position on every host that has one (an inter-host group)."""
        i = self.hosts[self.host_of(rank)].index(rank)
        return tuple(ranks[i] for ranks in self.hosts if i < len(ranks))


def machine_name(env: dict | None = None) -> str:
    """The name this rank's machine is known by (see the module docstring)."""
    from arborcc.runtime.environment import runtime_settings

    settings = runtime_settings(env)
    if settings.host:
        return settings.host
    node = settings.group_rank
    return socket.gethostname() + (f"/node{node}" if node else "")


def layout_of_topology(topo) -> HostLayout:
    """The hosts of a topology's ranks (by each rank device's host), in order of first rank."""
    hosts: dict[object, list[int]] = {}
    for r, dev in enumerate(topo.ranks):
        hosts.setdefault(topo.devices[dev].host, []).append(r)
    return HostLayout(tuple(tuple(v) for v in hosts.values()))


def exchange_layout(store, rank: int, size: int, env: dict | None = None):
    """Every rank's host through ``store``; the job's topology and its :class:`HostLayout`."""
    from arborcc.topology.sysfs import CpuHost, cpu_topology, read_cpu_host

    from arborcc.runtime.environment import runtime_settings

    name = machine_name(env)
    store.set(f"{KEY}/name/{rank}", f"{socket.gethostname()}\n{name}".encode())
    machines, names = zip(*(bytes(store.get(f"{KEY}/name/{r}")).decode().split("\n", 1) for r in range(size)))
    colocated = machines.count(machines[rank])
    by_name: dict[str, list[int]] = {}
    for r, n in enumerate(names):
        by_name.setdefault(n, []).append(r)
    groups = list(by_name.values())
    mine = groups.index(by_name[name])
    if by_name[name][0] == rank:
        host = read_cpu_host(by_name[name], name)
        store.set(f"{KEY}/host/{mine}", json.dumps(host.to_dict()).encode())
    hosts = [CpuHost.from_dict(json.loads(bytes(store.get(f"{KEY}/host/{h}")))) for h in range(len(groups))]
    path = runtime_settings(env).topology
    if path:
        from arborcc.topology.readers import read_topology

        topo = read_topology(path)
        if topo.num_ranks != size:
            raise InputError(f"has {topo.num_ranks} ranks, the job {size}", source=path)
        layout = layout_of_topology(topo)
        for ranks in layout.hosts:
            if len({names[r] for r in ranks}) > 1:
                raise InputError(f"puts ranks {list(ranks)} on one host, but they run on "
                                 f"{', '.join(sorted({names[r] for r in ranks}))}", source=path)
        return topo, replace(layout, colocated=colocated)
    topo = cpu_topology(hosts)
    return topo, replace(layout_of_topology(topo), colocated=colocated)
