"""The ``lane-rings`` strategy: the rings of NCCL's search inside one machine, on as many
thread blocks as the MSCCL runtimes take, rings without a common connection sharing a
channel.

The rings are the ones NCCL's search finds (:func:`arborcc.synth.nccl_rings.nccl_rings`:
on DGX-1V six rings of one NVLink lane each - three lane-disjoint cycles, each in both
directions - which keep every lane busy; on DGX-1P four). NCCL runs each ring on two
channels, and the channels of a ring move in lockstep: between two steps every one of
them waits a hop's latency for its data and reduces it before it sends again, and the
lane idles meanwhile (``docs/against-nccl.md``: NCCL's rings reach 0.94 of the
efficiency-adjusted NVLink rate on DGX-1V, with every lane equally busy). The wait is
fixed per step while a step's transfer is longer the more thread blocks share a lane,
so here every ring runs on as many thread blocks as the runtime takes (64 per rank in
the executor dialect): copies of the rings, each copy on the first channel whose
connections none of the rings already there uses (a ring and its reverse share one;
MSCCL connects a pair of ranks once per channel and direction), at most MSCCL's 32
channels. DGX-1V: 60 ring copies on 20 channels, 124.1 GB/s all-reduce busbw at 1 GiB
against NCCL's 118.8 (0.91 of the adjusted bound). The program is NCCL's ring kernel
(:func:`arborcc.library.nccl_ring.ring_algorithm`), unchanged.

One host only: across hosts NCCL's rings leave a node through a NIC, which the
``nccl-ring`` strategy's file rings handle (:mod:`arborcc.synth.strategies.nccl_ring`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from arborcc.synth.result import SynthesisRequest, SynthesisResult

#: the collectives the strategy builds: those whose ring kernel has every rank send all the time
LANE_RING_COLLECTIVES = ("allreduce", "allgather", "reducescatter")


def ring_connections(ring: Sequence[int]) -> set[tuple[int, int]]:
    """The directed rank pairs (sender, receiver) ``ring`` connects."""
    return {(ring[k], ring[(k + 1) % len(ring)]) for k in range(len(ring))}


def shared_channels(rings: Sequence[Sequence[int]], max_copies: int, max_channels: int) -> list[tuple[list[int], int]]:
    """Copies of ``rings`` (round-robin, at most ``max_copies`` in all), each with its
    channel: the lowest one on which no copy placed before connects any pair this ring
    connects, below ``max_channels``. Copies stop at the first that has no channel left."""
    used: list[set[tuple[int, int]]] = []
    out: list[tuple[list[int], int]] = []
    for k in range(max_copies):
        ring = list(rings[k % len(rings)])
        pairs = ring_connections(ring)
        channel = next((c for c, taken in enumerate(used) if not taken & pairs), len(used))
        if channel >= max_channels:
            break
        if channel == len(used):
            used.append(set())
        used[channel] |= pairs
        out.append((ring, channel))
    return out


def synth_lane_rings(request: SynthesisRequest) -> SynthesisResult:
    """NCCL's ring search's rings on as many thread blocks as the dialect takes, rings
    without a common connection sharing a channel (module doc)."""
    from arborcc.errors import SynthesisError
    from arborcc.ir.limits import MAX_CHANNELS, runtime_caps
    from arborcc.library.nccl_ring import ring_algorithm
    from arborcc.sim.bandwidth import steady_state_bandwidth
    from arborcc.synth.hosts import host_groups
    from arborcc.synth.nccl_rings import nccl_rings
    from arborcc.synth.result import SynthesisResult

    topology, collective = request.topology, request.collective
    if len(host_groups(topology)) > 1:
        raise SynthesisError(f"{topology.name}: the GPUs span several hosts; lane-rings runs inside one "
                             "(use --strategy nccl-ring)")
    schedule = nccl_rings(topology)
    max_tbs = runtime_caps(request.dialect).threadblocks_per_rank
    distinct = len(schedule.rings)
    # whole copies of the set of rings: a ring run more often than another loads its lanes more
    placed = shared_channels(schedule.rings, max(1, max_tbs // distinct) * distinct, MAX_CHANNELS)
    placed = placed[:max(1, len(placed) // distinct) * distinct]
    algorithm = ring_algorithm(collective, [ring for ring, _ in placed], request.root, f"lane-rings-{collective}")
    for program in algorithm.ranks:
        for tb in program.threadblocks:  # thread block c runs ring copy c
            tb.channel = placed[tb.id][1]
    estimate = steady_state_bandwidth(algorithm, topology)
    channels = 1 + max(channel for _, channel in placed)
    notes = [f"{len(placed)} thread blocks per rank on {channels} channels: NCCL's {distinct} ring(s) "
             f"over {schedule.link_kind.value}, each {len(placed) // distinct} times"]
    return SynthesisResult("lane-rings", collective, algorithm, request.bound.algbw, estimate.algbw,
                           chunks=algorithm.chunks_per_loop, notes=notes)
