"""The ``nccl-ring`` strategy: the rings NCCL's search builds (:mod:`arborcc.synth.nccl_rings`),
for every collective NCCL runs.

Every collective (all-reduce, all-gather, reduce-scatter, broadcast, reduce) runs NCCL's
ring kernel (:func:`arborcc.library.nccl_ring.ring_algorithm`) with as many channels as NCCL
runs (:func:`arborcc.sim.nccl_channels.nccl_channel_count`: every ring twice, 24 or 32 rings
of one order on NVSwitch machines): the program the NCCL baseline simulates, so the two
tie wherever its thread blocks fit the runtime (below). NCCL simulates its identical
channels as instances of one ring; an MSCCL file has no instance count, so the channels
are written out: ring ``c mod R`` on channel ``c`` (R distinct rings), each channel
carrying its own share of the buffer. A file names no
route either, so across nodes the rings are re-chained to leave every node through the
NICs of different GPUs (:func:`arborcc.synth.nccl_rings.file_rings`).

Where a ring's thread block holds more steps than the runtime accepts (all-reduce beyond
32 ranks, all-gather and reduce-scatter beyond 64, for the MSCCL executors), each ring's
chunks are dealt over data lanes (:mod:`arborcc.library.nccl_ring`), as few as fit,
each on its own channel, and the file runs as many rings as the channels then allow
(at most NCCL's count): on 16 x DGX A100 the all-reduce runs NCCL's 8 rings once, each
over 4 lanes, on 32 channels, where NCCL runs them twice on 16. Both ways of dealing the
chunks are written, as the result's variants: ``synthesize`` keeps the one whose file
the simulator times faster at the request's size (without a size: at synthesis' ranking
size), and times neither where the candidate cannot win.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arborcc.ir.model import Algorithm
    from arborcc.synth.result import SynthesisRequest, SynthesisResult


def synth_nccl_ring(request: SynthesisRequest) -> SynthesisResult:
    """NCCL's ring kernel of the request's collective on NCCL's rings (NVLink-only when
    possible), one channel per ring NCCL runs, or data lanes where the runtime's steps
    per thread block call for them (module doc)."""
    from arborcc.sim.bandwidth import steady_state_bandwidth
    from arborcc.sim.fidelity import fidelity_for
    from arborcc.ir.limits import runtime_caps
    from arborcc.library.nccl_ring import ring_steps_per_threadblock
    from arborcc.sim.nccl_channels import nccl_channel_count
    from arborcc.synth.nccl_rings import file_rings, nccl_rings
    from arborcc.synth.strategies.nccl_notes import NOTED_PROTOCOL, nccl_prediction

    topology, collective = request.topology, request.collective
    schedule = file_rings(topology, nccl_rings(topology))
    distinct = len(schedule.rings)
    nccl_channels = nccl_channel_count(distinct, fidelity_for(topology).nccl_channels)
    lanes, channels = _lanes_and_rings(request, nccl_channels)
    rings = [schedule.rings[c % distinct] for c in range(channels)]
    variants = _dealt_rings(request, rings, lanes)
    algorithm = next(iter(variants.values()))
    routes = {}
    for c, ring in enumerate(rings):
        hops = schedule.hops[c % distinct] if schedule.hops else []
        for k, path in enumerate(hops):
            for lane in range(lanes):
                routes[(ring[k], ring[(k + 1) % len(ring)], c * lanes + lane)] = path
    estimate = steady_state_bandwidth(algorithm, topology, routes)
    runs = f", each {channels // distinct} times" if channels > distinct else ""
    lanes_note = (f", each dealt over {lanes} data lanes ({lanes * channels} channels): a whole ring's thread "
                  f"block holds {ring_steps_per_threadblock(collective, topology.num_ranks)} steps, over the "
                  f"runtime's {runtime_caps(request.dialect).steps_per_threadblock} (NCCL runs {nccl_channels} "
                  f"channels)")
    notes = [f"{channels} rings: NCCL's {distinct} ring(s) over {schedule.link_kind.value}{runs}"
             + (lanes_note if lanes > 1 else "")]
    if collective == "allreduce" and request.size is not None:
        notes.append(nccl_prediction(schedule.nccl_estimate(collective, NOTED_PROTOCOL, request.size), request.size))
    from arborcc.synth.result import SynthesisResult

    return SynthesisResult("nccl-ring", collective, algorithm, request.bound.algbw, estimate.algbw,
                           routes=routes, chunks=algorithm.chunks_per_loop, notes=notes,
                           variants=variants if len(variants) > 1 else {})


def _lanes_and_rings(request: SynthesisRequest, nccl_channels: int) -> tuple[int, int]:
    """(data lanes, rings) for the file: the fewest lanes whose thread blocks fit the
    runtime's steps, and as many rings as the channels and thread blocks then allow, at
    most ``nccl_channels`` (module doc)."""
    from arborcc.errors import SynthesisError
    from arborcc.ir.limits import runtime_caps
    from arborcc.library.nccl_ring import ring_steps_per_threadblock

    collective, n = request.collective, request.topology.num_ranks
    caps = runtime_caps(request.dialect)
    most_channels = min(caps.channels, caps.threadblocks_per_rank)
    limit = caps.steps_per_threadblock
    lanes = 1
    while ring_steps_per_threadblock(collective, n, lanes) > limit:
        lanes += 1
    if lanes > most_channels:
        raise SynthesisError(f"NCCL's ring {collective} over {n} ranks needs {lanes} data lanes to keep "
                             f"{limit} steps per thread block, over the runtime's {most_channels} channels")
    return lanes, min(nccl_channels, most_channels // lanes)


def _dealt_rings(request: SynthesisRequest, rings: list, lanes: int) -> dict[str, Algorithm]:
    """The ring kernel over ``rings`` dealt over ``lanes`` data lanes, by the name of each
    dealing that leaves no lane empty ("interleaved lanes": the variants ``synthesize``
    times, module doc; the first alone where it times none); one algorithm, named "", with
    one lane."""
    from arborcc.errors import SynthesisError
    from arborcc.library.nccl_ring import DEALINGS, data_lane_of, ring_algorithm, ring_algorithms

    name = f"nccl-ring-{request.collective}"
    if lanes == 1:
        return {"": ring_algorithm(request.collective, rings, request.root, name)}
    dealings = []
    for dealing in DEALINGS:
        try:
            data_lane_of(len(rings[0]), lanes, dealing)
        except SynthesisError:  # a contiguous dealing that would leave a lane empty
            continue
        dealings.append(dealing)
    if not request.variants_timed:
        dealings = dealings[:1]
    built = ring_algorithms(request.collective, rings, request.root, name, data_lanes=lanes, dealings=dealings)
    return {f"{dealing} lanes": algorithm for dealing, algorithm in built.items()}
