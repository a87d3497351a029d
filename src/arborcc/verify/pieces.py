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
it with that one) at ``maxAllowedCount`` = 1: every size at which a chunk holds at
least half of ``chunkEffectiveSize`` (Simple with NCCL's default 4 MiB buffer: 1 MiB
per chunk), i.e. all large buffers, where every step has its most pieces. Within one
iteration of the runtime's loop over the buffer (``gridOffset``) nothing waits on a
later iteration, so one iteration free of deadlock is what every iteration needs.
Thread blocks block only on their own connections and on semaphores that only grow,
so one greedy run decides every schedule (as in :mod:`.symbolic`).

One run suffices for every larger ``maxAllowedCount`` (smaller buffers, 2 ... 71) and
for the one-message-per-step FIFOs of the symbolic run. Those cut every step into
no more FIFO slices (a matched send and receive have the same count, so the same
pieces), and a run that moves fewer slices per step is the finished run with the
extra slices of each step deleted at both ends of its connection: a connection then
never holds more than it held (every deleted slice was written before it was read),
each remaining slice is read after it was written, and every step ends no later, so
no wait lasts longer and that run finishes too. Simple's one-message FIFO (a step in
1 of 8 slots) is the same run at a finer grain than a piece in 2 of 4 slices.
(``tests/verify/test_verify_pieces.py`` checks this on every public sample and
library algorithm at counts 1-71.)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from arborcc.memo import CallMemo
from arborcc.ir.model import Algorithm, Protocol
from arborcc.ir.report import Violation
from arborcc.verify.deadlock import TbName, Wait, explain_deadlock
import arborcc.verify.native as native
from arborcc.verify.encoding import encoded_program
from arborcc.verify.semantics import OPS

#: NCCL's FIFO depth per connection, in steps
NCCL_STEPS = 8
#: the largest maxAllowedCount a runtime uses (``MSCCL_MAX_COUNT - 1``)
MAX_ALLOWED_COUNT = 71
#: the maxAllowedCount the check runs at: it decides every larger one (module doc)
CHECKED_COUNT = 1


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


class PieceSchedule:
    """``algo``'s thread blocks ready for the greedy run (:meth:`run`), encoded once
    (:func:`arborcc.verify.encoding.encoded_program`).

    ``fifo_ends[f]``: connection ``f`` as ``(sender rank, receiver rank, channel, sending
    thread block, receiving thread block)`` (global thread block indices, -1: none);
    ``key`` is everything the run depends on, so equal keys give equal answers."""

    __slots__ = ("tbs", "tb_rank", "program", "fifo_ends", "key")

    def __init__(self, algo: Algorithm):
        progs = sorted(algo.ranks, key=lambda p: p.rank)
        self.tbs = [tb for prog in progs for tb in prog.threadblocks]
        self.tb_rank = [prog.rank for prog in progs for _ in prog.threadblocks]
        self.program = encoded_program(algo)
        self.fifo_ends = tuple(self.program.connections)
        self.key = (algo.protocol, self.program.pieces_key())

    def run(self, model: PieceModel, allowed_count: int) -> tuple[list[int], list[int], list[int]]:
        """The greedy run (module doc): every thread block's program counter and last
        signalled step, and every connection's filled slices, when nothing can move.

        Compiled (``run_pieces`` in ``verify/csrc/pieces.cpp``): a thread block moves as
        many slices of its step as its FIFOs allow (``k`` slices at once are ``k`` slice
        moves in a row), parks on the FIFO that stopped it, and is queued again when the
        other end of that FIFO moves or the semaphore it waits on reaches its step. The
        model is monotone - FIFO counters and semaphores only move forward, and a thread
        block blocks only on its own FIFOs and on semaphores - so every maximal run ends
        in the same state, whatever the order in which thread blocks move."""
        return native.run_pieces(self.program, model.capacity, model.per_piece, allowed_count)

    def violations(self, model: PieceModel, allowed_count: int, limit: int = 5) -> list[Violation]:
        """The deadlock violations of :meth:`run` (empty when every thread block finishes)."""
        pc, signal, filled = self.run(model, allowed_count)
        tbs, tb_rank = self.tbs, self.tb_rank
        unfinished = [g for g in range(len(tbs)) if pc[g] < len(tbs[g].steps)]
        if not unfinished:
            return []
        names = {g: TbName(tb_rank[g], tbs[g].id, pc[g], tbs[g].steps[pc[g]].op.value
                           if pc[g] < len(tbs[g].steps) else "-") for g in range(len(tbs))}
        finished = {g for g in range(len(tbs)) if pc[g] >= len(tbs[g].steps)}
        blocked = self._why_blocked(unfinished, pc, signal, filled, model.capacity)
        where = (f"with steps cut into pieces as the MSCCL runtimes do ({model.protocol}, maxAllowedCount "
                 f"{allowed_count}: {model.per_piece} of {model.capacity} FIFO slices per piece)")
        out = [Violation(v.rank, v.tb, v.step, v.kind, f"{v.message} {where}")
               for v in explain_deadlock(blocked, names, finished, limit)]
        out.append(Violation(None, None, None, "deadlock",
                             f"deadlock {where}: {len(unfinished)} of {len(tbs)} thread blocks cannot finish"))
        return out

    def _why_blocked(self, unfinished: list[int], pc: list[int], signal: list[int], filled: list[int],
                     cap: int) -> dict[int, Wait]:
        """For each thread block of ``unfinished``, the condition its step ``pc[g]`` stopped
        on (see :mod:`.symbolic`)."""
        index = {(r, tb.id): g for g, (r, tb) in enumerate(zip(self.tb_rank, self.tbs))}
        recv_fifo, send_fifo = self.program.recv_connection, self.program.send_connection
        blocked = {}
        for g in unfinished:
            st = self.tbs[g].steps[pc[g]]
            dep = st.dep
            on = index[self.tb_rank[g], dep.tb] if dep is not None else -1
            if dep is not None and signal[on] < dep.step:
                blocked[g] = Wait("dep", on=on, dep_tb=dep.tb, dep_step=dep.step)
            elif OPS[st.op].receives and filled[recv_fifo[g]] == 0:
                src, _, ch, sender, _ = self.fifo_ends[recv_fifo[g]]
                blocked[g] = Wait("recv", src, ch, sender)
            else:
                _, dst, ch, _, receiver = self.fifo_ends[send_fifo[g]]
                blocked[g] = Wait("send", dst, ch, receiver, slots=cap)
        return blocked


