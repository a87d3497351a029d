"""Direct algorithms: every rank talks to every other rank in one step, written in the DSL
(the owner all-reduce and the reduce-scatter as IR directly).

They are the runtime's built-in algorithms (:mod:`arborcc.runtime.direct` keeps one
object per argument list and :mod:`arborcc.runtime.plan` chooses among them per call):
the latency-bound choice for small buffers (one step, as the one-shot all-reduce of the
fastest CPU shared-memory all-reduces) and, since every chunk moves once, the
bandwidth-bound choice on a machine whose ranks all share one memory. They also carry
the elements of a call that do not divide into an algorithm's chunks (the "tail", see
:mod:`arborcc.runtime.lowering`).

Reductions run in a fixed rank order (0, 1, ..., n-1) or on one owner rank, so every
rank ends with bit-identical results, as data-parallel training needs.
"""

from __future__ import annotations

from arborcc.ir.model import Algorithm, Buffer, Dependency, Op, RankProgram, Step, ThreadBlock
from arborcc.lang import AllGather, AllReduce, AllToAll, Broadcast, Gather, Program, Reduce, Scatter, chunk

IN, OUT, SCRATCH = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH

#: collectives with a direct algorithm
DIRECT_COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce", "gather",
                      "scatter")


def _one_shot_allreduce(n: int, inplace: bool) -> None:
    # every rank sums all inputs in rank order into its output (scratch when in place:
    # the input must stay readable by the others until they have it). Below the plan's
    # staged_small_bytes this program's native twin runs it (runtime/csrc/staged_oneshot.hpp:
    # the sends are one copy into the rank's staging slot, which also serves as the scratch,
    # and the sum is in the same order); this is the algorithm the verifier proves.
    acc_buf = SCRATCH if inplace else OUT
    sums = []
    for r in range(n):
        acc = chunk(0, IN, 0).copy(r, acc_buf, 0)
        for p in range(1, n):
            acc = acc.reduce(chunk(p, IN, 0))
        sums.append(acc)
    if inplace:  # only after every rank has read every input
        for r, acc in enumerate(sums):
            acc.copy(r, OUT, 0)


def _allgather(n: int, inplace: bool) -> None:
    for r in range(n):
        c = chunk(r, IN, 0)
        c.copy(r, OUT, r)  # a no-op in place: the input is that block
        for p in range(n):
            if p != r:
                c.copy(p, OUT, r)


def trace_direct_alltoall(n: int, inplace: bool) -> None:
    """Trace the direct all-to-all of ``n`` ranks (one chunk per block) into the current
    program: source by source, every block straight to its destination. The runtime's
    built-in (:func:`build_direct_algorithm`) and the synthesizer's ``direct`` strategy
    (:func:`arborcc.synth.alltoall.lower_direct`, out of place) trace this one."""
    if not inplace:
        for r in range(n):
            for j in range(n):
                chunk(r, IN, j).copy(j, OUT, r)
        return
    # in place every block is overwritten: park incoming blocks in scratch first
    for r in range(n):
        for j in range(n):
            chunk(r, IN, j).copy(j, SCRATCH, r)
    for j in range(n):
        for r in range(n):
            chunk(j, SCRATCH, r).copy(j, OUT, r)


def _broadcast(n: int, inplace: bool, root: int) -> None:
    c = chunk(root, IN, 0)
    if not inplace:
        c.copy(root, OUT, 0)
    for p in range(n):
        if p != root:
            c.copy(p, OUT, 0)


def _reduce(n: int, inplace: bool, root: int) -> None:
    acc = chunk(root, IN, 0)
    if not inplace:
        acc = acc.copy(root, OUT, 0)
    for p in range(n):
        if p != root:
            acc = acc.reduce(chunk(p, IN, 0))


def _gather(n: int, inplace: bool, root: int) -> None:
    for r in range(n):
        if r != root or not inplace:
            chunk(r, IN, 0).copy(root, OUT, r)


def _scatter(n: int, inplace: bool, root: int) -> None:
    for r in range(n):
        if r != root or not inplace:
            chunk(root, IN, r).copy(r, OUT, 0)


