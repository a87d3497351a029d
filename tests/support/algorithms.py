"""Small pure-Python builders of correct IR, for the verifier's and the IR's tests.

Each returns an :class:`Algorithm` written the way the GC3 paper describes the
algorithm (section 7: ring, all-pairs, direct all-to-all). ``Step`` objects with equal
fields are shared (interned) so that a 1024-rank ring stays small in memory; tests
that mutate steps must copy the algorithm first (``copy.deepcopy``).
"""

from __future__ import annotations

from arborcc.ir.model import (
    Algorithm,
    Buffer,
    Dependency,
    Op,
    RankProgram,
    Step,
    ThreadBlock,
)

I, O, S = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH


class _Steps:
    """Interning factory: one Step object per distinct field tuple."""

    def __init__(self) -> None:
        self.cache: dict[tuple, Step] = {}

    def __call__(self, op: Op, src=None, src_off=-1, dst=None, dst_off=-1, count=1, dep=None, has_dep=False) -> Step:
        key = (op, src, src_off, dst, dst_off, count, dep, has_dep)
        st = self.cache.get(key)
        if st is None:
            st = self.cache[key] = Step(op, src, src_off, dst, dst_off, count, dep, has_dep)
        return st


def ring_allreduce(n: int, channels: int = 1, inplace: bool = False) -> Algorithm:
    """Ring all-reduce (GC3 7.1.1): reduce-scatter then all-gather around the ring.

    ``K = n * channels`` chunks; channel ``ch`` carries chunks ``ch*n .. ch*n+n-1`` on its
    own thread block per rank (send to ``r+1``, receive from ``r-1``). Steps per
    thread block: ``s``, ``n-2`` x ``rrs``, ``rrcs``, ``n-2`` x ``rcs``, ``r`` = 2n-1.
    """
    assert n >= 2
    mk = _Steps()
    src = O if inplace else I
    ranks = []
    for r in range(n):
        tbs = []
        for ch in range(channels):
            b = ch * n
            steps = [mk(Op.SEND, src, b + r, O, b + r)]
            for k in range(1, n - 1):
                c = b + (r - k) % n
                steps.append(mk(Op.RECV_REDUCE_SEND, src, c, O, c))
            c = b + (r + 1) % n
            steps.append(mk(Op.RECV_REDUCE_COPY_SEND, src, c, O, c))
            for k in range(1, n - 1):
                c = b + (r + 1 - k) % n
                steps.append(mk(Op.RECV_COPY_SEND, None, -1, O, c))
            c = b + (r + 2) % n
            steps.append(mk(Op.RECV, None, -1, O, c))
            tbs.append(ThreadBlock(ch, send=(r + 1) % n, recv=(r - 1) % n, channel=ch, steps=steps))
        ranks.append(RankProgram(r, n * channels, n * channels, 0, tbs))
    return Algorithm(f"ring_allreduce_n{n}_c{channels}", "allreduce", n, n * channels, ranks,
                     inplace=inplace, outofplace=not inplace)


def ring_allgather(n: int, channels: int = 1, inplace: bool = False) -> Algorithm:
    """Ring all-gather: ``K = n * channels``; rank r's input chunk t goes to output r*B+t.

    Out-of-place ranks first copy their own input into place (``cpy``).
    """
    mk = _Steps()
    b = channels
    ranks = []
    for r in range(n):
        tbs = []
        for ch in range(channels):
            own = r * b + ch
            steps = [] if inplace else [mk(Op.COPY, I, ch, O, own)]
            steps.append(mk(Op.SEND, O, own, O, own))
            for k in range(1, n - 1):
                steps.append(mk(Op.RECV_COPY_SEND, None, -1, O, ((r - k) % n) * b + ch))
            steps.append(mk(Op.RECV, None, -1, O, ((r - (n - 1)) % n) * b + ch))
            tbs.append(ThreadBlock(ch, send=(r + 1) % n, recv=(r - 1) % n, channel=ch, steps=steps))
        ranks.append(RankProgram(r, b, n * b, 0, tbs))
    return Algorithm(f"ring_allgather_n{n}_c{channels}", "allgather", n, n * b, ranks,
                     inplace=inplace, outofplace=not inplace)