def piece_deadlocks(algo: Algorithm, model: PieceModel, allowed_count: int, limit: int = 5) -> list[Violation]:
    """Run ``algo`` with every step cut into ``ceil(count / allowed_count)`` pieces of
    ``model``; the deadlock violations (empty when every thread block finishes)."""
    return PieceSchedule(algo).violations(model, allowed_count, limit)


#: inside :func:`remembering_passes`: the schedules :func:`check_pieces` found free of
#: deadlock, by key (it holds everything a run reads), with the note
_passed = CallMemo("verify.pieces.passed_schedules", opened_by="synthesize (remembering_passes)",
                   purpose="notes of the piece schedules found free of deadlock, by schedule key")
#: inside :func:`remembering_passes`: the algorithm objects found free of deadlock, with the note
_passed_algorithms = CallMemo("verify.pieces.passed_algorithms", opened_by="synthesize (remembering_passes)",
                              purpose="notes of the algorithm objects found free of deadlock")


@contextmanager
def remembering_passes() -> Iterator[None]:
    """Within the block, an algorithm found free of deadlock is not checked again: a
    generator's candidate check (:func:`deadlock_free`) and the verifier's final check
    of the same algorithm then cost one run (``synthesize`` wraps its work in this).
    The same algorithm object is recognised without even rebuilding its schedule
    (:mod:`arborcc.memo`)."""
    with _passed.active(), _passed_algorithms.active():
        yield


def check_pieces(algo: Algorithm) -> tuple[list[Violation], str]:
    """The protocol's piece model at ``maxAllowedCount`` 1, which decides every other
    (module doc): its deadlock violations (empty if none) and a note saying what was
    checked."""
    note = _passed_algorithms.get_for(algo)
    if note is not None:
        return [], note
    found, note = _check_schedule(PieceSchedule(algo), piece_model(algo))
    if not found:
        _passed_algorithms.put_for(algo, note)
    return found, note


def _check_schedule(schedule: PieceSchedule, model: PieceModel) -> tuple[list[Violation], str]:
    """:func:`check_pieces` of a prepared schedule, answered once per distinct schedule."""
    note = _passed.get(schedule.key)
    if note is not None:
        return [], note
    found = schedule.violations(model, CHECKED_COUNT)
    if found:
        return found, f"deadlock found with steps cut into pieces ({model.protocol}, maxAllowedCount {CHECKED_COUNT})"
    note = (f"steps cut into the runtimes' pieces ({model.protocol}: {model.per_piece} of {model.capacity} "
            f"FIFO slices per piece): no deadlock at maxAllowedCount {CHECKED_COUNT} (every large buffer), "
            f"hence none at {CHECKED_COUNT + 1}-{MAX_ALLOWED_COUNT} (fewer pieces per step)")
    _passed.put(schedule.key, note)
    return [], note


def deadlock_free(algo: Algorithm) -> bool:
    """Whether ``algo`` finishes with steps cut into pieces (:func:`check_pieces`), and
    so also as the symbolic run sees it (one message per step in 8 slots per
    connection; module doc): the verifier's deadlock checks, counters only - cheap
    enough for a generator to try candidates with."""
    return not check_pieces(algo)[0]
