"""NCCL's ring all-reduce and broadcast kernels written out as MSCCL steps, built directly.

Per channel NCCL runs one ring; every rank's thread block sends to the next rank of the
ring and receives from the previous one, and the buffer is cut into one chunk per rank
(NVIDIA/nccl ``src/device/all_reduce.h``, ``runRing``): a send, n-2
receive-reduce-sends, a receive-reduce-copy-send that completes the rank's own chunk,
n-2 receive-copy-sends and a final receive - 2(n-1) transfers per rank and channel.
Position p of a ring owns chunk p; at reduce-scatter step s it sends chunk p-s-1.
Broadcast (``runRing`` of ``broadcast.h``) sends each channel's share down the ring
from the root, which the runtime's slice loop pipelines: the root sends, every other
rank receives and forwards, the rank before the root only receives.

Written step by step here (no DSL, no compiler) because the simulator needs it at
thousands of ranks, where the ring holds millions of steps; the result is an ordinary
in-place all-reduce Algorithm, which the tests prove with the verifier and run against
the numpy reference.
"""

from __future__ import annotations

from typing import Sequence

from arborcc.collector import collector_paused
from arborcc.errors import SynthesisError
from arborcc.ir.model import Algorithm, Buffer, Op, Protocol, RankProgram, Step, ThreadBlock

_I = Buffer.INPUT


def ring_allreduce_algorithm(rings: Sequence[Sequence[int]], name: str = "nccl-ring-allreduce",
                             protocol: Protocol = Protocol.SIMPLE) -> Algorithm:
    """NCCL's ring all-reduce over ``rings`` (one per channel, each visiting every rank
    once; rank indices 0..n-1), in place, ``len(rings) x n`` chunks."""
    with collector_paused():  # millions of acyclic steps
        return _ring_allreduce(rings, name, protocol)


def _ring_allreduce(rings: Sequence[Sequence[int]], name: str, protocol: Protocol) -> Algorithm:
    if not rings:
        raise SynthesisError("a ring all-reduce needs at least one ring")
    n = len(rings[0])
    for c, ring in enumerate(rings):
        if sorted(ring) != list(range(n)):
            raise SynthesisError(f"ring {c} {list(ring)} does not visit every rank 0..{n - 1} exactly once")
    if n < 2:
        raise SynthesisError("a ring all-reduce needs at least two ranks")
    programs = [RankProgram(r, n * len(rings), n * len(rings)) for r in range(n)]
    send, reduce_send, reduce_copy_send, copy_send, recv = (
        Op.SEND, Op.RECV_REDUCE_SEND, Op.RECV_REDUCE_COPY_SEND, Op.RECV_COPY_SEND, Op.RECV)
    for c, ring in enumerate(rings):
        base = c * n
        for p, rank in enumerate(ring):
            # behind[s]: the chunk s + 1 places behind position p's own, sent at step s
            behind = [base + (p - s - 1) % n for s in range(n - 1)]
            own, ahead = base + p, base + (p + 1) % n
            steps = [Step(send, _I, behind[0], _I, behind[0])]
            steps += [Step(reduce_send, _I, k, _I, k) for k in behind[1:]]
            steps.append(Step(reduce_copy_send, _I, own, _I, own))
            steps += [Step(copy_send, _I, k, _I, k) for k in behind[:-1]]
            steps.append(Step(recv, _I, ahead, _I, ahead))
            programs[rank].threadblocks.append(
                ThreadBlock(c, send=ring[(p + 1) % n], recv=ring[(p - 1) % n], channel=c, steps=steps))
    return Algorithm(name, "allreduce", n, n * len(rings), programs, protocol=protocol, inplace=True,
                     outofplace=False)


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
        chain = [ring[(start + j) % n] for j in range(n)]
        for j, rank in enumerate(chain):
            if j == 0:
                tb = ThreadBlock(c, send=chain[1], channel=c, steps=[Step(Op.SEND, _I, c, _I, c)])
            elif j == n - 1:
                tb = ThreadBlock(c, recv=chain[j - 1], channel=c, steps=[Step(Op.RECV, _I, c, _I, c)])
            else:
                tb = ThreadBlock(c, send=chain[j + 1], recv=chain[j - 1], channel=c,
                                 steps=[Step(Op.RECV_COPY_SEND, _I, c, _I, c)])
            programs[rank].threadblocks.append(tb)
    return Algorithm(name, "broadcast", n, k, programs, protocol=protocol, inplace=True, outofplace=False,
                     root=root)
