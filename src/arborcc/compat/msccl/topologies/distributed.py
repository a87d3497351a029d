"""``msccl.topologies.distributed``: copies of a node topology joined by a network."""

from __future__ import annotations

from arborcc.compat.msccl.topologies.topology import Topology

_arborcc_compat = True


def _copies(local: Topology, copies: int, remote_bw) -> tuple[list[list], list]:
    k = local.num_nodes()
    n = k * copies
    links = [[remote_bw if src // k != dst // k else local.links[dst % k][src % k] for src in range(n)]
             for dst in range(n)]
    switches = []
    for srcs, dsts, bw, name in local.switches:
        for c in range(copies):
            switches.append(([s + c * k for s in srcs], [d + c * k for d in dsts], bw, f"copy_{c}_{name}_local"))
    return links, switches


def distributed_fully_connected(local_topology: Topology, num_copies: int, remote_bw=1) -> Topology:
    links, switches = _copies(local_topology, num_copies, remote_bw)
    return Topology(f"DistributedFullyConnected(local={local_topology.name},copies={num_copies},bw={remote_bw})",
                    links, switches)


def distributed_hub_and_spoke(local_topology: Topology, num_copies: int, remote_bw=1) -> Topology:
    links, switches = _copies(local_topology, num_copies, remote_bw)
    k = local_topology.num_nodes()
    for c in range(num_copies):
        local = [j + c * k for j in range(k)]
        remote = [j for j in range(k * num_copies) if j // k != c]
        switches.append((local, remote, remote_bw, f"copy_{c}_out_remote"))
        switches.append((remote, local, remote_bw, f"copy_{c}_in_remote"))
    return Topology(f"DistributedHubAndSpoke(local={local_topology.name},copies={num_copies},bw={remote_bw})",
                    links, switches)
