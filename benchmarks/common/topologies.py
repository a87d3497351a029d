"""The topology sets the benchmarks share, each built in one place.

A script in a folder of ``benchmarks/`` puts this folder on ``sys.path`` first::

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
    from topologies import allocation_topologies  # noqa: E402

* :func:`allocation_topologies` - Blink's allocation classes: every unique set of 3-8
  NVLink-connected GPUs of a DGX-1V (46) or DGX-1P (14), as the topology a job on them
  sees;
* :func:`machine_or_cluster` - one built-in machine, ``nodes`` of them on a network, or
  the GPUs ``gpus`` of either;
* :func:`split_dgx1v` - Blink's fragmented 8-GPU job over two DGX-1V (section 5.4);
* :data:`MULTINODE` - the multi-server cases the synthesis benchmarks compare strategies on.
"""

from __future__ import annotations

#: the machines whose allocation classes the benchmarks sweep (Blink's two)
ALLOCATION_MACHINES = ("dgx1v", "dgx1p")
#: the whole machines the synthesis benchmarks add to the allocation classes
WHOLE_MACHINES = ("dgx2", "dgx-a100", "dgx-h100")


def allocation_topologies(machine: str, smallest: int = 3, largest: int = 8) -> list:
    """``(allocation class, its induced topology)`` for every unique allocation of
    ``smallest..largest`` NVLink-connected GPUs of ``machine`` (``unique_allocations``'
    default fabric; left unnamed so that ``synthesis/xml_snapshot.py`` runs on older
    checkouts too), in the library's order."""
    from arborcc.topology.allocation import induced, unique_allocations
    from arborcc.topology.machines import build_machine

    whole = build_machine(machine)
    return [(c, induced(whole, list(c.gpus))) for c in unique_allocations(whole, smallest, largest)]


def machine_or_cluster(machine: str, nodes: int = 1, gpus=None, **network):
    """``machine`` (a built-in name), or ``nodes`` of them joined by a network
    (``network``: :func:`arborcc.topology.cluster.build_cluster`'s options); with ``gpus``
    (device ids), the topology a job on those GPUs sees."""
    from arborcc.topology.allocation import induced
    from arborcc.topology.cluster import build_cluster
    from arborcc.topology.machines import build_machine

    topology = build_cluster(machine, nodes, **network) if nodes > 1 else build_machine(machine)
    return induced(topology, list(gpus)) if gpus else topology


def split_dgx1v(first: int, second: int, name: str | None = None):
    """An 8-GPU job split over two DGX-1V: ``first`` GPUs of node 0 and ``second`` of
    node 1 (Blink section 5.4: 3 + 5, 4 + 4, 2 + 6)."""
    gpus = [f"n0.gpu{i}" for i in range(first)] + [f"n1.gpu{i}" for i in range(second)]
    from arborcc.topology.allocation import induced
    from arborcc.topology.cluster import build_cluster

    return induced(build_cluster("dgx1v", 2), gpus, name=name)


#: label -> builder: the multi-server cases (2 and 4 DGX A100 on a fat tree, on rails and
#: with a 2:1 oversubscribed core; two whole DGX-1V; Blink's fragmented jobs)
MULTINODE = {
    "2x8 A100": lambda: machine_or_cluster("dgx-a100", 2),
    "4x8 A100": lambda: machine_or_cluster("dgx-a100", 4),
    "2x8 A100 rail": lambda: machine_or_cluster("dgx-a100", 2, network="rail"),
    "4x8 A100 2:1": lambda: machine_or_cluster("dgx-a100", 4, oversubscription=2.0, leaf_ports=16),
    "2x DGX-1V": lambda: machine_or_cluster("dgx1v", 2),
    "DGX-1V 3+5": lambda: split_dgx1v(3, 5, name="dgx1v 3+5"),
    "DGX-1V 4+4": lambda: split_dgx1v(4, 4, name="dgx1v 4+4"),
    "DGX-1V 2+6": lambda: split_dgx1v(2, 6, name="dgx1v 2+6"),
}
