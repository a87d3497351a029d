"""The ``nccl-ring`` strategy: the rings NCCL's search builds (:mod:`arborcc.synth.nccl_rings`),
for every collective NCCL runs.

Every collective (all-reduce, all-gather, reduce-scatter, broadcast, reduce) runs NCCL's
ring kernel (:func:`arborcc.library.nccl_ring.ring_algorithm`) with as many channels as NCCL
runs (:func:`arborcc.sim.nccl_channels.nccl_channel_count`: every ring twice, 24 or 32 rings
of one order on NVSwitch machines): the program the NCCL baseline simulates, so the two
tie. NCCL simulates its identical channels as instances of one ring; an MSCCL file has no
instance count, so the channels are written out: ring ``c mod R`` on channel ``c`` (R
distinct rings), each channel carrying its own share of the buffer. A file names no
route either, so across nodes the rings are re-chained to leave every node through the
NICs of different GPUs (:func:`arborcc.synth.nccl_rings.file_rings`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arborcc.synth.result import SynthesisRequest, SynthesisResult


def synth_nccl_ring(request: SynthesisRequest) -> SynthesisResult:
    """NCCL's ring kernel of the request's collective on NCCL's rings (NVLink-only when
    possible), one channel per ring NCCL runs (module doc)."""
    from arborcc.sim.bandwidth import steady_state_bandwidth
    from arborcc.sim.fidelity import fidelity_for
    from arborcc.library.nccl_ring import ring_algorithm
    from arborcc.sim.nccl_channels import nccl_channel_count
    from arborcc.synth.nccl_rings import file_rings, nccl_rings
    from arborcc.synth.strategies.nccl_notes import NOTED_PROTOCOL, nccl_prediction

    topology, collective = request.topology, request.collective
    schedule = file_rings(topology, nccl_rings(topology))
    distinct = len(schedule.rings)
    channels = nccl_channel_count(distinct, fidelity_for(topology).nccl_channels)
    rings = [schedule.rings[c % distinct] for c in range(channels)]
    algorithm = ring_algorithm(collective, rings, request.root, f"nccl-ring-{collective}")
    routes = {}
    for c, ring in enumerate(rings):
        hops = schedule.hops[c % distinct] if schedule.hops else []
        for k, path in enumerate(hops):
            routes[(ring[k], ring[(k + 1) % len(ring)], c)] = path
    estimate = steady_state_bandwidth(algorithm, topology, routes)
    notes = [f"{channels} channels: NCCL's {distinct} ring(s) over {schedule.link_kind.value}"
             + (f", each {channels // distinct} times" if channels > distinct else "")]
    if collective == "allreduce" and request.size is not None:
        notes.append(nccl_prediction(schedule.nccl_estimate(collective, NOTED_PROTOCOL, request.size), request.size))
    from arborcc.synth.result import SynthesisResult

    return SynthesisResult("nccl-ring", collective, algorithm, request.bound.algbw, estimate.algbw,
                           routes=routes, chunks=algorithm.chunks_per_loop, notes=notes)
