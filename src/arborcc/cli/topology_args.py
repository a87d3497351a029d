"""The topology inputs every command shares: ``--machine NAME [--nodes N]``,
``--file PATH``, ``--detect``, ``--gpus 1,4,5,6`` and bandwidth overrides.

Environment: ``ARBORCC_MACHINE`` replaces the default machine (dgx1v).

References:

* BlueConnect: M. Cho, U. Finkler, D. Kung, H. Hunter, "BlueConnect: Decomposing All-Reduce for
  Deep Learning on Heterogeneous Network Hierarchy", MLSys (SysML) 2019, https://proceedings.mlsys.org/
  paper_files/paper/2019/hash/0c8abcf158ed12d0dd94480681186fda-Abstract.html
"""

from __future__ import annotations

import argparse
import os

from arborcc.errors import TopologyError

DEFAULT_MACHINE = "dgx1v"


def add_topology_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("topology (one of --machine, --file, --detect; default: $ARBORCC_MACHINE or dgx1v)")
    src = g.add_mutually_exclusive_group()
    src.add_argument("--machine", metavar="NAME",
                     help="built-in machine: dgx1p, dgx1v (p3.16xlarge), dgx2, dgx-a100, dgx-h100, "
                          "or hierarchy:FANOUT@GBPS,... (BlueConnect Fig. 1, innermost level first)")
    src.add_argument("--file", metavar="PATH",
                     help="topology file: arborcc YAML/JSON, NCCL topology XML, or nvidia-smi topo -m text")
    src.add_argument("--detect", action="store_true", help="detect this machine's GPUs through NVML")
    g.add_argument("--nodes", type=int, metavar="N", help="N copies of --machine over a network")
    g.add_argument("--network", choices=("fat-tree", "rail"), default="fat-tree",
                   help="network shape for --nodes (default fat-tree)")
    g.add_argument("--oversubscription", type=float, default=1.0, metavar="R",
                   help="leaf-to-spine oversubscription ratio for --nodes (default 1)")
    g.add_argument("--gpus", metavar="LIST",
                   help="the allocation: GPU numbers (rank positions) or ids, e.g. 1,4,5,6 or n0.gpu1,n1.gpu1")
    g.add_argument("--nvlink-gbps", type=float, metavar="GB/S", help="bandwidth of one NVLink lane, GB/s per direction")
    g.add_argument("--pcie-gbps", type=float, metavar="GB/S", help="bandwidth of a PCIe x16 link, GB/s per direction")
    g.add_argument("--nic-gbps", type=float, metavar="GB/S", help="bandwidth of one NIC, GB/s per direction (25 = 200 Gb/s)")


def topology_from_args(args: argparse.Namespace):
    """Build the :class:`~arborcc.topology.model.Topology` the flags describe, restricted to
    ``--gpus`` if given."""
    from arborcc.topology.allocation import induced, resolve_gpus

    overrides = {"nvlink_gbps": args.nvlink_gbps, "pcie_gbps": args.pcie_gbps, "nic_gbps": args.nic_gbps}
    if args.file or args.detect:
        if args.nodes is not None:
            raise TopologyError("--nodes goes with --machine, not with --file or --detect", source="--nodes")
        if any(v is not None for v in overrides.values()):
            raise TopologyError("bandwidth overrides go with --machine (edit the file instead)", source="--nvlink-gbps")
    if args.file:
        from arborcc.topology.readers import read_topology

        topology = read_topology(args.file)
    elif args.detect:
        from arborcc.topology.detect import detect_topology

        topology = detect_topology()
    else:
        machine = args.machine or os.environ.get("ARBORCC_MACHINE") or DEFAULT_MACHINE
        topology = build_named(machine, args.nodes, args.network, args.oversubscription, **overrides)
    if args.gpus is not None:
        topology = induced(topology, resolve_gpus(topology, args.gpus))
    return topology


def build_named(machine: str, nodes: int | None = None, network: str = "fat-tree",
                oversubscription: float = 1.0, **overrides: float | None):
    """A built-in machine, a cluster of them, or a ``hierarchy:`` spec."""
    if machine.startswith("hierarchy:"):
        from arborcc.topology.cluster import build_hierarchy, parse_hierarchy

        if nodes is not None:
            raise TopologyError("a hierarchy already describes its nodes; drop --nodes", source="--nodes")
        return build_hierarchy(parse_hierarchy(machine.split(":", 1)[1]))
    if nodes is not None:
        from arborcc.topology.cluster import build_cluster

        return build_cluster(machine, nodes, network, oversubscription, **overrides)
    from arborcc.topology.machines import build_machine

    return build_machine(machine, **overrides)