def build_direct_algorithm(collective: str, num_ranks: int, inplace: bool, root: int = 0,
                           owner: bool = False) -> Algorithm:
    """The direct algorithm of ``collective`` (one of :data:`DIRECT_COLLECTIVES`) on
    ``num_ranks`` ranks, built anew.

    One chunk per rank block, except ``owner=True`` for all-reduce: ``num_ranks`` chunks,
    rank r reduces chunk r and sends it to all (reduce-scatter + all-gather, every byte
    reduced once); without it every rank reduces everything (one-shot, one step).
    """
    n, ip = num_ranks, inplace
    tag = "inplace" if ip else "outofplace"
    if collective == "allreduce" and owner:
        return owner_allreduce(n, ip)
    if collective == "reducescatter":
        return direct_reducescatter(n, ip)
    if collective == "allreduce":
        coll = AllReduce(n, 1, ip)
        body = (lambda: _one_shot_allreduce(n, ip))
        name = f"direct-oneshot-allreduce-{n}r-{tag}"
    elif collective in ("allgather", "alltoall"):
        coll = {"allgather": AllGather, "alltoall": AllToAll}[collective](n, 1, ip)
        body = {"allgather": _allgather, "alltoall": trace_direct_alltoall}[collective]
        body = (lambda f=body: f(n, ip))
        name = f"direct-{collective}-{n}r-{tag}"
    elif collective in ("broadcast", "reduce", "gather", "scatter"):
        kinds = {"broadcast": (Broadcast, _broadcast), "reduce": (Reduce, _reduce), "gather": (Gather, _gather),
                 "scatter": (Scatter, _scatter)}
        cls, fn = kinds[collective]
        coll = cls(n, 1, ip, root)
        body = (lambda: fn(n, ip, root))
        name = f"direct-{collective}-{n}r-root{root}-{tag}"
    else:
        raise ValueError(f"no direct algorithm for collective {collective!r}")
    with Program(name, coll) as prog:
        body()
    return prog.compile()


def owner_allreduce(num_ranks: int, inplace: bool) -> Algorithm:
    """Reduce-scatter + all-gather with one owner per chunk, written as IR directly.

    Rank r owns chunk r. It has one thread block per peer p (send to p, receive from p):
    send my chunk p to its owner; receive p's chunk r and reduce it into my result
    (``rrc`` from the input straight to the output for the first peer, so no separate
    copy pass; the peers' thread blocks chain their reductions in rank order); once the
    last reduction is done, send the result to p; receive p's result. Every byte moves
    once and is reduced once, by its owner, so all ranks end bit-identical.
    """
    n = num_ranks
    out = IN if inplace else OUT
    ranks = []
    for r in range(n):
        peers = [p for p in range(n) if p != r]
        tbs = []
        for i, p in enumerate(peers):
            dep = Dependency(i - 1, 1) if i else None
            first_src = (IN, r) if i == 0 else (out, r)
            tbs.append(ThreadBlock(i, send=p, recv=p, channel=0, steps=[
                Step(Op.SEND, IN, p, out, p),
                Step(Op.RECV_REDUCE_COPY, first_src[0], first_src[1], out, r, dep=dep, has_dep=True),
                Step(Op.SEND, out, r, out, r, dep=Dependency(len(peers) - 1, 1) if i < len(peers) - 1 else None),
                Step(Op.RECV, out, p, out, p),
            ]))
        if not peers and not inplace:
            tbs.append(ThreadBlock(0, steps=[Step(Op.COPY, IN, 0, OUT, 0)]))
        ranks.append(RankProgram(r, n, n, 0, tbs))
    return Algorithm(f"direct-owner-allreduce-{n}r-{'inplace' if inplace else 'outofplace'}", "allreduce", n, n,
                     ranks, inplace=inplace, outofplace=not inplace)


def direct_reducescatter(num_ranks: int, inplace: bool) -> Algorithm:
    """Reduce-scatter in one step, written as IR directly: rank r sends its block p to
    every peer p and reduces the peers' blocks r into its result in rank order. The first
    reduction reads the rank's own block straight from the input (``rrc`` from the input
    to the output), so no separate copy pass over the result; in place the result is
    the rank's own block of the input."""
    n = num_ranks
    ranks = []
    for r in range(n):
        peers = [p for p in range(n) if p != r]
        result = (IN, r) if inplace else (OUT, 0)
        tbs = [ThreadBlock(i, send=p, recv=-1, channel=0, steps=[
            Step(Op.SEND, IN, p, *((IN, p) if inplace else (OUT, 0)))]) for i, p in enumerate(peers)]
        for i, p in enumerate(peers):
            first = i == 0
            src = (IN, r) if first else result
            tbs.append(ThreadBlock(len(tbs), send=-1, recv=p, channel=0, steps=[
                Step(Op.RECV_REDUCE_COPY, src[0], src[1], result[0], result[1],
                     dep=None if first else Dependency(len(tbs) - 1, 0), has_dep=i < len(peers) - 1)]))
        if not peers and not inplace:
            tbs.append(ThreadBlock(0, steps=[Step(Op.COPY, IN, 0, OUT, 0)]))
        ranks.append(RankProgram(r, n, 1, 0, tbs))
    tag = "inplace" if inplace else "outofplace"
    return Algorithm(f"direct-reducescatter-{n}r-{tag}", "reducescatter", n, n, ranks, inplace=inplace,
                     outofplace=not inplace)
