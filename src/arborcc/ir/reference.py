"""The reference executor of the IR in numpy: the semantics every runtime must match.

Runs an :class:`~arborcc.ir.model.Algorithm` on random float64 arrays: every rank has
input/output/scratch buffers of ``chunks x elems``; every thread block walks its steps in
order; a step runs only when its dependency (another thread block's step) is done, its
receive finds a message in the FIFO of its connection (peer, channel), and its send finds
room in the FIFO of its outgoing connection (``slots`` messages at most, as the runtime's
connection buffers). Fused steps are atomic. If no thread block can move while some are
unfinished, the algorithm deadlocks and :class:`Deadlock` is raised.

Semantics of the steps (GC3 section 4.2, MSCCL runtime):

====  ==============================================================
s     send src
r     dst = received
rrc   dst = src + received
rrs   send (src + received)
rcs   dst = received; send received
rrcs  dst = src + received; send dst
cpy   dst = src
re    dst = dst + src
nop   nothing (carries a dependency)
====  ==============================================================

Uninitialized output and scratch hold NaN, so reading them poisons the result.
A run is a call in one mode: its buffers are laid out by :mod:`arborcc.ir.aliasing`
(out of place the send and receive buffers are separate; in place they are the same
memory, all-gather's input being rank r's block of the output and reduce-scatter's
output rank r's block of the input), and every IR buffer is a numpy view into them,
so an in-place algorithm runs on aliased memory exactly as a runtime would run it.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

from collections import deque

import numpy as np

from arborcc.errors import ArborccError
from arborcc.ir.aliasing import Mode, declared_modes, layouts
from arborcc.ir.model import Algorithm, Buffer


class Deadlock(ArborccError):
    """No thread block can move while some have steps left."""


class MessageMismatch(ArborccError):
    """A receive got a message of another size, or messages were never received."""


def default_mode(algo: Algorithm) -> Mode:
    """The mode a run uses unless told: out-of-place if the algorithm claims it, else in-place."""
    modes = declared_modes(algo)
    return modes[0] if modes else Mode.OUTOFPLACE


def make_inputs(algo: Algorithm, elems: int = 3, seed: int = 0) -> list[np.ndarray]:
    """Random data for every rank, by rank: as many chunks as the rank passes to the call."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((lay.sent_chunks, elems)) for lay in layouts(algo, Mode.OUTOFPLACE)]


#: key of the rank's result region in the buffers of a run
_RESULT = "result"


def _buffers(algo: Algorithm, inputs: list[np.ndarray], elems: int, mode: Mode) -> list[dict]:
    """Per rank, the IR's three buffers as views into the call's buffers (NaN where unset)."""
    bufs = []
    by_rank = {p.rank: p for p in algo.ranks}
    for lay in layouts(algo, mode):
        prog = by_rank[lay.rank]
        declared = {Buffer.INPUT: prog.input_chunks, Buffer.OUTPUT: prog.output_chunks,
                    Buffer.SCRATCH: prog.scratch_chunks}
        call = {b: np.full((lay.size(b), elems), np.nan) for b in Buffer}
        where, first, count = lay.data
        if lay.data_defined:
            call[where][first:first + count] = inputs[lay.rank]
        views = {b: call[w][off:off + declared[b]] for b, (w, off) in lay.placement.items()}
        views[_RESULT] = call[lay.result[0]][lay.result[1]:lay.result[1] + lay.received_chunks]
        bufs.append(views)
    return bufs


def run(algo: Algorithm, inputs: list[np.ndarray], slots: int = 2, max_rounds: int | None = None,
        mode: Mode | None = None) -> list[np.ndarray]:
    """Execute ``algo`` as a call in ``mode`` (default :func:`default_mode`); returns every
    rank's result (a copy of the region the collective leaves it in)."""
    bufs = execute(algo, inputs, slots, max_rounds, mode)
    return [b[_RESULT].copy() for b in bufs]


