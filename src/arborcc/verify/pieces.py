"""Deadlock check of steps as the MSCCL runtimes cut them: into pieces, FIFO slot by slot.

The symbolic run (:mod:`.symbolic`) counts a step as one message in one FIFO slot. The
MSCCL runtimes do not: their interpreter (``mscclRunInterpreter``, in the MSCCL
executor for NCCL, https://github.com/Azure/msccl-executor-nccl, and RCCL,
https://github.com/ROCm/rccl, ``msccl_kernel_impl.h``) runs a step of ``count`` chunks
as ``ceil(count / maxAllowedCount)`` primitive calls (*pieces*), one after the other,
where the host sets (``mscclSetupCount`` in ``msccl_setup.cc``)::

    maxAllowedCount = clamp(chunkEffectiveSize // ceil(bytes / nchunksperloop), 1, 71)

and ``chunkEffectiveSize`` is ``buffSize / NCCL_STEPS x chunkSteps`` (Simple, with
``chunkSteps = MSCCL_CHUNKSTEPS = 4``; LL and LL128 one step, less their flags). Every
primitive call posts a fixed number of FIFO steps whatever its size (NCCL's
``prims_simple.h`` ``genericOp`` also posts the empty slices), and a connection holds
``NCCL_STEPS = 8`` of them:

* **Simple**: a piece is 2 slices of 2 steps (``MSCCL_SLICESTEPS``); the FIFO holds 4
  slices, i.e. two pieces;
* **LL, LL128**: a piece is one step; the FIFO holds 8 pieces.

A sender waits for a free slice before writing it, a receiver for a full one; a fused
receive-and-send step moves slice by slice, each needing one received and one free
slice. So a step of many pieces completes only while its receiver consumes, and a
cycle of such steps deadlocks where one-message steps would not.

The check runs every thread block in this model, counters only (the values were
proved by the symbolic run), for the protocol the algorithm declares (the runtimes run
it with that one) and ``maxAllowedCount`` = 1, 2, 4, ..., 64 and 71 (each distinct set
of piece counts once). ``maxAllowedCount`` = 1 is
every size at which a chunk holds at least half of ``chunkEffectiveSize`` (Simple with
NCCL's default 4 MiB buffer: 1 MiB per chunk), i.e. all large buffers, and gives
every step its most pieces; 71 is the smallest buffers. Within one iteration of the
runtime's loop over the buffer (``gridOffset``) nothing waits on a later iteration,
so one iteration free of deadlock is what every iteration needs. Thread blocks block
only on their own connections and on semaphores that only grow, so one greedy run
decides every schedule (as in :mod:`.symbolic`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from arborcc.ir.model import Algorithm, Protocol
from arborcc.ir.report import Violation
from arborcc.verify.deadlock import TbName, Wait, explain_deadlock
from arborcc.verify.semantics import OPS

#: NCCL's FIFO depth per connection, in steps
NCCL_STEPS = 8
#: the largest maxAllowedCount a runtime uses (``MSCCL_MAX_COUNT - 1``)
MAX_ALLOWED_COUNT = 71
#: an allowed count no step reaches: every step is one piece (one message)
MESSAGE = 1 << 30
#: the maxAllowedCount values checked (module doc)
ALLOWED_COUNTS = (1, 2, 4, 8, 16, 32, 64, MAX_ALLOWED_COUNT)


@dataclass(frozen=True)
class PieceModel:
    """How a protocol's pieces fill a FIFO, in slices: ``capacity`` slices per
    connection, ``per_piece`` slices per piece."""

    protocol: str
    capacity: int
    per_piece: int


#: Simple: 8 steps = 4 slices of 2 steps, a piece is 2 slices; LL / LL128: a piece is one step
SIMPLE_PIECES = PieceModel("Simple", NCCL_STEPS // 2, 2)
LL_PIECES = PieceModel("LL/LL128", NCCL_STEPS, 1)


def piece_model(algo: Algorithm) -> PieceModel:
    """The piece model of the protocol ``algo`` declares."""
    return SIMPLE_PIECES if algo.protocol is Protocol.SIMPLE else LL_PIECES


class _Fifo:
    __slots__ = ("filled", "sender", "receiver", "src", "dst", "ch", "reader_waiting", "writer_waiting")

    def __init__(self, src: int, dst: int, ch: int):
        self.filled = 0
        self.sender: int | None = None
        self.receiver: int | None = None
        self.src, self.dst, self.ch = src, dst, ch
        self.reader_waiting = False
        self.writer_waiting = False


def piece_deadlocks(algo: Algorithm, model: PieceModel, allowed_count: int, limit: int = 5) -> list[Violation]:
    """Run ``algo`` with every step cut into ``ceil(count / allowed_count)`` pieces of
    ``model``; the deadlock violations (empty when every thread block finishes)."""
    tbs, tb_rank, ids_by_rank = [], [], {}
    for prog in sorted(algo.ranks, key=lambda p: p.rank):
        ids = ids_by_rank.setdefault(prog.rank, {})
        for tb in prog.threadblocks:
            ids[tb.id] = len(tbs)
            tbs.append(tb)
            tb_rank.append(prog.rank)
    fifos: dict[tuple[int, int, int], _Fifo] = {}
    send_fifo: list[_Fifo | None] = [None] * len(tbs)
    recv_fifo: list[_Fifo | None] = [None] * len(tbs)
    for g, tb in enumerate(tbs):
        r = tb_rank[g]
        if tb.send >= 0:
            key = (r, tb.send, tb.channel)
            f = fifos.setdefault(key, _Fifo(*key))
            f.sender, send_fifo[g] = g, f
        if tb.recv >= 0:
            key = (tb.recv, r, tb.channel)
            f = fifos.setdefault(key, _Fifo(*key))
            f.receiver, recv_fifo[g] = g, f

    cap, per_piece = model.capacity, model.per_piece
    pc = [0] * len(tbs)
    moved = [0] * len(tbs)  # slices of the current step already moved
    signal = [-1] * len(tbs)
    dep_waiters: dict[int, list[tuple[int, int]]] = {}
    ready = deque(range(len(tbs)))
    while ready:
        g = ready.popleft()
        steps, rc, sc, ids = tbs[g].steps, recv_fifo[g], send_fifo[g], ids_by_rank[tb_rank[g]]
        i = pc[g]
        while i < len(steps):
            st = steps[i]
            dep = st.dep
            if dep is not None:
                tg = ids[dep.tb]
                if signal[tg] < dep.step:
                    dep_waiters.setdefault(tg, []).append((dep.step, g))
                    break
            info = OPS[st.op]
            if info.sends or info.receives:
                need = -(-st.count // allowed_count) * per_piece - moved[g]
                n = need
                if info.receives:
                    n = min(n, rc.filled)
                if info.sends:
                    n = min(n, cap - sc.filled)
                if n > 0:
                    moved[g] += n
                    if info.receives:
                        rc.filled -= n
                        if rc.writer_waiting:
                            rc.writer_waiting = False
                            ready.append(rc.sender)
                    if info.sends:
                        sc.filled += n
                        if sc.reader_waiting:
                            sc.reader_waiting = False
                            ready.append(sc.receiver)
                if n < need:
                    if info.receives and rc.filled == 0:
                        rc.reader_waiting = True
                    if info.sends and sc.filled == cap:
                        sc.writer_waiting = True
                    break
                moved[g] = 0
            if st.has_dep:
                signal[g] = i
                waiters = dep_waiters.get(g)
                if waiters:
                    dep_waiters[g] = [(k, w) for k, w in waiters if k > i]
                    ready.extend(w for k, w in waiters if k <= i)
            i += 1
        pc[g] = i

    unfinished = [g for g in range(len(tbs)) if pc[g] < len(tbs[g].steps)]
    if not unfinished:
        return []
    names = {g: TbName(tb_rank[g], tbs[g].id, pc[g], tbs[g].steps[pc[g]].op.value if pc[g] < len(tbs[g].steps)
                       else "-") for g in range(len(tbs))}
    finished = {g for g in range(len(tbs)) if pc[g] >= len(tbs[g].steps)}
    blocked = {g: _why_blocked(tbs[g].steps[pc[g]], signal, ids_by_rank[tb_rank[g]], recv_fifo[g], send_fifo[g],
                               cap) for g in unfinished}
    where = (f"with steps cut into pieces as the MSCCL runtimes do ({model.protocol}, maxAllowedCount "
             f"{allowed_count}: {model.per_piece} of {model.capacity} FIFO slices per piece)")
    out = [Violation(v.rank, v.tb, v.step, v.kind, f"{v.message} {where}")
           for v in explain_deadlock(blocked, names, finished, limit)]
    out.append(Violation(None, None, None, "deadlock",
                         f"deadlock {where}: {len(unfinished)} of {len(tbs)} thread blocks cannot finish"))
    return out


def _why_blocked(st, signal: list[int], ids: dict[int, int], rc: _Fifo | None, sc: _Fifo | None, cap: int) -> Wait:
    """The condition the step ``st`` stopped on (see :func:`arborcc.verify.symbolic`)."""
    dep = st.dep
    if dep is not None and signal[ids[dep.tb]] < dep.step:
        return Wait("dep", on=ids[dep.tb], dep_tb=dep.tb, dep_step=dep.step)
    info = OPS[st.op]
    if info.receives and rc.filled == 0:
        return Wait("recv", rc.src, rc.ch, rc.sender)
    return Wait("send", sc.dst, sc.ch, sc.receiver, slots=cap)


def check_pieces(algo: Algorithm) -> tuple[list[Violation], str]:
    """The protocol's piece model at every maxAllowedCount of the module doc: the
    violations of the first that deadlocks (empty if none does), and a note saying
    what was checked."""
    model = piece_model(algo)
    counts = sorted({st.count for p in algo.ranks for tb in p.threadblocks for st in tb.steps
                     if OPS[st.op].sends or OPS[st.op].receives})
    seen = set()
    for m in ALLOWED_COUNTS:
        pieces = tuple(-(-c // m) for c in counts)
        if pieces in seen:
            continue
        seen.add(pieces)
        found = piece_deadlocks(algo, model, m)
        if found:
            return found, f"deadlock found with steps cut into pieces ({model.protocol}, maxAllowedCount {m})"
    return [], (f"steps cut into the runtimes' pieces ({model.protocol}: {model.per_piece} of {model.capacity} "
                f"FIFO slices per piece): no deadlock at maxAllowedCount {', '.join(map(str, ALLOWED_COUNTS))} "
                f"(1: every large buffer; {len(seen)} distinct runs)")


def deadlock_free(algo: Algorithm, slots: int = NCCL_STEPS) -> bool:
    """Whether ``algo`` finishes both as the symbolic run sees it (one message per step,
    ``slots`` per connection) and with steps cut into pieces (:func:`check_pieces`):
    the verifier's two deadlock checks, counters only - cheap enough for a generator
    to try candidates with."""
    return not piece_deadlocks(algo, PieceModel("message", slots, 1), MESSAGE) and not check_pieces(algo)[0]
