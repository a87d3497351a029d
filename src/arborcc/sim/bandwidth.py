"""Steady-state bandwidth of an algorithm on a topology.

For large buffers an algorithm's time is set by its busiest link: every send step moves
``count`` chunks of ``size x mult / chunks_per_loop`` bytes along the route of its
connection, every link accumulates the bytes of all routes that cross it, and the time
per buffer byte is the largest ``bytes / bandwidth`` over links. This is the
bandwidth term of the alpha-beta model (BlueConnect eq. 1-10, Blink section 3) and
exactly the quantity a tree packing bounds, so it measures how much of a packing's
rate survives lowering. Latency and per-step overheads are not modelled here.

``routes`` maps ``(src_rank, dst_rank, channel)`` to the device path a connection
takes; connections not listed use :meth:`Topology.route`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from arborcc.errors import SynthesisError
from arborcc.ir.model import Algorithm
from arborcc.topology.model import GB, Topology

#: collectives whose S (the root's buffer) holds one block per rank
_ROOT_HOLDS_ALL = ("gather", "scatter")


@dataclass(frozen=True)
class BandwidthEstimate:
    """Link loads per byte of S (nccl-tests size) and the resulting algorithm bandwidth."""

    loads: dict[tuple[str, str], float]  #: bytes crossing each link per byte of S
    bottleneck: tuple[str, str] | None
    algbw: float  #: S / t in bytes/s for large S

    @property
    def algbw_gbps(self) -> float:
        return self.algbw / GB


def steady_state_bandwidth(algo: Algorithm, topology: Topology,
                           routes: Mapping[tuple[int, int, int], tuple[str, ...]] | None = None) -> BandwidthEstimate:
    """The large-message algbw of ``algo`` on ``topology`` (see module doc)."""
    if algo.num_ranks != topology.num_ranks:
        raise SynthesisError(f"algorithm {algo.name} has {algo.num_ranks} ranks but topology "
                             f"{topology.name} has {topology.num_ranks}")
    # S = elements x mult bytes for all-gather/reduce-scatter/all-to-all (S is the total),
    # so a chunk is S / chunks_per_loop; for gather/scatter S is the root's whole buffer
    # (n blocks) while chunks_per_loop counts one rank's block (MSCCL's convention).
    chunk = 1.0 / (algo.chunks_per_loop * (algo.num_ranks if algo.collective in _ROOT_HOLDS_ALL else 1))
    loads: dict[tuple[str, str], float] = {}
    routes = routes or {}
    for prog in algo.ranks:
        for tb in prog.threadblocks:
            sent = 0
            for s in tb.steps:  # a plain loop: the hottest line of the estimate
                if s.op.sends:
                    sent += s.count
            if not sent:
                continue
            key = (prog.rank, tb.send, tb.channel)
            path = routes.get(key)
            if path is None:
                path = topology.route(topology.ranks[prog.rank], topology.ranks[tb.send]).path
            for link in zip(path, path[1:]):
                loads[link] = loads.get(link, 0.0) + sent * chunk
    if not loads:
        return BandwidthEstimate({}, None, float("inf"))
    bottleneck = max(loads, key=lambda l: loads[l] / topology.links[l].bandwidth)
    time_per_byte = loads[bottleneck] / topology.links[bottleneck].bandwidth
    return BandwidthEstimate(loads, bottleneck, 1.0 / time_per_byte)


def attainable_algbw(estimate: BandwidthEstimate, topology: Topology, efficiency) -> float:
    """The large-message algbw of the same link loads when every link carries only
    ``efficiency(kind)`` of its nominal bandwidth (a fidelity profile's
    :meth:`~arborcc.sim.fidelity.Fidelity.efficiency`): what a simulation of the
    algorithm can reach at best, the yardstick of how much a schedule loses to
    pipelining, contention and ordering."""
    if not estimate.loads:
        return float("inf")
    return min(topology.links[l].bandwidth * efficiency(topology.links[l].kind) / load
               for l, load in estimate.loads.items() if load > 0)
