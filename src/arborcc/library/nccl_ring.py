"""NCCL's ring kernels as arborcc programs: all-reduce, all-gather, reduce-scatter,
broadcast and reduce written out as MSCCL steps, built directly.

Per channel NCCL runs one ring; every rank's thread block sends to the next rank of the
ring and receives from the previous one, and the buffer is cut into one chunk per rank
(NVIDIA/nccl ``src/device/all_reduce.h``, ``runRing``): a send, n-2
receive-reduce-sends, a receive-reduce-copy-send that completes the rank's own chunk,
n-2 receive-copy-sends and a final receive - 2(n-1) transfers per rank and channel.
Position p of a ring owns chunk p; at reduce-scatter step s it sends chunk p-s-1.
Broadcast (``runRing`` of ``broadcast.h``) sends each channel's share down the ring
from the root, which the runtime's slice loop pipelines: the root sends, every other
rank receives and forwards, the rank before the root only receives.
All-gather (``all_gather.h``) sends the rank's own block and then receives and forwards
n-2 blocks, keeping each, and receives the last one; reduce-scatter
(``reduce_scatter.h``) sends the block of the rank before it, receives, adds its own
and forwards n-2 partial sums, and adds the last into its own block; reduce
(``reduce.h``) starts at the rank after the root, every rank adds its own and forwards,
and the root adds the sum into its output. Per channel each rank's block is one chunk.

A ring's thread block holds 2n-1 steps (all-reduce) or n (all-gather, reduce-scatter),
over the 64 per thread block the MSCCL executors accept beyond 32 ranks (all-reduce) or
64. Those three kernels can deal each ring's chunks over ``data_lanes`` thread blocks,
as ``arborcc convert`` spreads a long thread block (:mod:`arborcc.ir.convert`), every
lane on its own channel (``channel x data_lanes + lane``), so a connection's messages
keep their order within each lane and the lanes run side by side. The chunk of ring
position q goes to lane ``q mod data_lanes`` (``interleaved``) or ``q // ceil(n /
data_lanes)`` (``contiguous``); which runs faster depends on the machine (16 x DGX A100
all-reduce at 1 GiB: 13102.7 us interleaved, 13624.1 contiguous; 16 x DGX H100: 6211.5
and 6081.8).

Written step by step here (no DSL, no compiler) because the simulator needs it at
thousands of ranks, where the ring holds millions of steps; the result is an ordinary
Algorithm (in place; reduce-scatter and reduce also out of place), which the tests
prove with the verifier and run against the numpy reference. The NCCL baseline
(:mod:`arborcc.tune.nccl`) and the ``nccl-ring`` strategy
(:mod:`arborcc.synth.strategies.nccl_ring`) run them with as many channels as NCCL
does (:func:`arborcc.sim.nccl_channels.nccl_channel_count`).
"""

from __future__ import annotations

from typing import Iterator, Sequence

from arborcc.collector import collector_paused
from arborcc.errors import SynthesisError
from arborcc.ir.model import Algorithm, Buffer, Op, Protocol, RankProgram, Step, ThreadBlock

_I = Buffer.INPUT
_O = Buffer.OUTPUT

#: how a ring's chunks are dealt over its data lanes (module doc)
DEALINGS = ("interleaved", "contiguous")


def ring_allreduce_algorithm(rings: Sequence[Sequence[int]], name: str = "nccl-ring-allreduce",
                             protocol: Protocol = Protocol.SIMPLE, data_lanes: int = 1,
                             dealing: str = "interleaved") -> Algorithm:
    """NCCL's ring all-reduce over ``rings`` (one per channel, each visiting every rank
    once; rank indices 0..n-1), ``len(rings) x n`` chunks, each ring's thread block dealt
    over ``data_lanes`` (module doc). As NCCL's kernel does, the reduction reads the input
    and the sums land in the output, so one program serves both call forms."""
    return ring_algorithm("allreduce", rings, 0, name, protocol, data_lanes, dealing)


