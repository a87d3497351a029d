"""Multi-node topologies: N copies of a built-in machine over a network, and the
generic switch hierarchy of BlueConnect (Fig. 1).

Network shapes (the usual ones of GPU clusters; BlueConnect's Fig. 1 for the hierarchy):

* ``fat-tree``: every NIC links to a leaf switch (``leaf_ports`` NICs per leaf, in
  node order); when there is more than one leaf, the leaves join one non-blocking core
  (``spine0``) by an uplink of (ports x NIC bandwidth) / ``oversubscription``.
* ``rail``: rail-optimized - NIC i of every node links to leaf (rail) i; the rails join
  ``spine0`` for cross-rail traffic, again divided by ``oversubscription``.

Device ids are the single machine's ids prefixed with ``n{node}.``; switches have no host.

References:

* BlueConnect: M. Cho, U. Finkler, D. Kung, H. Hunter, "BlueConnect: Decomposing All-Reduce for
  Deep Learning on Heterogeneous Network Hierarchy", MLSys (SysML) 2019, https://proceedings.mlsys.org/
  paper_files/paper/2019/hash/0c8abcf158ed12d0dd94480681186fda-Abstract.html
"""

from __future__ import annotations

from dataclasses import asdict

from arborcc.errors import TopologyError
from arborcc.limits import limit
from arborcc.topology.defaults import LATENCY
from arborcc.topology.machines import add_machine, gpus_per_machine, machine_params, machine_spec
from arborcc.topology.model import GB, Device, DeviceKind, LinkKind, Topology, TopologyBuilder

NETWORKS = ("fat-tree", "rail")


def build_cluster(machine: str, nodes: int, network: str = "fat-tree", oversubscription: float = 1.0,
                  leaf_ports: int = 32, network_latency_us: float | None = None,
                  **overrides: float | None) -> Topology:
    """``nodes`` copies of ``machine`` joined by a ``network`` (see module doc)."""
    if not isinstance(nodes, int) or nodes < 1:
        raise TopologyError(f"the node count must be an integer >= 1, got {nodes!r}", source="--nodes")
    if network not in NETWORKS:
        raise TopologyError(f"unknown network {network!r} (known: {', '.join(NETWORKS)})", source="--network")
    if not oversubscription >= 1.0:
        raise TopologyError(f"oversubscription must be >= 1, got {oversubscription}", source="--oversubscription")
    if leaf_ports < 1:
        raise TopologyError(f"leaf ports must be >= 1, got {leaf_ports}", source="--leaf-ports")
    spec = machine_spec(machine)
    params = machine_params(machine, **overrides)
    limit("ranks").check(nodes * gpus_per_machine(spec.name), "--nodes",
                         what=f"{nodes:,} nodes of {gpus_per_machine(spec.name)} GPUs", error=TopologyError)
    lat = LATENCY[LinkKind.NETWORK] if network_latency_us is None else network_latency_us * 1e-6
    nic_bw = params.nic_gbps * GB
    name = f"{nodes}x{spec.name}" if nodes > 1 else spec.name
    b = TopologyBuilder(name, source=f"cluster {name}", meta={
        "machine": spec.name, "nodes": nodes, "network": network, "oversubscription": oversubscription,
        "leaf_ports": leaf_ports, "params": asdict(params)})
    nics_by_node = [add_machine(b, spec.name, params, host=h, prefix=f"n{h}." if nodes > 1 else "")
                    for h in range(nodes)]
    if nodes == 1:
        return b.build()
    if not nics_by_node[0]:
        raise TopologyError(f"machine {spec.name} has no NIC to build a network from", source="--nodes")

    leaf_load: dict[str, int] = {}

    def attach(nic: str, leaf: str) -> None:
        if not b.has_device(leaf):
            b.add_device(Device(leaf, DeviceKind.NET_SWITCH, None, len(leaf_load)))
            leaf_load[leaf] = 0
        b.connect(nic, leaf, LinkKind.NETWORK, nic_bw, lat)
        leaf_load[leaf] += 1

    if network == "rail":
        for nics in nics_by_node:
            for rail, nic in enumerate(nics):
                attach(nic, f"leaf{rail}")
    else:
        flat = [nic for nics in nics_by_node for nic in nics]
        for k, nic in enumerate(flat):
            attach(nic, f"leaf{k // leaf_ports}")
    if len(leaf_load) > 1:
        b.add_device(Device("spine0", DeviceKind.NET_SWITCH, None, 0))
        for leaf, ports in leaf_load.items():
            b.connect(leaf, "spine0", LinkKind.NETWORK, ports * nic_bw / oversubscription, lat)
    return b.build()


def parse_hierarchy(spec: str) -> list[tuple[int, float]]:
    """Parse ``"4@100,2@25,2@12.5"`` (fan-out @ GB/s per level, innermost first)."""
    levels = []
    for k, part in enumerate(spec.split(",")):
        try:
            fanout, gbps = part.split("@")
            levels.append((int(fanout), float(gbps)))
        except ValueError:
            raise TopologyError(f"level {k}: expected FANOUT@GBPS, got {part!r}", source="--machine hierarchy") from None
        if levels[-1][0] < 1 or not levels[-1][1] > 0:
            raise TopologyError(f"level {k}: fan-out must be >= 1 and bandwidth > 0, got {part!r}",
                                source="--machine hierarchy")
    if not levels:
        raise TopologyError("no levels given", source="--machine hierarchy")
    return levels


def build_hierarchy(levels: list[tuple[int, float]], latency_us: float | None = None) -> Topology:
    """BlueConnect Fig. 1: GPUs -> node switch -> rack switch -> ..., bandwidths per level.

    ``levels[0] = (GPUs per node, GB/s of each GPU's link to its node switch)``;
    ``levels[k] = (level-(k-1) switches per level-k switch, GB/s of each such uplink)``.
    Level-0 switches belong to a host (the node); higher ones to none.
    """
    total = 1
    for fanout, _ in levels:
        total *= fanout
        limit("ranks").check(total, "--machine hierarchy", what="the product of the fan-outs",
                             error=TopologyError)
    lat = LATENCY[LinkKind.SWITCH_PORT] if latency_us is None else latency_us * 1e-6
    spec = ",".join(f"{f}@{g:g}" for f, g in levels)
    b = TopologyBuilder(f"hierarchy:{spec}", source=f"hierarchy {spec}", meta={"hierarchy": levels})
    gpn, w0 = levels[0]
    below: list[str] = []
    for node in range(total // gpn):
        sw = b.add_device(Device(f"sw0.{node}", DeviceKind.NET_SWITCH, node, node)).id
        for i in range(gpn):
            g = b.add_device(Device(f"n{node}.gpu{i}", DeviceKind.GPU, node, i)).id
            b.connect(g, sw, LinkKind.SWITCH_PORT, w0 * GB, lat)
        below.append(sw)
    for level, (fanout, gbps) in enumerate(levels[1:], start=1):
        above = []
        for k in range(len(below) // fanout):
            sw = b.add_device(Device(f"sw{level}.{k}", DeviceKind.NET_SWITCH, None, k)).id
            for child in below[k * fanout:(k + 1) * fanout]:
                b.connect(child, sw, LinkKind.SWITCH_PORT, gbps * GB, lat)
            above.append(sw)
        below = above
    return b.build()
