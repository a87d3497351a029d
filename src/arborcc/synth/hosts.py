"""The host structure of a job: its ranks grouped by host, each host's NICs and local
topology, and device paths between ranks that scale to thousands of GPUs.

Multi-node strategies (NCCL's rings and trees, Blink's three phases, the hierarchical
and BlueConnect stages, the composed cluster algorithms) all start from which ranks
share a host and where a host's exits to the network are. Rank indices are positions
in ``topology.ranks``.

:class:`Cluster` is the view the cluster-scale strategies use: hosts of equal size, a
rank's position inside its host, and :meth:`Cluster.path` - the device path of a
transfer between two ranks, built from the host-local route (the topology's own
routing rules, on the host's devices only), the NIC with the GPU's index (as
rail-aligned NCCL uses), and the shortest path between the two NICs' switches. Routing
every rank of a 1024-GPU cluster over the whole graph costs seconds per hundred
sources; these pieces cost microseconds each and are cached.
"""

from __future__ import annotations

from collections import deque

from arborcc.errors import SynthesisError, TopologyError
from arborcc.memo import BoundedCache
from arborcc.topology.model import DeviceKind, Topology, TopologyBuilder


def ranks_by_host(topology: Topology) -> dict[int | None, list[int]]:
    """Rank indices per host (``None``: GPUs that belong to no host), hosts in the order
    of their first rank, ranks in rank order."""
    out: dict[int | None, list[int]] = {}
    for i, g in enumerate(topology.ranks):
        out.setdefault(topology.devices[g].host, []).append(i)
    return out


def host_groups(topology: Topology) -> list[list[int]]:
    """Rank indices per host, hosts by id (GPUs that belong to no host first)."""
    groups = ranks_by_host(topology)
    return [groups[h] for h in sorted(groups, key=lambda h: -1 if h is None else h)]


def host_nics(topology: Topology, host: int | None) -> list[str]:
    """The NICs of ``host``, by their index on the host."""
    return sorted((d.id for d in topology.devices.values() if d.kind is DeviceKind.NIC and d.host == host),
                  key=lambda d: (topology.devices[d].index if topology.devices[d].index is not None else 0, d))


def hop_distance(topology: Topology, a: str, b: str) -> tuple[int, float]:
    """``(hops, -bandwidth)`` of the route from device ``a`` to ``b`` (smaller is nearer;
    unroutable pairs are farthest)."""
    if not topology.can_route(a, b):
        return (1 << 30, 0.0)
    r = topology.route(a, b)
    return (r.hops, -r.bandwidth)


def server_topology(topology: Topology, gpus: list[str]) -> Topology:
    """The devices of ``gpus``' host (other GPUs and the network left out), ranks ``gpus``."""
    host = topology.devices[gpus[0]].host
    keep = {d.id for d in topology.devices.values() if d.host == host and (not d.is_gpu or d.id in gpus)}
    b = TopologyBuilder(f"{topology.name}/host{host}", source=topology.name, meta=topology.meta)
    for d in keep:
        b.add_device(topology.devices[d])
    for l in topology.links.values():
        if l.src in keep and l.dst in keep:
            b.add_link(l)
    return b.build(ranks=list(gpus))