def ring_reducescatter(n: int, channels: int = 1) -> Algorithm:
    """Ring reduce-scatter: rank r ends with output chunk t = sum of input chunks r*B+t."""
    mk = _Steps()
    b = channels
    ranks = []
    for r in range(n):
        tbs = []
        for ch in range(channels):
            steps = [mk(Op.SEND, I, ((r - 1) % n) * b + ch, I, ((r - 1) % n) * b + ch)]
            for k in range(1, n - 1):
                c = ((r - k - 1) % n) * b + ch
                steps.append(mk(Op.RECV_REDUCE_SEND, I, c, I, c))
            steps.append(mk(Op.RECV_REDUCE_COPY, I, r * b + ch, O, ch))
            tbs.append(ThreadBlock(ch, send=(r + 1) % n, recv=(r - 1) % n, channel=ch, steps=steps))
        ranks.append(RankProgram(r, n * b, b, 0, tbs))
    return Algorithm(f"ring_reducescatter_n{n}_c{channels}", "reducescatter", n, n * b, ranks)


def tree_broadcast(n: int, chunks: int = 2, root: int = 0, arity: int = 2) -> Algorithm:
    """Pipelined broadcast down a tree of the given arity (arity 1 = a chain).

    Ranks are numbered from the root (position p = (rank - root) mod n; parent of p is
    (p-1)//arity). On each non-root rank one thread block receives from the parent and
    forwards to the first child (``rcs``); every further child has its own thread block
    sending each chunk after the receive of that chunk signalled (a dependency). The
    root copies its input to its output and sends from the output.
    """
    mk = _Steps()

    def rank_of(p: int) -> int:
        return (p + root) % n

    ranks = []
    for r in range(n):
        p = (r - root) % n
        kids = [rank_of(c) for c in range(p * arity + 1, min(p * arity + arity, n - 1) + 1)]
        tbs = []
        if p == 0:
            copy_tb = ThreadBlock(0, steps=[mk(Op.COPY, I, c, O, c, has_dep=True) for c in range(chunks)])
            tbs.append(copy_tb)
            for j, kid in enumerate(kids):
                tbs.append(ThreadBlock(j + 1, send=kid, channel=0,
                                       steps=[mk(Op.SEND, O, c, O, c, dep=Dependency(0, c)) for c in range(chunks)]))
        else:
            parent = rank_of((p - 1) // arity)
            first = kids[0] if kids else -1
            signal = len(kids) > 1
            op = Op.RECV_COPY_SEND if kids else Op.RECV
            tbs.append(ThreadBlock(0, send=first, recv=parent, channel=0,
                                   steps=[mk(op, None, -1, O, c, has_dep=signal) for c in range(chunks)]))
            for j, kid in enumerate(kids[1:]):
                tbs.append(ThreadBlock(j + 1, send=kid, channel=0,
                                       steps=[mk(Op.SEND, O, c, O, c, dep=Dependency(0, c)) for c in range(chunks)]))
        ranks.append(RankProgram(r, chunks, chunks, 0, tbs))
    return Algorithm(f"tree_broadcast_n{n}_a{arity}", "broadcast", n, chunks, ranks, root=root)


def chain_broadcast(n: int, chunks: int = 2, root: int = 0) -> Algorithm:
    return tree_broadcast(n, chunks, root, arity=1)


def direct_alltoall(n: int, per_peer: int = 1) -> Algorithm:
    """All-to-all with one thread block per peer (send and receive) and a local copy.

    ``K = n * per_peer``; rank r's input chunks q*B..q*B+B-1 go to rank q's output
    chunks r*B..r*B+B-1, in one aggregated step of ``cnt = B``.
    """
    mk = _Steps()
    b = per_peer
    ranks = []
    for r in range(n):
        tbs = [ThreadBlock(0, steps=[mk(Op.COPY, I, r * b, O, r * b, count=b)])]
        for q in range(n):
            if q == r:
                continue
            tbs.append(ThreadBlock(len(tbs), send=q, recv=q, channel=0,
                                   steps=[mk(Op.SEND, I, q * b, O, r * b, count=b),
                                          mk(Op.RECV, I, r * b, O, q * b, count=b)]))
        ranks.append(RankProgram(r, n * b, n * b, 0, tbs))
    return Algorithm(f"direct_alltoall_n{n}", "alltoall", n, n * b, ranks)


def allpairs_allreduce(n: int) -> Algorithm:
    """All-pairs all-reduce (GC3 7.1.2) with scratch, local reductions and ``nop`` steps.

    Rank r owns chunk r. Thread block q-th peer (send/recv to that peer): send my
    chunk of the peer, receive the peer's copy of my chunk into scratch slot of the
    peer (signalling), then - after the reduction - send my reduced chunk and receive
    the peer's reduced chunk into the output. A local thread block waits for all
    receives (``nop`` chain, the last dependency on the first ``re``), copies my
    input chunk to the output and reduces the scratch chunks into it (``re``).
    """
    mk = _Steps()
    ranks = []
    for r in range(n):
        peers = [q for q in range(n) if q != r]
        red_id = len(peers)  # the local reduction thread block
        last_re = 1 + (len(peers) - 1) + len(peers) - 1  # cpy, nops, res
        tbs = []
        for t, q in enumerate(peers):
            tbs.append(ThreadBlock(t, send=q, recv=q, channel=0, steps=[
                mk(Op.SEND, I, q, S, r),
                mk(Op.RECV, I, r, S, q, has_dep=True),
                mk(Op.SEND, O, r, O, r, dep=Dependency(red_id, last_re)),
                mk(Op.RECV, O, q, O, q),
            ]))
        steps = [mk(Op.COPY, I, r, O, r)]
        for t in range(len(peers) - 1):
            steps.append(mk(Op.NOP, dep=Dependency(t, 1)))
        for j, q in enumerate(peers):
            dep = Dependency(len(peers) - 1, 1) if j == 0 else None
            steps.append(mk(Op.REDUCE, S, q, O, r, dep=dep, has_dep=(j == len(peers) - 1)))
        assert len(steps) - 1 == last_re
        tbs.append(ThreadBlock(red_id, steps=steps))
        ranks.append(RankProgram(r, n, n, n, tbs))
    return Algorithm(f"allpairs_allreduce_n{n}", "allreduce", n, n, ranks)


def ring_allreduce_split(n: int) -> Algorithm:
    """Ring all-reduce with separate sending and receiving thread blocks per rank.

    tb 0 receives from ``r-1`` (``rrc`` into the output, then ``r``), signalling each
    step; tb 1 sends to ``r+1``, each send waiting for the receive that produced its
    chunk. A chunk's partial sum is overwritten by its final value in the all-gather
    phase; that overwrite is ordered after tb 1's read of the partial only through the
    ring (the final value arrives from the other ranks), which the race check must see.
    """
    mk = _Steps()
    ranks = []
    for r in range(n):
        recv_steps, send_steps = [], [mk(Op.SEND, I, r, O, r)]
        for k in range(1, n):  # reduce-scatter: receive the partial of chunk r-k, add mine
            c = (r - k) % n
            recv_steps.append(mk(Op.RECV_REDUCE_COPY, I, c, O, c, has_dep=True))
            if k < n - 1:
                send_steps.append(mk(Op.SEND, O, c, O, c, dep=Dependency(0, k - 1)))
        c = (r + 1) % n  # fully reduced here after the last rrc
        send_steps.append(mk(Op.SEND, O, c, O, c, dep=Dependency(0, n - 2)))
        for k in range(1, n):  # all-gather: receive final chunk r+1-k, forward all but the last
            c = (r + 1 - k) % n
            recv_steps.append(mk(Op.RECV, None, -1, O, c, has_dep=k < n - 1))
            if k < n - 1:
                send_steps.append(mk(Op.SEND, O, c, O, c, dep=Dependency(0, n - 2 + k)))
        tbs = [ThreadBlock(0, recv=(r - 1) % n, channel=0, steps=recv_steps),
               ThreadBlock(1, send=(r + 1) % n, channel=0, steps=send_steps)]
        ranks.append(RankProgram(r, n, n, 0, tbs))
    return Algorithm(f"ring_allreduce_split_n{n}", "allreduce", n, n, ranks)
