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

from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from arborcc.ir.memo import CallMemo
from arborcc.ir.model import Algorithm, Protocol
from arborcc.ir.report import Violation
from arborcc.verify.deadlock import TbName, Wait, explain_deadlock
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
    """``algo``'s thread blocks as flat lists for the greedy run.

    ``steps[g]``: thread block ``g``'s steps as ``(moves, count, dep_tb, dep_step,
    has_dep)`` with ``moves`` bit 1 = receives, bit 2 = sends, ``dep_tb`` the global
    index of the thread block waited on (-1: none); ``recv_fifo[g]`` / ``send_fifo[g]``
    index the connections (-1: none); ``key`` is everything the run depends on, so
    equal keys give equal answers."""

    __slots__ = ("tbs", "tb_rank", "steps", "recv_fifo", "send_fifo", "fifo_ends", "key")

    def __init__(self, algo: Algorithm):
        tbs, tb_rank, ids_by_rank = [], [], {}
        for prog in sorted(algo.ranks, key=lambda p: p.rank):
            ids = ids_by_rank.setdefault(prog.rank, {})
            for tb in prog.threadblocks:
                ids[tb.id] = len(tbs)
                tbs.append(tb)
                tb_rank.append(prog.rank)
        fifo_index: dict[tuple[int, int, int], int] = {}
        ends: list[list[int]] = []  # per connection: [src, dst, ch, sender, receiver]

        def connection(key: tuple[int, int, int], side: int, g: int) -> int:
            f = fifo_index.get(key)
            if f is None:
                f = fifo_index[key] = len(ends)
                ends.append([*key, -1, -1])
            ends[f][side] = g
            return f

        send_fifo, recv_fifo = [-1] * len(tbs), [-1] * len(tbs)
        for g, tb in enumerate(tbs):
            r = tb_rank[g]
            if tb.send >= 0:
                send_fifo[g] = connection((r, tb.send, tb.channel), 3, g)
            if tb.recv >= 0:
                recv_fifo[g] = connection((tb.recv, r, tb.channel), 4, g)
        moves = {op: (2 if info.sends else 0) | (1 if info.receives else 0) for op, info in OPS.items()}
        steps = []
        for g, tb in enumerate(tbs):
            ids = ids_by_rank[tb_rank[g]]
            row = []
            for st in tb.steps:
                dep = st.dep
                row.append((moves[st.op], st.count, ids[dep.tb] if dep is not None else -1,
                            dep.step if dep is not None else -1, st.has_dep))
            steps.append(tuple(row))
        self.tbs, self.tb_rank = tbs, tb_rank
        self.steps, self.recv_fifo, self.send_fifo = tuple(steps), tuple(recv_fifo), tuple(send_fifo)
        self.fifo_ends = tuple(tuple(e) for e in ends)
        self.key = (algo.protocol, self.steps, self.recv_fifo, self.send_fifo, self.fifo_ends)

    def run(self, model: PieceModel, allowed_count: int) -> tuple[list[int], list[int], list[int]]:
        """The greedy run (module doc): every thread block's program counter and last
        signalled step, and every connection's filled slices, when nothing can move.

        A thread block *parked* on a full FIFO it sends on, or on an empty one it
        receives from, has nothing else left to wait for at that step (its dependency
        was met before it moved). So a thread block that moves pulls through its parked
        senders and pushes through its parked receivers at once: along the chain of
        parked senders upstream (a plain send ends it; a fused relay forwards what its
        own parked sender gives) every one refills the FIFO it sends on as it empties,
        and along the chain of parked receivers downstream every one takes what it
        can forward. That is the same run with the back-and-forth of each FIFO's few
        slices done at once - moves every thread block could make one slice at a time
        - so a long step costs one move, not one per FIFO's worth of slices. No thread
        block is in both chains or twice in one (rings), and the thread blocks of a
        chain end parked exactly where the slice-by-slice run would leave them."""
        steps, recv_fifo, send_fifo, ends = self.steps, self.recv_fifo, self.send_fifo, self.fifo_ends
        n = len(steps)
        cap, per_piece = model.capacity, model.per_piece
        filled = [0] * len(ends)
        reader_waiting = [False] * len(ends)
        writer_waiting = [False] * len(ends)
        pc = [0] * n
        moved = [0] * n  # slices of the current step already moved
        signal = [-1] * n
        dep_waiters: dict[int, list[tuple[int, int]]] = {}
        ready = deque(range(n))
        pop, push = ready.popleft, ready.append

        def left(h: int) -> int:
            """Slices left in thread block ``h``'s current step."""
            return -(-steps[h][pc[h]][1] // allowed_count) * per_piece - moved[h]

        def settle(h: int) -> None:
            """After a chain moved ``h``: park it where it is blocked, else run it again."""
            moves = steps[h][pc[h]][0]
            rc, sc = recv_fifo[h], send_fifo[h]
            busy = left(h) > 0
            stuck_in = busy and moves & 1 and filled[rc] == 0
            stuck_out = busy and moves & 2 and filled[sc] == cap
            if rc >= 0:
                reader_waiting[rc] = bool(stuck_in)
            if sc >= 0:
                writer_waiting[sc] = bool(stuck_out)
            if not (stuck_in or stuck_out):
                push(h)

        def parked_chain(f: int, taken: set, upstream: bool) -> tuple[list[int], list[int]]:
            """The chain of parked senders feeding FIFO ``f`` (``upstream``) or of parked
            receivers it feeds, none in ``taken``, and per thread block the most it can
            move now: a fused relay passes on what its FIFO on the far side holds (or has
            room for) and what the rest of the chain gives (or takes)."""
            waiting, end, onward = (writer_waiting, 3, recv_fifo) if upstream else (reader_waiting, 4, send_fifo)
            chain = []
            while waiting[f]:
                h = ends[f][end]
                if h in taken:
                    break
                taken.add(h)
                chain.append(h)
                if steps[h][pc[h]][0] != 3:
                    break
                f = onward[h]
            most = [0] * len(chain)
            below = 0
            for i in range(len(chain) - 1, -1, -1):
                h = chain[i]
                m = left(h)
                if steps[h][pc[h]][0] == 3:
                    far = filled[onward[h]]
                    more = (far if upstream else cap - far) + below
                    if more < m:
                        m = more
                most[i] = below = m
            return chain, most

        def take(f: int, k: int, chain: list[int], most: list[int]) -> None:
            """The consumer of ``f`` takes ``k`` slices; its parked senders refill."""
            for s, m in zip(chain, most):
                room = cap - filled[f] + k
                if room < m:
                    m = room
                filled[f] += m - k
                moved[s] += m
                k = m
                f = recv_fifo[s] if steps[s][pc[s]][0] == 3 else -1
            if f >= 0 and k:
                filled[f] -= k
                if writer_waiting[f]:
                    writer_waiting[f] = False
                    push(ends[f][3])
            for s in chain:
                settle(s)

        def give(f: int, k: int, chain: list[int], most: list[int]) -> None:
            """The producer of ``f`` puts ``k`` slices; its parked receivers take them."""
            for h, m in zip(chain, most):
                if k < m:
                    m = k
                filled[f] += k - m
                moved[h] += m
                k = m
                f = send_fifo[h] if steps[h][pc[h]][0] == 3 else -1
            if f >= 0 and k:
                filled[f] += k
                if reader_waiting[f]:
                    reader_waiting[f] = False
                    push(ends[f][4])
            for h in chain:
                settle(h)

        none: tuple[list[int], list[int]] = ([], [])
        while ready:
            g = pop()
            row, rc, sc = steps[g], recv_fifo[g], send_fifo[g]
            i, last = pc[g], len(row)
            while i < last:
                moves, count, dep_tb, dep_step, has_dep = row[i]
                if dep_tb >= 0 and signal[dep_tb] < dep_step:
                    dep_waiters.setdefault(dep_tb, []).append((dep_step, g))
                    break
                if moves:
                    need = -(-count // allowed_count) * per_piece - moved[g]
                    k = need
                    up = down = none
                    # the FIFOs' own bounds first: chains are built only when they matter
                    pull = moves & 1 and writer_waiting[rc]
                    if moves & 1 and not pull and filled[rc] < k:
                        k = filled[rc]
                    push_on = moves & 2 and reader_waiting[sc]
                    if moves & 2 and not push_on and cap - filled[sc] < k:
                        k = cap - filled[sc]
                    plain_in = plain_out = -1  # a parked plain sender / receiver (the usual chains)
                    if pull and k > 0:
                        s = ends[rc][3]
                        if steps[s][pc[s]][0] == 2:
                            plain_in, most_in = s, left(s)
                            have = filled[rc] + most_in
                        else:
                            up = parked_chain(rc, {g}, True)
                            have = filled[rc] + up[1][0]
                        if have < k:
                            k = have
                    if push_on and k > 0:
                        h = ends[sc][4]
                        if steps[h][pc[h]][0] == 1 and h != plain_in:
                            plain_out, most_out = h, left(h)
                            room = cap - filled[sc] + most_out
                        else:
                            down = parked_chain(sc, {g, plain_in, *up[0]}, False)
                            room = cap - filled[sc] + (down[1][0] if down[0] else 0)
                        if room < k:
                            k = room
                    if k > 0:
                        moved[g] += k
                        if moves & 1:
                            if plain_in >= 0:  # it refills the FIFO as it empties
                                m = cap - filled[rc] + k
                                if most_in < m:
                                    m = most_in
                                filled[rc] += m - k
                                moved[plain_in] += m
                                if m == most_in or filled[rc] < cap:
                                    writer_waiting[rc] = False
                                    push(plain_in)
                            elif up[0]:
                                take(rc, k, *up)
                            else:
                                filled[rc] -= k
                        if moves & 2:
                            if plain_out >= 0:  # its FIFO is empty: it takes what it needs first
                                m = k if k < most_out else most_out
                                filled[sc] += k - m
                                moved[plain_out] += m
                                if m == most_out or filled[sc]:
                                    reader_waiting[sc] = False
                                    push(plain_out)
                            elif down[0]:
                                give(sc, k, *down)
                            else:
                                filled[sc] += k
                                if reader_waiting[sc]:
                                    reader_waiting[sc] = False
                                    push(ends[sc][4])
                    if k < need:
                        if moves & 1 and filled[rc] == 0:
                            reader_waiting[rc] = True
                        if moves & 2 and filled[sc] == cap:
                            writer_waiting[sc] = True
                        break
                    moved[g] = 0
                if has_dep:
                    signal[g] = i
                    waiters = dep_waiters.get(g)
                    if waiters:
                        dep_waiters[g] = [(s, w) for s, w in waiters if s > i]
                        ready.extend(w for s, w in waiters if s <= i)
                i += 1
            pc[g] = i
        return pc, signal, filled

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
        blocked = {g: self._why_blocked(g, pc[g], signal, filled, model.capacity) for g in unfinished}
        where = (f"with steps cut into pieces as the MSCCL runtimes do ({model.protocol}, maxAllowedCount "
                 f"{allowed_count}: {model.per_piece} of {model.capacity} FIFO slices per piece)")
        out = [Violation(v.rank, v.tb, v.step, v.kind, f"{v.message} {where}")
               for v in explain_deadlock(blocked, names, finished, limit)]
        out.append(Violation(None, None, None, "deadlock",
                             f"deadlock {where}: {len(unfinished)} of {len(tbs)} thread blocks cannot finish"))
        return out

    def _why_blocked(self, g: int, i: int, signal: list[int], filled: list[int], cap: int) -> Wait:
        """The condition step ``i`` of thread block ``g`` stopped on (see :mod:`.symbolic`)."""
        moves, _, dep_tb, dep_step, _ = self.steps[g][i]
        if dep_tb >= 0 and signal[dep_tb] < dep_step:
            return Wait("dep", on=dep_tb, dep_tb=self.tbs[g].steps[i].dep.tb, dep_step=dep_step)
        rc, sc = self.recv_fifo[g], self.send_fifo[g]
        if moves & 1 and filled[rc] == 0:
            src, _, ch, sender, _ = self.fifo_ends[rc]
            return Wait("recv", src, ch, sender)
        _, dst, ch, _, receiver = self.fifo_ends[sc]
        return Wait("send", dst, ch, receiver, slots=cap)


def piece_deadlocks(algo: Algorithm, model: PieceModel, allowed_count: int, limit: int = 5) -> list[Violation]:
    """Run ``algo`` with every step cut into ``ceil(count / allowed_count)`` pieces of
    ``model``; the deadlock violations (empty when every thread block finishes)."""
    return PieceSchedule(algo).violations(model, allowed_count, limit)


#: inside :func:`remembering_passes`: the schedules :func:`check_pieces` found free of
#: deadlock, by key (it holds everything a run reads), with the note
_passed = CallMemo()
#: inside :func:`remembering_passes`: the algorithm objects found free of deadlock, with the note
_passed_algorithms = CallMemo()


@contextmanager
def remembering_passes() -> Iterator[None]:
    """Within the block, an algorithm found free of deadlock is not checked again: a
    generator's candidate check (:func:`deadlock_free`) and the verifier's final check
    of the same algorithm then cost one run (``synthesize`` wraps its work in this).
    The same algorithm object is recognised without even rebuilding its schedule
    (:mod:`arborcc.ir.memo`)."""
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
