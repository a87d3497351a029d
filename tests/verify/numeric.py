"""A tiny concrete interpreter of the IR, independent of arborcc.verify.

It runs an algorithm on random integer inputs (round-robin over thread blocks,
unbounded FIFOs, a dependency satisfied once its target step has run) and compares
the outputs with numpy references of the collectives. The tests use it to confirm
that what the verifier accepts really computes the collective.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from arborcc.ir.model import Algorithm, Buffer, Op

_SENDS = {Op.SEND, Op.RECV_REDUCE_SEND, Op.RECV_COPY_SEND, Op.RECV_REDUCE_COPY_SEND}
_RECVS = {Op.RECV, Op.RECV_REDUCE_COPY, Op.RECV_REDUCE_SEND, Op.RECV_COPY_SEND, Op.RECV_REDUCE_COPY_SEND}


def run(algo: Algorithm, inputs: dict[int, np.ndarray], inplace: bool = False) -> dict[int, np.ndarray]:
    """Execute; ``inputs[r]`` has one integer per input chunk. Returns each rank's output."""
    mem = {}
    for p in algo.ranks:
        i = np.array(inputs[p.rank], dtype=np.int64)
        o = np.full(p.output_chunks, -10**12, dtype=np.int64)  # poison: uninitialized
        if inplace and algo.collective == "allreduce":
            o = i  # one buffer
        elif inplace and algo.collective == "allgather":
            o[p.rank * p.input_chunks:(p.rank + 1) * p.input_chunks] = i
            i = o[p.rank * p.input_chunks:(p.rank + 1) * p.input_chunks]
        mem[p.rank] = {Buffer.INPUT: i, Buffer.OUTPUT: o,
                       Buffer.SCRATCH: np.full(p.scratch_chunks, -10**12, dtype=np.int64)}
    fifo: dict[tuple[int, int, int], deque] = {}
    tbs = [(p.rank, tb) for p in algo.ranks for tb in p.threadblocks]
    pc = {(r, tb.id): 0 for r, tb in tbs}
    done = {(r, tb.id): -1 for r, tb in tbs}
    progress = True
    while progress:
        progress = False
        for r, tb in tbs:
            key = (r, tb.id)
            while pc[key] < len(tb.steps):
                st = tb.steps[pc[key]]
                if st.dep is not None and done[(r, st.dep.tb)] < st.dep.step:
                    break
                inq = fifo.setdefault((tb.recv, r, tb.channel), deque())
                if st.op in _RECVS and not inq:
                    break
                m = mem[r]
                c = st.count
                got = inq.popleft() if st.op in _RECVS else None
                src = m[st.src_buf][st.src_off:st.src_off + c].copy() if st.src_buf is not None else None
                out = None
                if st.op is Op.SEND:
                    out = src
                elif st.op is Op.RECV:
                    m[st.dst_buf][st.dst_off:st.dst_off + c] = got
                elif st.op is Op.COPY:
                    m[st.dst_buf][st.dst_off:st.dst_off + c] = src
                elif st.op is Op.REDUCE:
                    m[st.dst_buf][st.dst_off:st.dst_off + c] += src
                elif st.op is Op.RECV_REDUCE_COPY:
                    m[st.dst_buf][st.dst_off:st.dst_off + c] = src + got
                elif st.op is Op.RECV_REDUCE_SEND:
                    out = src + got
                elif st.op is Op.RECV_COPY_SEND:
                    m[st.dst_buf][st.dst_off:st.dst_off + c] = got
                    out = got
                elif st.op is Op.RECV_REDUCE_COPY_SEND:
                    out = src + got
                    m[st.dst_buf][st.dst_off:st.dst_off + c] = out
                if st.op in _SENDS:
                    fifo.setdefault((r, tb.send, tb.channel), deque()).append(np.array(out))
                done[key] = pc[key]
                pc[key] += 1
                progress = True
    assert all(pc[(r, tb.id)] == len(tb.steps) for r, tb in tbs), "the numeric run got stuck"
    return {r: mem[r][Buffer.OUTPUT] for r in mem}


def reference(algo: Algorithm, inputs: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """numpy result of the collective (chunk layouts as in docs/ir.md)."""
    n, k = algo.num_ranks, algo.chunks_per_loop
    x = np.stack([np.asarray(inputs[r]) for r in range(n)])
    root = algo.root or 0
    if algo.collective == "allreduce":
        return {r: x.sum(0) for r in range(n)}
    if algo.collective == "allgather":
        return {r: x.reshape(-1) for r in range(n)}
    if algo.collective == "reducescatter":
        b = k // n
        return {r: x.sum(0)[r * b:(r + 1) * b] for r in range(n)}
    if algo.collective == "alltoall":
        b = k // n
        return {r: np.concatenate([x[q, r * b:(r + 1) * b] for q in range(n)]) for r in range(n)}
    if algo.collective == "broadcast":
        return {r: x[root] for r in range(n)}
    raise NotImplementedError(algo.collective)


def check(algo: Algorithm, seed: int = 0, inplace: bool = False) -> None:
    rng = np.random.default_rng(seed)
    inputs = {p.rank: rng.integers(0, 1000, p.input_chunks) for p in algo.ranks}
    got = run(algo, inputs, inplace)
    want = reference(algo, {r: v.copy() for r, v in inputs.items()})
    for r in want:
        np.testing.assert_array_equal(got[r], want[r], err_msg=f"rank {r}")