class Cluster:
    """A job of ``hosts`` hosts with ``per_host`` ranks each (module doc).

    ``hosts[h]`` lists host h's rank indices in rank order; hosts come in the order of
    their first rank. Raises :class:`SynthesisError` (naming the reason) when the job
    is not such a cluster: fewer than two hosts, a GPU without a host, hosts of
    different sizes, or a host without a NIC.
    """

    def __init__(self, topology: Topology):
        groups = ranks_by_host(topology)
        if None in groups:
            raise SynthesisError(f"{topology.name}: GPU {topology.ranks[groups[None][0]]} belongs to no host")
        if len(groups) < 2:
            raise SynthesisError(f"{topology.name}: all GPUs are in one host")
        sizes = sorted({len(g) for g in groups.values()})
        if len(sizes) != 1:
            raise SynthesisError(f"{topology.name}: hosts hold different numbers of GPUs ({sizes})")
        self.topology = topology
        self.host_ids = list(groups)
        self.hosts = [groups[h] for h in self.host_ids]
        self.per_host = sizes[0]
        self.host_of = [0] * topology.num_ranks
        self.local = [0] * topology.num_ranks
        for h, ranks in enumerate(self.hosts):
            for k, r in enumerate(ranks):
                self.host_of[r], self.local[r] = h, k
        self._local_topologies: dict[int, Topology] = {}
        self._nic: dict[int, str] = {}
        self._switch_paths: dict[tuple[str, str], tuple[str, ...]] = {}
        self._paths: dict[tuple[int, int], tuple[str, ...]] = {}
        #: routes inside a host, by (host, from, to): a large cluster has more hosts than the
        #: topology routing keeps route tables for, so each is asked for once
        self._local_paths: dict[tuple[int, str, str], tuple[str, ...]] = {}
        self._network: dict[str, list[str]] | None = None
        self._downlink: dict[str, str] = {}
        self._host_nics: dict[int | None, list[str]] = {}
        for d in topology.devices.values():
            if d.kind is DeviceKind.NIC:
                self._host_nics.setdefault(d.host, []).append(d.id)
        for nics in self._host_nics.values():
            nics.sort(key=lambda d: (topology.devices[d].index if topology.devices[d].index is not None else 0, d))

    @property
    def num_hosts(self) -> int:
        return len(self.hosts)

    def rank(self, host: int, local: int) -> int:
        return self.hosts[host][local]

    # --- host-local routes ---------------------------------------------------------------
    def local_topology(self, host: int) -> Topology:
        """Host ``host``'s devices and the links among them, its GPUs the ranks."""
        if host not in self._local_topologies:
            if not self._local_topologies:  # group every host's devices and links in one pass
                self._build_local_topologies()
            else:  # pragma: no cover - all are built at once
                raise KeyError(host)
        return self._local_topologies[host]

    def _build_local_topologies(self) -> None:
        t = self.topology
        index = {h: i for i, h in enumerate(self.host_ids)}
        builders = [TopologyBuilder(f"{t.name}/host{h}", source=t.name, meta=t.meta) for h in self.host_ids]
        rank_ids = set(t.ranks)
        for d in t.devices.values():
            if d.host in index and (not d.is_gpu or d.id in rank_ids):
                builders[index[d.host]].add_device(d)
        for l in t.links.values():
            ha, hb = t.devices[l.src].host, t.devices[l.dst].host
            if ha == hb and ha in index and builders[index[ha]].has_device(l.src) \
                    and builders[index[ha]].has_device(l.dst):
                builders[index[ha]].add_link(l)
        for i, b in enumerate(builders):
            self._local_topologies[i] = b.build(ranks=[t.ranks[r] for r in self.hosts[i]])

    def nic(self, rank: int) -> str:
        """The NIC rank ``rank`` sends and receives network traffic through: the one with
        its GPU's index when there is one, else the nearest (fewest hops, widest)."""
        if rank not in self._nic:
            t, h = self.topology, self.host_of[rank]
            local = self.local_topology(h)
            nics = self._host_nics.get(self.host_ids[h], [])
            if not nics:
                raise SynthesisError(f"{t.name}: host {self.host_ids[h]} has no NIC")
            gpu = t.ranks[rank]
            same = [n for n in nics if t.devices[n].index == t.devices[gpu].index and local.can_route(gpu, n)]
            self._nic[rank] = same[0] if same else min(nics, key=lambda n: (hop_distance(local, gpu, n), n))
        return self._nic[rank]

    # --- the network ----------------------------------------------------------------------
    def _network_graph(self) -> dict[str, list[str]]:
        """Out-neighbours among devices without a host (switches) and NICs."""
        if self._network is None:
            t = self.topology
            self._network = {}
            for (a, b) in t.links:
                da, db = t.devices[a], t.devices[b]
                if (da.host is None or da.kind is DeviceKind.NIC) and (db.host is None or db.kind is DeviceKind.NIC) \
                        and (da.host is None or db.host is None):
                    self._network.setdefault(a, []).append(b)
            for s in sorted(self._network, reverse=True):
                adj = self._network[s]
                adj.sort()
                if t.devices[s].host is None:
                    for v in adj:
                        if t.devices[v].kind is DeviceKind.NIC:
                            self._downlink[v] = s  # the smallest switch id wins
        return self._network

    def _network_path(self, a: str, b: str) -> tuple[str, ...]:
        """Fewest-hop path from NIC ``a`` to NIC ``b`` through switches only (cached per
        pair of first and last switch)."""
        net = self._network_graph()
        first = next((v for v in net.get(a, ()) if self.topology.devices[v].host is None), "")
        last = self._downlink.get(b, "")
        if not first or not last:
            raise SynthesisError(f"{self.topology.name}: no network link at {a if not first else b}")
        key = (first, last)
        if key not in self._switch_paths:
            parent = {first: first}
            queue = deque([first])
            while queue and last not in parent:
                u = queue.popleft()
                for v in net.get(u, ()):
                    if v not in parent and self.topology.devices[v].host is None:
                        parent[v] = u
                        queue.append(v)
            if last not in parent:
                raise SynthesisError(f"{self.topology.name}: switches {first} and {last} are not connected")
            path = [last]
            while path[-1] != first:
                path.append(parent[path[-1]])
            self._switch_paths[key] = tuple(reversed(path))
        return (a,) + self._switch_paths[key] + (b,)

    # --- paths between ranks ----------------------------------------------------------------
    def path(self, a: int, b: int) -> tuple[str, ...]:
        """The device path of a transfer from rank ``a`` to rank ``b`` (module doc; between
        hosts without NICs, the topology's own route)."""
        key = (a, b)
        if key not in self._paths:
            t = self.topology
            ha, hb = self.host_of[a], self.host_of[b]
            ga, gb = t.ranks[a], t.ranks[b]
            if ha == hb:
                path = self._local_path(ha, ga, gb)
            elif not self._host_nics.get(self.host_ids[ha]) or not self._host_nics.get(self.host_ids[hb]):
                path = self._route(t, ga, gb)  # hosts without NICs: the topology's own route
            else:
                na, nb = self.nic(a), self.nic(b)
                path = self._local_path(ha, ga, na) + self._network_path(na, nb)[1:-1] + self._local_path(hb, nb, gb)
            self._paths[key] = path
        return self._paths[key]

    def _local_path(self, host: int, a: str, b: str) -> tuple[str, ...]:
        """The route from device ``a`` to ``b`` inside host ``host`` (:meth:`_route`)."""
        key = (host, a, b)
        path = self._local_paths.get(key)
        if path is None:
            path = self._local_paths[key] = self._route(self.local_topology(host), a, b)
        return path

    def _route(self, topology: Topology, a: str, b: str) -> tuple[str, ...]:
        """``topology``'s route from device ``a`` to ``b``; SynthesisError when there is none
        (GPUs do not forward: two GPUs of a host may have no route inside it)."""
        try:
            return topology.route(a, b).path
        except TopologyError:
            raise SynthesisError(f"{self.topology.name}: no route from {a} to {b} inside its host") from None


#: the last few clusters built, by topology object: the bound and the strategies of one
#: synthesis share one :class:`Cluster` and so its cached paths
_RECENT_CLUSTERS = BoundedCache("synth.hosts.clusters", 4, purpose="Cluster views by topology object")


def cluster_of(topology: Topology) -> Cluster:
    """The :class:`Cluster` view of ``topology`` (shared by the callers that pass the same
    topology object, which is immutable); raises as :class:`Cluster` does."""
    cluster = _RECENT_CLUSTERS.get_for(topology)
    if cluster is None:
        cluster = Cluster(topology)
        _RECENT_CLUSTERS.put_for(topology, cluster)
    return cluster
