"""A rank's static schedule for the torch.distributed executor: the order in which one
thread posts its messages, waits for them and runs its steps, fixed before the call.

Waits on point-to-point operations block (gloo's Work objects can be waited on, not
polled), so one thread may wait for an operation only if it cannot be the one that the
peer's message depends on. :func:`build_schedules` finds such an order for every rank at
once: it runs all ranks' programs in one simulation, and a rank waits for a receive only
once the peer has posted the matching send (for a send: once the peer has posted the
matching receive), so the actions of each rank, taken in the simulation's order, are a
linear extension of what every wait depends on - every rank can follow its own list
without deadlock, whatever the timing. The rules of the simulation are the executor's:

- a connection (peer, channel) matches messages in order (MSCCL's FIFOs);
- a receive into its destination (``RECV``, ``RECV_COPY_SEND`` on contiguous chunks) is
  posted once its step's dependency has run and no send in flight reads that memory (a
  send whose receiver has posted its receive is waited for first; otherwise the receive
  waits, and when no rank can move any more it goes to a temporary instead); other
  receives go to temporaries, posted as soon as their thread block reaches them;
- a step that writes memory a send in flight reads first waits for that send;
- a rank works on at most ``window`` tiles at once (the tiles of a large call, see
  :class:`arborcc.torch.executor.GroupExecutor`);
- receives are posted before the sends of the same moment (gloo's sender writes a message
  as soon as the receiver's receive is posted, from its own thread).

References: M. Cowan et al., "GC3: An Optimizing Compiler for GPU Collective
Communication", arXiv 2022, https://arxiv.org/abs/2201.11840 (the IR's thread blocks,
connections and tiling).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from arborcc.errors import InputError
from arborcc.ir.model import Op

#: action kinds of a schedule
POST_RECV, POST_SEND, WAIT, STEP = "recv", "send", "wait", "step"
#: where a receive lands or what a send reads: a thread block's chunks or a temporary
MEMORY, TEMP, GATHER = "mem", "temp", "gather"
#: tags per tile: a connection's tag is its channel + CHANNEL_TAGS * tile (MSCCL has at most 32 channels)
CHANNEL_TAGS = 64
#: steps whose message may land in place (their step writes it unchanged)
IN_PLACE = (Op.RECV, Op.RECV_COPY_SEND)


@dataclass(frozen=True)
class Schedule:
    """One rank's actions, in order, and its temporaries:

    - ``(POST_RECV, token, tb, target)``, ``(POST_SEND, token, tb, source)``: post the
      message of thread block instance ``tb``'s current step (its peer and channel come
      from ``tb``); ``target``/``source`` is ``(MEMORY, where, n)`` (chunks of a call
      buffer), ``(TEMP, slot, n)`` or, for a send only, ``(GATHER, where, n)`` (chunks that
      are not contiguous, copied into one tensor);
    - ``(WAIT, token)``: block until that operation has completed;
    - ``(STEP, tb, k, slot)``: run step ``k`` of thread block instance ``tb`` (its reduction
      or copy), with its message in temporary ``slot`` (None: it landed in place).

    Thread block instance ``tb`` is thread block ``tb % T`` of the program on tile ``tb //
    T``. ``temps[slot]`` is the most chunks temporary ``slot`` holds; ``waits`` lists the
    tokens in the order they are waited for."""

    actions: tuple
    temps: tuple[int, ...]
    waits: tuple[int, ...]


@dataclass
class RankState:
    """A rank's progress in the simulation."""

    tbs: list  # thread block instances (LoweredThreadBlock), tile by tile
    pos: list[int]
    pending: list  # per instance: {step: (token, slot or None)} of its receives posted ahead of their steps
    ahead: list  # per instance: the first step whose receive may not have been posted yet
    actions: list = field(default_factory=list)
    outbox: list = field(default_factory=list)  # sends counted as posted, emitted after this moment's receives
    temps: list[int] = field(default_factory=list)
    free: dict = field(default_factory=dict)  # chunk count -> free temporary slots
    sends: dict = field(default_factory=dict)  # token -> (chunks it reads: {(tile, buf, chunk)}, temp slot or None)
    posted: dict = field(default_factory=dict)  # token -> (peer, connection key, index on the connection, is send)
    waits: list[int] = field(default_factory=list)
    started: int = 0
    finished: int = 0  # tiles, from the first, that have run every step
    next_token: int = 0