def _allreduce_blocks(rings: Sequence[Sequence[int]], n: int) -> Iterator[tuple]:
    """Every ring's thread block on every rank, whole: (ring, rank, send peer, receive
    peer, steps, the ring position of each step's chunk)."""
    send, reduce_send, reduce_copy_send, copy_send, recv = (
        Op.SEND, Op.RECV_REDUCE_SEND, Op.RECV_REDUCE_COPY_SEND, Op.RECV_COPY_SEND, Op.RECV)
    for c, ring in enumerate(rings):
        base = c * n
        for p, rank in enumerate(ring):
            # behind[s]: the ring position s + 1 places behind p, whose chunk p sends at step s
            behind = [(p - s - 1) % n for s in range(n - 1)]
            ahead = (p + 1) % n
            steps = [Step(send, _I, base + behind[0], _I, base + behind[0])]
            steps += [Step(reduce_send, _I, base + q, _I, base + q) for q in behind[1:]]
            steps.append(Step(reduce_copy_send, _I, base + p, _O, base + p))
            steps += [Step(copy_send, _O, base + q, _O, base + q) for q in behind[:-1]]
            steps.append(Step(recv, _O, base + ahead, _O, base + ahead))
            positions = [behind[0], *behind[1:], p, *behind[:-1], ahead]
            yield c, rank, ring[(p + 1) % n], ring[(p - 1) % n], steps, positions


def _deal_over_lanes(program: RankProgram, c: int, send: int, recv: int, steps: list[Step],
                     positions: list[int], lanes: int, lane_of: list[int]) -> None:
    """Ring ``c``'s thread blocks on ``program``'s rank: ``steps`` in order, the chunk of
    each at ring position ``positions[i]``, dealt over ``lanes`` data lanes by position
    (``lane_of``, module doc); thread block and channel ``c x lanes + lane``."""
    if lanes == 1:
        program.threadblocks.append(ThreadBlock(c, send=send, recv=recv, channel=c, steps=steps))
        return
    dealt: list[list[Step]] = [[] for _ in range(lanes)]
    for q, st in zip(positions, steps):
        dealt[lane_of[q]].append(st)
    for lane, lane_steps in enumerate(dealt):
        tb = c * lanes + lane
        program.threadblocks.append(ThreadBlock(tb, send=send, recv=recv, channel=tb, steps=lane_steps))


