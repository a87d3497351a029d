"""The ``switch-direct`` strategy: on a switch machine, reduce-scatter, all-gather and
all-reduce as direct transfers between every pair of ranks, every pair on several thread
blocks.

On a machine whose GPUs all reach each other through one switch
(:func:`arborcc.synth.trees.one_switch`:
the NVSwitch of DGX-2, DGX A100, DGX H100; one level of a hierarchy) every pair is
one hop apart, so the bound of both collectives - each port carries ``(n - 1) / n`` of
the buffer - is reached with no relay at all: rank ``r`` sends its block ``p`` straight
to rank ``p`` (reduce-scatter; ``p`` reduces the ``n - 1`` blocks it receives into its
own) or its own block to every peer (all-gather). The pipeline is one transfer deep, not
a tree's depth: every port is busy from the first transfer and stays so until the last
chunk arrives, which is what decides a mid-size call. DGX H100 reduce-scatter at 64 MiB:
the per-root trees' relays wait for their children's sums one transfer per level
(191.7 us simulated, 306 GB/s busbw, NCCL's ring 296.5); the direct program 172.9 us,
339.7 GB/s, where the NVLink ports alone allow at most about 341 (19 us of launch and
base latency plus 7/8 of 64 MiB through a port at its calibrated 392 GB/s).

Each block is cut into ``k = lanes x m`` chunks; chunk ``j`` travels on lane ``j mod
lanes`` (the lane's channel) as step ``j // lanes`` of that lane's thread block, one
thread block per peer, lane and direction (``2 (n - 1) lanes`` per rank, with the
all-gather's copy of the rank's own block at most 64: 4 lanes on 8 GPUs, 2 on 16). A
reduce-scatter's receiving thread blocks reduce chunk ``j`` in one fixed peer order
(each waits for the previous peer's reduction of that chunk), so every rank sums in the
same order; the first reads the rank's own block of the input. An all-gather first
copies its input into its block of the output, chunk by chunk, and sends every chunk from
there once copied, so the same file is correct in place (where the copy is the block
itself) and out of place. The all-reduce is the two in one program: rank ``r`` reduces
block ``r`` as the reduce-scatter does and sends each chunk to every peer as soon as its
last reduction is done (its sends on channels of their own, ``lanes + c``: a connection
takes one sending thread block per channel), so its all-gather starts with the first
chunk, not after the last (``4 (n - 1) lanes`` thread blocks: 2 lanes on 8 GPUs, 1 on
16). DGX H100 at 64 MiB: 321.9 us, 364.8 GB/s busbw (BlueConnect's stages 353.8, NCCL's
ring 316.6); at 1 GiB 390.1 (378.7).

Small chunks shorten the tail - the last chunk's transfer and, in a reduce-scatter, its
``n - 1`` chained reductions - and many cost a step's latency each, so ``m`` is chosen
per size among :data:`CHUNKS_PER_LANE`: the candidate the simulator times fastest as
written at the request's size (64 MiB without one; calls above 1 GiB as 1 GiB, which
pipelines as they do), fewer chunks unless more are faster by 0.5%; the search stops at
the first candidate no faster than the best before it.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arborcc.ir.model import Algorithm, Step, ThreadBlock
    from arborcc.synth.result import SynthesisRequest, SynthesisResult

#: the collectives the strategy builds
SWITCH_DIRECT_COLLECTIVES = ("allreduce", "allgather", "reducescatter")
#: chunks per lane and block the candidates carry (steps per thread block)
CHUNKS_PER_LANE = (1, 4, 16, 64)
#: the size candidates are timed at without a request size, and the largest they are timed at
REFERENCE_SIZE, LARGEST_TIMED = 64 << 20, 1 << 30
#: a candidate with more chunks is kept only when it is faster by more than this share
MORE_CHUNKS_MARGIN = 0.005


def add_threadblock(tbs: list[ThreadBlock], steps: list[Step], **peer_and_channel) -> int:
    """Append a thread block running ``steps`` to a rank's ``tbs`` (its id: its place
    there) and return that id."""
    from arborcc.ir.model import ThreadBlock

    tbs.append(ThreadBlock(len(tbs), steps=steps, **peer_and_channel))
    return len(tbs) - 1


def lanes_for(collective: str, num_ranks: int, max_threadblocks: int, max_channels: int) -> int:
    """Lanes per peer: as many as the thread blocks (one per peer, lane, direction and,
    for all-reduce, phase; the all-gather's copy) and channels (two per lane for
    all-reduce, whose phases send to the same peer) allow; 0 when not even one fits."""
    if collective == "allreduce":
        return max(0, min(max_channels // 2, max_threadblocks // (4 * (num_ranks - 1))))
    return max(0, min(max_channels, (max_threadblocks - 1) // (2 * (num_ranks - 1))))


def reducescatter_program(num_ranks: int, lanes: int, per_lane: int, name: str) -> Algorithm:
    """Direct reduce-scatter, ``lanes x per_lane`` chunks per block (module doc)."""
    from arborcc.ir.model import Algorithm, Buffer, Dependency, Op, RankProgram, Step, ThreadBlock

    n, k = num_ranks, lanes * per_lane
    IN, OUT = Buffer.INPUT, Buffer.OUTPUT
    ranks = []
    for r in range(n):
        peers = [(r + d) % n for d in range(1, n)]
        tbs = [ThreadBlock(len(peers) * c + i, send=p, channel=c,
                           steps=[Step(Op.SEND, IN, p * k + s * lanes + c, OUT, s * lanes + c)
                                  for s in range(per_lane)])
               for c in range(lanes) for i, p in enumerate(peers)]
        tbs.sort(key=lambda tb: tb.id)
        for i, p in enumerate(peers):  # reductions in peer order, each chunk's chain on its lane
            for c in range(lanes):
                previous = len(tbs) - lanes
                steps = []
                for s in range(per_lane):
                    j = s * lanes + c
                    source = (IN, r * k + j) if i == 0 else (OUT, j)
                    steps.append(Step(Op.RECV_REDUCE_COPY, *source, OUT, j,
                                      dep=Dependency(previous, s) if i else None, has_dep=i < len(peers) - 1))
                tbs.append(ThreadBlock(len(tbs), recv=p, channel=c, steps=steps))
        ranks.append(RankProgram(r, n * k, k, 0, tbs))
    return Algorithm(name, "reducescatter", n, n * k, ranks, inplace=True, outofplace=True)


def allgather_program(num_ranks: int, lanes: int, per_lane: int, name: str) -> Algorithm:
    """Direct all-gather, ``lanes x per_lane`` chunks per block (module doc)."""
    from arborcc.ir.model import Algorithm, Buffer, Dependency, Op, RankProgram, Step, ThreadBlock

    n, k = num_ranks, lanes * per_lane
    IN, OUT = Buffer.INPUT, Buffer.OUTPUT
    ranks = []
    for r in range(n):
        peers = [(r + d) % n for d in range(1, n)]
        own = r * k
        # thread block 0 copies the input into the rank's block, in the order the lanes send it
        tbs = [ThreadBlock(0, steps=[Step(Op.COPY, IN, j, OUT, own + j, has_dep=True) for j in range(k)])]
        for c in range(lanes):
            for p in peers:
                tbs.append(ThreadBlock(len(tbs), send=p, channel=c, steps=[
                    Step(Op.SEND, OUT, own + s * lanes + c, OUT, own + s * lanes + c,
                         dep=Dependency(0, s * lanes + c)) for s in range(per_lane)]))
        for c in range(lanes):
            for p in peers:
                tbs.append(ThreadBlock(len(tbs), recv=p, channel=c, steps=[
                    Step(Op.RECV, OUT, p * k + s * lanes + c, OUT, p * k + s * lanes + c)
                    for s in range(per_lane)]))
        ranks.append(RankProgram(r, k, n * k, 0, tbs))
    return Algorithm(name, "allgather", n, n * k, ranks, inplace=True, outofplace=True)


def allreduce_program(num_ranks: int, lanes: int, per_lane: int, name: str) -> Algorithm:
    """Direct all-reduce, ``lanes x per_lane`` chunks per block: the direct reduce-scatter
    with each reduced chunk sent to every peer as soon as its last reduction is done
    (module doc)."""
    from arborcc.ir.model import Algorithm, Buffer, Dependency, Op, RankProgram, Step, ThreadBlock

    n, k = num_ranks, lanes * per_lane
    IN, OUT = Buffer.INPUT, Buffer.OUTPUT
    ranks = []
    for r in range(n):
        peers = [(r + d) % n for d in range(1, n)]
        own = r * k
        tbs: list[ThreadBlock] = []

        add = partial(add_threadblock, tbs)

        for c in range(lanes):
            for p in peers:
                add([Step(Op.SEND, IN, p * k + s * lanes + c, OUT, p * k + s * lanes + c) for s in range(per_lane)],
                    send=p, channel=c)
        reduced = {}
        for i, p in enumerate(peers):
            for c in range(lanes):
                reduced[(i, c)] = add([Step(Op.RECV_REDUCE_COPY, IN if i == 0 else OUT, own + s * lanes + c,
                                            OUT, own + s * lanes + c,
                                            dep=Dependency(reduced[(i - 1, c)], s) if i else None, has_dep=True)
                                       for s in range(per_lane)], recv=p, channel=c)
        last = len(peers) - 1
        for c in range(lanes):
            for p in peers:
                add([Step(Op.SEND, OUT, own + s * lanes + c, OUT, own + s * lanes + c,
                          dep=Dependency(reduced[(last, c)], s)) for s in range(per_lane)], send=p, channel=lanes + c)
        for c in range(lanes):
            for p in peers:
                add([Step(Op.RECV, OUT, p * k + s * lanes + c, OUT, p * k + s * lanes + c) for s in range(per_lane)],
                    recv=p, channel=lanes + c)
        ranks.append(RankProgram(r, n * k, n * k, 0, tbs))
    return Algorithm(name, "allreduce", n, n * k, ranks, inplace=True, outofplace=True)


def synth_switch_direct(request: SynthesisRequest) -> SynthesisResult:
    """Direct all-reduce, reduce-scatter or all-gather on a switch machine, the chunk count timed
    fastest at the request's size (module doc)."""
    from arborcc.errors import SynthesisError
    from arborcc.ir.limits import MAX_CHANNELS, runtime_caps
    from arborcc.sim.bandwidth import steady_state_bandwidth
    from arborcc.sim.protocol_choice import time_as_written
    from arborcc.synth.result import SynthesisResult
    from arborcc.synth.trees import one_switch

    topology, collective = request.topology, request.collective
    if collective not in SWITCH_DIRECT_COLLECTIVES:
        raise SynthesisError(f"switch-direct builds {', '.join(SWITCH_DIRECT_COLLECTIVES)}, not {collective}")
    if one_switch(topology) is None:
        raise SynthesisError(f"{topology.name}: the ranks do not all reach each other through one switch; "
                             "switch-direct needs a switch machine")
    n = topology.num_ranks
    caps = runtime_caps(request.dialect)
    max_tbs, max_steps = caps.threadblocks_per_rank, caps.steps_per_threadblock
    lanes = lanes_for(collective, n, max_tbs, MAX_CHANNELS)
    if lanes == 0:
        needed = 4 * (n - 1) if collective == "allreduce" else 2 * (n - 1) + 1
        raise SynthesisError(f"switch-direct needs {needed} thread blocks per rank for a {collective} on {n} "
                             f"ranks, the runtime allows {max_tbs}")
    build = {"allreduce": allreduce_program, "allgather": allgather_program,
             "reducescatter": reducescatter_program}[collective]
    size = min(request.size or REFERENCE_SIZE, LARGEST_TIMED)
    best = best_time = best_m = None
    for m in CHUNKS_PER_LANE:
        if m > max_steps:
            break
        algorithm = build(n, lanes, m, f"switch-direct-{collective}")
        t = time_as_written(algorithm, topology, size)
        if best is not None and t >= best_time:
            break  # the tail no longer shortens: more chunks only add steps
        if best is None or t < (1 - MORE_CHUNKS_MARGIN) * best_time:
            best, best_time, best_m = algorithm, t, m
    estimate = steady_state_bandwidth(best, topology)
    notes = [f"every pair direct over the switch on {lanes} lanes, {lanes * best_m} chunks per block: "
             f"simulated {best_time * 1e6:.1f} us at {size} bytes"]
    return SynthesisResult("switch-direct", collective, best, request.bound.algbw, estimate.algbw,
                           chunks=best.chunks_per_loop, notes=notes)