def build_schedules(programs: list[list], tiles: int, window: int, chunk_lists) -> list[Schedule]:
    """Every rank's :class:`Schedule` for running ``programs`` (rank -> its thread blocks,
    :func:`arborcc.torch.executor.lowered_program`) on ``tiles`` tiles, ``window`` at a time.
    ``chunk_lists(rank, tb, where, n)`` gives the chunks ``[(buffer, chunk), ...]`` a step
    touches and whether they are contiguous (``(chunks, contiguous)``). Raises InputError
    if the programs cannot all finish (a rank waits for a message no one sends)."""
    return Simulation(programs, tiles, window, chunk_lists).run()


class Simulation:
    """All ranks' programs run together, message by message, recording each rank's actions."""

    def __init__(self, programs: list[list], tiles: int, window: int, chunk_lists) -> None:
        self.per_tile = [len(p) for p in programs]
        self.tiles, self.window = tiles, max(1, window)
        self.chunk_lists = chunk_lists
        self.ranks = []
        for prog in programs:
            tbs = [tb for _ in range(tiles) for tb in prog]
            self.ranks.append(RankState(tbs, [0] * len(tbs), [{} for _ in tbs], [0] * len(tbs),
                                        started=min(tiles, self.window)))
        #: (sender, receiver, channel tag) -> [sends posted, receives posted]
        self.counts: dict[tuple[int, int, int], list[int]] = {}
        self.patient = True
        self.may_block = False  # whether the rank being advanced may wait (once) at this moment

    def run(self) -> list[Schedule]:
        while not all(self.done(r) for r in range(len(self.ranks))):
            moved = False
            for r in range(len(self.ranks)):
                while self.sweep(r):
                    moved = True
            if moved:
                self.patient = True
                continue
            if not self.patient:
                stuck = [r for r in range(len(self.ranks)) if not self.done(r)]
                raise InputError(f"ranks {stuck} wait for messages that are never sent: the algorithm cannot "
                                 f"finish on the torch.distributed executor")
            self.patient = False  # deferred receives go to temporaries
        out = []
        for r, st in enumerate(self.ranks):
            for token in sorted(st.sends):  # sends still in flight at the end
                self.wait(r, token)
            out.append(Schedule(tuple(st.actions), tuple(st.temps), tuple(st.waits)))
        return out

    # -- bookkeeping ----------------------------------------------------------------------

    def done(self, r: int) -> bool:
        st = self.ranks[r]
        return all(p == len(tb.steps) for p, tb in zip(st.pos, st.tbs))

    def tiles_done(self, r: int) -> int:
        st, per = self.ranks[r], self.per_tile[r]
        while st.finished < st.started and all(st.pos[i] == len(st.tbs[i].steps)
                                               for i in range(st.finished * per, (st.finished + 1) * per)):
            st.finished += 1
        return st.finished

    def tag(self, r: int, i: int, tb) -> int:
        return tb.channel + CHANNEL_TAGS * (i // self.per_tile[r])

    def chunks(self, r: int, i: int, where, n: int) -> tuple[set, bool]:
        found, contiguous = self.chunk_lists(r, self.ranks[r].tbs[i], where, n)
        tile = i // self.per_tile[r]
        return {(tile, buf, c) for buf, c in found}, contiguous

    def take_temp(self, r: int, n: int) -> int:
        st = self.ranks[r]
        free = st.free.get(n)
        if free:
            return free.pop()
        st.temps.append(n)
        return len(st.temps) - 1

    def give_temp(self, r: int, slot: int) -> None:
        st = self.ranks[r]
        st.free.setdefault(st.temps[slot], []).append(slot)

    def post(self, r: int, i: int, send: bool, what) -> int:
        st = self.ranks[r]
        tb = st.tbs[i]
        peer = tb.send if send else tb.recv
        key = (r, peer, self.tag(r, i, tb)) if send else (peer, r, self.tag(r, i, tb))
        count = self.counts.setdefault(key, [0, 0])
        token = st.next_token
        st.next_token += 1
        st.posted[token] = (peer, key, count[0 if send else 1], send)
        count[0 if send else 1] += 1
        (st.outbox if send else st.actions).append((POST_SEND if send else POST_RECV, token, i, what))
        return token

    def flush(self, r: int) -> None:
        """Emit the sends of this moment (after its receives; before anything that blocks)."""
        st = self.ranks[r]
        st.actions += st.outbox
        st.outbox.clear()

    def satisfiable(self, r: int, token: int) -> bool:
        """Whether the peer has posted the operation matching ``token`` (then waiting for
        it cannot deadlock)."""
        _, key, index, send = self.ranks[r].posted[token]
        return self.counts.get(key, [0, 0])[1 if send else 0] > index

    def wait(self, r: int, token: int) -> None:
        self.flush(r)
        st = self.ranks[r]
        st.actions.append((WAIT, token))
        st.waits.append(token)
        del st.posted[token]
        if token in st.sends:
            _, slot = st.sends.pop(token)
            if slot is not None:
                self.give_temp(r, slot)

    def clear(self, r: int, chunks: set) -> bool:
        """Make sure no send in flight reads ``chunks``: wait for the ones that do, if this
        moment may block and their receivers have posted; False (nothing waited for) if not."""
        st = self.ranks[r]
        readers = [t for t, (reads, _) in st.sends.items() if reads & chunks]
        if not readers:
            return True
        if not self.may_block or not all(self.satisfiable(r, t) for t in readers):
            return False
        self.may_block = False
        for t in readers:
            self.wait(r, t)
        return True

    def dep_met(self, r: int, i: int, step) -> bool:
        if step.dep is None:
            return True
        st, per = self.ranks[r], self.per_tile[r]
        return st.pos[(i // per) * per + step.dep[0]] > step.dep[1]

    # -- one rank's progress ------------------------------------------------------------

    def sweep(self, r: int) -> bool:
        """Everything rank ``r`` can do without blocking, then (if that is nothing) one
        wait - the first, in tile and thread block order, whose peer has posted; True if it
        did something. A rank blocks only when it has nothing else to post or compute."""
        st = self.ranks[r]
        for blocking in (False, True):
            self.may_block = blocking
            moved = False
            for i in range(self.tiles_done(r) * self.per_tile[r], st.started * self.per_tile[r]):
                moved |= self.advance(r, i)
                if blocking and not self.may_block:  # it waited once
                    break
            if st.started < self.tiles and self.tiles_done(r) > st.started - self.window:
                st.started += 1
                moved = True
            if moved:
                return True
        return False

    def advance(self, r: int, i: int) -> bool:
        """Run thread block instance ``i`` of rank ``r`` as far as it can; True if it did something."""
        st = self.ranks[r]
        tb = st.tbs[i]
        moved = False
        sends: list = []
        while st.pos[i] < len(tb.steps):
            k = st.pos[i]
            step = tb.steps[k]
            if step.op.receives:
                if k not in st.pending[i]:
                    if not self.post_receive(r, i, step):
                        break
                    moved = True
                token, slot = st.pending[i][k]
                if not self.may_block or not self.satisfiable(r, token) or not self.dep_met(r, i, step):
                    break
                writes = slot is not None and step.dst is not None
                if writes and not self.clear(r, self.chunks(r, i, step.dst, step.count)[0]):
                    break
                self.may_block = False
                self.wait(r, token)
                del st.pending[i][k]
                st.actions.append((STEP, i, k, slot))
                self.after_receive(r, i, step, slot, sends)
            else:
                if not self.dep_met(r, i, step):
                    break
                if step.op in (Op.COPY, Op.REDUCE) and not self.clear(r, self.chunks(r, i, step.dst, step.count)[0]):
                    break
                if step.op is Op.SEND:
                    chunks, contiguous = self.chunks(r, i, step.src, step.count)
                    if contiguous:
                        sends.append(((MEMORY, step.src, step.count), set() if step.private_src else chunks, None))
                    else:
                        sends.append(((GATHER, step.src, step.count), set(), None))
                elif step.op in (Op.COPY, Op.REDUCE):
                    st.actions.append((STEP, i, k, None))
                elif step.op is not Op.NOP:
                    raise InputError(f"step type {step.op.value!r} is not supported by the torch.distributed executor")
            st.pos[i] += 1
            moved = True
            for what, reads, slot in sends:
                token = self.post(r, i, True, what)
                st.sends[token] = (reads, slot)
            sends = []
        moved |= self.post_ahead(r, i)
        self.flush(r)
        return moved

    def post_ahead(self, r: int, i: int) -> bool:
        """Post the receives of thread block instance ``i``'s coming steps that go to
        temporaries, in step order (a connection matches messages in order), up to the first
        one that lands in place (posted when its step comes): a sender whose receiver has
        posted writes its message at once, from its own thread."""
        st = self.ranks[r]
        steps = st.tbs[i].steps
        k, moved = max(st.ahead[i], st.pos[i]), False
        while k < len(steps):
            step = steps[k]
            if step.op.receives and k not in st.pending[i]:
                if k == st.pos[i] or (step.op in IN_PLACE and self.chunks(r, i, step.dst, step.count)[1]):
                    break
                slot = self.take_temp(r, step.count)
                st.pending[i][k] = (self.post(r, i, False, (TEMP, slot, step.count)), slot)
                moved = True
            k += 1
        st.ahead[i] = k
        return moved

    def post_receive(self, r: int, i: int, step) -> bool:
        """Post the receive of thread block instance ``i``'s current step, in place or into a
        temporary; False if it should wait (its dependency, or a send reading its destination)."""
        st = self.ranks[r]
        if step.op in IN_PLACE:
            chunks, contiguous = self.chunks(r, i, step.dst, step.count)
            if contiguous:
                if not self.dep_met(r, i, step):
                    return False
                if self.clear(r, chunks):
                    st.pending[i][st.pos[i]] = (self.post(r, i, False, (MEMORY, step.dst, step.count)), None)
                    return True
                if self.patient:
                    return False
        if step.op not in (Op.RECV, Op.RECV_COPY_SEND, Op.RECV_REDUCE_SEND, Op.RECV_REDUCE_COPY,
                           Op.RECV_REDUCE_COPY_SEND):
            raise InputError(f"step type {step.op.value!r} is not supported by the torch.distributed executor")
        slot = self.take_temp(r, step.count)
        st.pending[i][st.pos[i]] = (self.post(r, i, False, (TEMP, slot, step.count)), slot)
        return True

    def after_receive(self, r: int, i: int, step, slot, sends: list) -> None:
        """The sends a receiving step makes, and when its temporary is free again."""
        op = step.op
        if op in (Op.RECV, Op.RECV_REDUCE_COPY):
            if slot is not None:
                self.give_temp(r, slot)
            return
        if op is Op.RECV_REDUCE_SEND or (op is Op.RECV_COPY_SEND and slot is not None):
            sends.append(((TEMP, slot, step.count), set(), slot))  # the temporary is free once the send is
            return
        # RECV_COPY_SEND in place, RECV_REDUCE_COPY_SEND: send the destination (reduced into it when contiguous)
        chunks, contiguous = self.chunks(r, i, step.dst, step.count)
        if op is Op.RECV_REDUCE_COPY_SEND and not contiguous:
            sends.append(((TEMP, slot, step.count), set(), slot))
            return
        if slot is not None:
            self.give_temp(r, slot)
        sends.append(((MEMORY, step.dst, step.count), set() if step.private_dst else chunks, None))