def data_lane_of(n: int, data_lanes: int, dealing: str) -> list[int]:
    """The data lane of each position of a ring of ``n`` ranks dealt over ``data_lanes``
    as ``dealing`` says (module doc)."""
    if not 1 <= data_lanes <= n:
        raise SynthesisError(f"a ring of {n} ranks is dealt over 1 to {n} data lanes, not {data_lanes}")
    if dealing == "interleaved":
        return [q % data_lanes for q in range(n)]
    if dealing == "contiguous":
        per_lane = -(-n // data_lanes)
        if -(-n // per_lane) < data_lanes:
            raise SynthesisError(f"{data_lanes} contiguous data lanes of a ring of {n} ranks would leave one empty")
        return [q // per_lane for q in range(n)]
    raise SynthesisError(f"unknown dealing {dealing!r} (known: {', '.join(DEALINGS)})")


def ring_steps_per_threadblock(collective: str, n: int, data_lanes: int = 1) -> int:
    """The most steps a thread block of ``collective``'s ring kernel over ``n`` ranks holds
    with its chunks dealt over ``data_lanes``: all-reduce moves every chunk twice but the
    rank's own once, all-gather and reduce-scatter every chunk once, broadcast and reduce
    one chunk per channel."""
    per_lane = -(-n // data_lanes)
    if collective == "allreduce":
        return 2 * per_lane if data_lanes > 1 else 2 * n - 1
    if collective in ("allgather", "reducescatter"):
        return per_lane
    return 1


def ring_broadcast_algorithm(rings: Sequence[Sequence[int]], root: int = 0, name: str = "nccl-ring-broadcast",
                             protocol: Protocol = Protocol.SIMPLE) -> Algorithm:
    """NCCL's ring broadcast from ``root`` over ``rings`` (one chunk per channel), in place."""
    if not rings:
        raise SynthesisError("a ring broadcast needs at least one ring")
    n = len(rings[0])
    if not 0 <= root < n:
        raise SynthesisError(f"root {root} is not a rank (0-{n - 1})")
    k = len(rings)
    programs = [RankProgram(r, k, k) for r in range(n)]
    for c, ring in enumerate(rings):
        if sorted(ring) != list(range(n)):
            raise SynthesisError(f"ring {c} {list(ring)} does not visit every rank 0..{n - 1} exactly once")
        start = list(ring).index(root)
        _chain_threadblocks(programs, c, [ring[(start + j) % n] for j in range(n)],
                            Step(Op.SEND, _I, c, _I, c), Step(Op.RECV_COPY_SEND, _I, c, _I, c),
                            Step(Op.RECV, _I, c, _I, c))
    return Algorithm(name, "broadcast", n, k, programs, protocol=protocol, inplace=True, outofplace=False,
                     root=root)


def _chain_threadblocks(programs: list[RankProgram], c: int, chain: list[int], first: Step, middle: Step,
                        last: Step) -> None:
    """Ring ``c``'s thread blocks along ``chain`` (a path through every rank): the first
    rank's ``first`` step sends, each middle rank's ``middle`` step receives and sends
    on, the last rank's ``last`` step receives; thread block and channel ``c``. Each
    thread block gets its own copy of its step (steps are mutable)."""
    from dataclasses import replace

    n = len(chain)
    for j, rank in enumerate(chain):
        if j == 0:
            tb = ThreadBlock(c, send=chain[1], channel=c, steps=[replace(first)])
        elif j == n - 1:
            tb = ThreadBlock(c, recv=chain[j - 1], channel=c, steps=[replace(last)])
        else:
            tb = ThreadBlock(c, send=chain[j + 1], recv=chain[j - 1], channel=c, steps=[replace(middle)])
        programs[rank].threadblocks.append(tb)


def _check_rings(rings: Sequence[Sequence[int]], what: str) -> int:
    if not rings:
        raise SynthesisError(f"a ring {what} needs at least one ring")
    n = len(rings[0])
    for c, ring in enumerate(rings):
        if sorted(ring) != list(range(n)):
            raise SynthesisError(f"ring {c} {list(ring)} does not visit every rank 0..{n - 1} exactly once")
    if n < 2:
        raise SynthesisError(f"a ring {what} needs at least two ranks")
    return n


def ring_allgather_algorithm(rings: Sequence[Sequence[int]], name: str = "nccl-ring-allgather",
                             protocol: Protocol = Protocol.SIMPLE, data_lanes: int = 1,
                             dealing: str = "interleaved") -> Algorithm:
    """NCCL's ring all-gather over ``rings`` (one per channel), in place: rank r's block
    is output chunks ``r x C .. r x C + C - 1`` for C rings, channel c moving chunk c of
    every block; each ring's thread block dealt over ``data_lanes`` (module doc)."""
    return ring_algorithm("allgather", rings, 0, name, protocol, data_lanes, dealing)


def _allgather_blocks(rings: Sequence[Sequence[int]], n: int) -> Iterator[tuple]:
    """As :func:`_allreduce_blocks`, for the all-gather."""
    k = len(rings)
    for c, ring in enumerate(rings):
        block = [ring[q] * k + c for q in range(n)]  # the chunk of ring position q
        for p, rank in enumerate(ring):
            positions = [p, *((p - 1 - j) % n for j in range(n - 2)), (p + 1) % n]
            steps = [Step(Op.SEND, _O, block[p], _O, block[p])]
            steps += [Step(Op.RECV_COPY_SEND, _O, block[q], _O, block[q]) for q in positions[1:-1]]
            steps.append(Step(Op.RECV, _O, block[positions[-1]], _O, block[positions[-1]]))
            yield c, rank, ring[(p + 1) % n], ring[(p - 1) % n], steps, positions


def ring_reducescatter_algorithm(rings: Sequence[Sequence[int]], name: str = "nccl-ring-reducescatter",
                                 protocol: Protocol = Protocol.SIMPLE, data_lanes: int = 1,
                                 dealing: str = "interleaved") -> Algorithm:
    """NCCL's ring reduce-scatter over ``rings`` (one per channel): rank r's block is
    input chunks ``r x C .. r x C + C - 1`` for C rings, its output chunk c the sum of
    every rank's input chunk ``r x C + c``; each ring's thread block dealt over
    ``data_lanes`` (module doc)."""
    return ring_algorithm("reducescatter", rings, 0, name, protocol, data_lanes, dealing)


def _reducescatter_blocks(rings: Sequence[Sequence[int]], n: int) -> Iterator[tuple]:
    """As :func:`_allreduce_blocks`, for the reduce-scatter."""
    k = len(rings)
    for c, ring in enumerate(rings):
        block = [ring[q] * k + c for q in range(n)]  # the chunk of ring position q
        for p, rank in enumerate(ring):
            positions = [(p - 1 - j) % n for j in range(n - 1)] + [p]
            steps = [Step(Op.SEND, _I, block[positions[0]], _I, block[positions[0]])]
            steps += [Step(Op.RECV_REDUCE_SEND, _I, block[q], _I, block[q]) for q in positions[1:-1]]
            steps.append(Step(Op.RECV_REDUCE_COPY, _I, block[p], _O, c))
            yield c, rank, ring[(p + 1) % n], ring[(p - 1) % n], steps, positions


def ring_reduce_algorithm(rings: Sequence[Sequence[int]], root: int = 0, name: str = "nccl-ring-reduce",
                          protocol: Protocol = Protocol.SIMPLE) -> Algorithm:
    """NCCL's ring reduce to ``root`` over ``rings`` (one chunk per channel): the rank after
    the root sends, the others add their own and forward, the root adds into its output."""
    n = _check_rings(rings, "reduce")
    if not 0 <= root < n:
        raise SynthesisError(f"root {root} is not a rank (0-{n - 1})")
    k = len(rings)
    programs = [RankProgram(r, k, k) for r in range(n)]
    for c, ring in enumerate(rings):
        start = list(ring).index(root)
        _chain_threadblocks(programs, c, [ring[(start + 1 + j) % n] for j in range(n)],  # ends at the root
                            Step(Op.SEND, _I, c, _I, c), Step(Op.RECV_REDUCE_SEND, _I, c, _I, c),
                            Step(Op.RECV_REDUCE_COPY, _I, c, _O, c))
    return Algorithm(name, "reduce", n, k, programs, protocol=protocol, inplace=True, outofplace=True, root=root)


#: NCCL's collectives, each with its ring kernel's builder
RING_COLLECTIVES = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce")


def ring_algorithm(collective: str, rings: Sequence[Sequence[int]], root: int = 0, name: str | None = None,
                   protocol: Protocol = Protocol.SIMPLE, data_lanes: int = 1,
                   dealing: str = "interleaved") -> Algorithm:
    """NCCL's ring kernel of ``collective`` (one of :data:`RING_COLLECTIVES`) over ``rings``,
    all-reduce, all-gather and reduce-scatter dealt over ``data_lanes`` as ``dealing``
    says (module doc; broadcast and reduce hold one step per thread block and take 1)."""
    return ring_algorithms(collective, rings, root, name, protocol, data_lanes, (dealing,))[dealing]


#: the kernels that take data lanes: their name in messages, their thread blocks, whole,
#: (input chunks, output chunks) per ring of n ranks, and whether they also run out of place
_LANE_KERNELS = {
    "allreduce": ("all-reduce", _allreduce_blocks, lambda n: (n, n), True),
    "allgather": ("all-gather", _allgather_blocks, lambda n: (1, n), False),
    "reducescatter": ("reduce-scatter", _reducescatter_blocks, lambda n: (n, 1), True),
}


def ring_algorithms(collective: str, rings: Sequence[Sequence[int]], root: int = 0, name: str | None = None,
                    protocol: Protocol = Protocol.SIMPLE, data_lanes: int = 1,
                    dealings: Sequence[str] = ("interleaved",)) -> dict[str, Algorithm]:
    """:func:`ring_algorithm` for each of ``dealings`` (dealing -> algorithm), built from
    one set of steps: the algorithms share their step objects (nothing changes a step in
    place), so building every dealing costs little more than one."""
    name = name or f"nccl-ring-{collective}"
    if collective in _LANE_KERNELS:
        label, blocks, chunks, outofplace = _LANE_KERNELS[collective]
        n = _check_rings(rings, label)
        lane_maps = {d: data_lane_of(n, data_lanes, d) for d in dealings}
        k = len(rings)
        programs = {d: [RankProgram(r, *(k * c for c in chunks(n))) for r in range(n)] for d in lane_maps}
        with collector_paused():  # millions of acyclic steps
            for c, rank, send, recv, steps, positions in blocks(rings, n):
                for d, lane_of in lane_maps.items():
                    _deal_over_lanes(programs[d][rank], c, send, recv, steps, positions, data_lanes, lane_of)
        return {d: Algorithm(name, collective, n, n * k, progs, protocol=protocol, inplace=True,
                             outofplace=outofplace) for d, progs in programs.items()}
    if collective in RING_COLLECTIVES and data_lanes != 1:
        raise SynthesisError(f"NCCL's ring {collective} holds one step per thread block: it takes no data lanes")
    if collective == "broadcast":
        algorithm = ring_broadcast_algorithm(rings, root, name, protocol)
    elif collective == "reduce":
        algorithm = ring_reduce_algorithm(rings, root, name, protocol)
    else:
        raise SynthesisError(f"NCCL has no ring kernel for {collective} (it has: {', '.join(RING_COLLECTIVES)})")
    return dict.fromkeys(dealings, algorithm)