def execute(algo: Algorithm, inputs: list[np.ndarray], slots: int = 2, max_rounds: int | None = None,
            mode: Mode | None = None) -> list[dict]:
    """Execute ``algo`` as :func:`run` does; returns every rank's IR buffers after the call
    (``{Buffer: array}``, views into the call's memory, so aliased buffers share it)."""
    mode = default_mode(algo) if mode is None else Mode(mode)
    elems = inputs[0].shape[1] if inputs else 1
    bufs = _buffers(algo, inputs, elems, mode)
    fifos: dict[tuple[int, int, int], deque] = {}
    # (rank, tb id) -> [tb, next step index]
    state = {}
    for rp in algo.ranks:
        for tb in rp.threadblocks:
            state[(rp.rank, tb.id)] = [tb, 0]
    done = {key: -1 for key in state}  # last finished step per thread block

    def region(rank: int, buf: Buffer, off: int, cnt: int) -> np.ndarray:
        arr = bufs[rank][buf]
        if off < 0 or off + cnt > arr.shape[0]:
            raise IndexError(f"rank {rank}: {buf.value}[{off}:{off + cnt}] outside a buffer of {arr.shape[0]} chunks")
        return arr[off:off + cnt]

    pending = list(state.items())
    rounds = 0
    while pending:
        progressed = False
        still = []
        for key, st in pending:
            rank, _ = key
            tb, idx = st
            while idx < len(tb.steps):
                step = tb.steps[idx]
                if step.dep is not None and done.get((rank, step.dep.tb), -1) < step.dep.step:
                    break
                op = step.op
                q_in = fifos.setdefault((tb.recv, rank, tb.channel), deque()) if op.receives else None
                q_out = fifos.setdefault((rank, tb.send, tb.channel), deque()) if op.sends else None
                if q_in is not None and not q_in:
                    break
                if q_out is not None and len(q_out) >= slots:
                    break
                received = None
                if q_in is not None:
                    received = q_in.popleft()
                    if received.shape[0] != step.count:
                        raise MessageMismatch(
                            f"rank {rank} tb {tb.id} step {idx}: received {received.shape[0]} chunks, "
                            f"step expects {step.count}")
                # the step's value (arborcc.ir.steps): received, + src where it reads its
                # source, or dst + src; written where it writes, pushed where it sends
                src = region(rank, step.src_buf, step.src_off, step.count).copy() if op.reads_src else None
                value = received if op.receives else src
                if op.receives and op.reads_src:
                    value = src + received
                if op.reads_dst:
                    value = region(rank, step.dst_buf, step.dst_off, step.count) + src
                if op.writes_dst:
                    region(rank, step.dst_buf, step.dst_off, step.count)[:] = value
                sent = value.copy() if op.sends else None
                if q_out is not None:
                    q_out.append(sent)
                done[key] = idx
                idx += 1
                progressed = True
            st[1] = idx
            if idx < len(tb.steps):
                still.append((key, st))
        pending = still
        rounds += 1
        if pending and not progressed:
            stuck = ", ".join(f"rank {k[0]} tb {k[1]} at step {s[1]} ({s[0].steps[s[1]].op.value})"
                              for k, s in pending[:6])
            raise Deadlock(f"no thread block can proceed: {stuck}")
        if max_rounds and rounds > max_rounds:
            raise Deadlock("too many rounds")
    leftover = {k: len(v) for k, v in fifos.items() if v}
    if leftover:
        raise MessageMismatch(f"messages sent but never received: {leftover}")
    return bufs


def reference(algo: Algorithm, inputs: list[np.ndarray]) -> list[np.ndarray | None]:
    """What each rank's output must be for the algorithm's collective (None: anything)."""
    coll, n = algo.collective, algo.num_ranks
    total = sum(inputs)
    if coll == "allreduce":
        return [total.copy() for _ in range(n)]
    if coll == "allgather":
        return [np.concatenate(inputs) for _ in range(n)]
    if coll == "reducescatter":
        k = inputs[0].shape[0] // n
        return [total[r * k:(r + 1) * k] for r in range(n)]
    if coll == "alltoall":
        k = inputs[0].shape[0] // n
        return [np.concatenate([inputs[m][r * k:(r + 1) * k] for m in range(n)]) for r in range(n)]
    root = algo.root if algo.root is not None else 0
    if coll == "broadcast":
        return [inputs[root].copy() for _ in range(n)]
    if coll == "reduce":
        return [total.copy() if r == root else None for r in range(n)]
    if coll == "gather":
        return [np.concatenate(inputs) if r == root else None for r in range(n)]
    if coll == "scatter":
        k = inputs[root].shape[0] // n
        return [inputs[root][r * k:(r + 1) * k] for r in range(n)]
    raise ValueError(f"no reference for collective {coll!r}; pass expected outputs")
