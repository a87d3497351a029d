"""The torch.distributed executor: any IR algorithm run over a process group's
point-to-point operations (gloo on CPU, NCCL on GPU), reductions with torch operations
on the tensors' device.

It interprets an algorithm exactly as arborcc's shared-memory runtime does, so the same
algorithm gives the same results, bit for bit: buffers placed by the one normalization
of in-place and out-of-place calls (:func:`arborcc.runtime.lowering.lower_rank`), the
same chunk geometry (chunk ``c`` of a call buffer starts at ``(c // P) * count + (c % P)
* C``), the same tail (the elements of each block that do not divide into ``P`` chunks
run through the collective's direct algorithm), the same reduction of every step
(``rrc``: destination = source (op) received), avg as a sum divided by the rank count.

Transport. A thread block's connection is (peer, channel): a message is an ``isend`` /
``irecv`` with the channel as its tag, and messages of one connection are matched in
order, as MSCCL's FIFOs are. On a back-end without tags (NCCL) the operations that
become ready together are issued as one batch (``batch_isend_irecv``, an NCCL group), and
an algorithm may use at most one thread block per peer and direction there.

Progress. One thread walks the thread blocks in program order and issues operations as
soon as their step may run (a receive into a temporary buffer is posted as soon as its
thread block reaches it; one into the destination waits for the step's dependency).
Operations are posted by a thread per peer and direction, in issue order (a gloo post
waits while the connection moves a message), and their completion is awaited by a
helper thread (gloo's Work objects cannot be polled), which wakes the issuing thread,
so a rank always reacts to whichever message arrives first - waiting on one fixed
receive could deadlock an algorithm whose peers wait on this rank's later sends. Sends
read the caller's memory where it is, without a copy; a step that would write memory a
send in flight still reads waits for that send to complete - the IR's semantics, a send
captures its data when it is posted, without copying. A receive that would land there
goes there anyway when the peer sends that message only after it has received the send
(:func:`received_before_reply`); otherwise it waits briefly for the send and then goes
to a temporary buffer, so a pair of ranks exchanging the same chunks cannot block each
other. Temporaries are reused from call to call.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from functools import partial

from arborcc.errors import InputError
from arborcc.ir.aliasing import Mode
from arborcc.ir.collectives import ROOTED
from arborcc.ir.model import Algorithm, Op
from arborcc.ir.steps import OP_OF_CODE
from arborcc.runtime.errors import CommunicationError
from arborcc.runtime.lowering import LoweredRank, algorithm_call, call_mode, chunk_start, lower_rank
from arborcc.runtime.plan import Plan, fallback_algorithm, require_verified
from arborcc.torch.affinity import free_this_thread

#: IR buffer numbers of a call (as :mod:`arborcc.runtime.lowering` numbers them)
SEND_BUFFER, RECV_BUFFER, SCRATCH_BUFFER = 0, 1, 2
#: the reductions the executor computes (avg is a sum, then a division)
REDUCTIONS = ("sum", "prod", "min", "max", "avg")
#: seconds between checks for a failure elsewhere in the job while a call waits
ABORT_POLL = 0.2
#: tags per tile: a connection's tag is its channel + CHANNEL_TAGS * tile (MSCCL has at most 32 channels)
CHANNEL_TAGS = 64
#: bytes of temporary buffers an executor keeps for later calls (fresh memory costs a page
#: fault per 4 KB on first touch, as much as the copy that fills it)
SPARE_BYTES = 256 << 20
#: seconds a receive waits for the send that still reads its destination before it goes to a
#: temporary buffer instead (when nothing else completes meanwhile: two ranks may be waiting for each other)
RECEIVE_PATIENCE = 0.002


@dataclass(frozen=True)
class Geometry:
    """Where the chunks of a call's buffers are: ``per_block`` chunks of ``chunk`` elements
    in each rank block of ``count`` elements, ``stride`` elements apart (0: ``chunk``),
    starting ``base`` elements into the block (scratch chunks are contiguous). A tile of
    a call is its chunks' elements ``base .. base + chunk`` within chunks of ``stride``."""

    count: int
    chunk: int
    per_block: int
    base: int
    stride: int = 0

    def ranges(self, buf: int, first: int, n: int) -> list[tuple[int, int]]:
        """Element ranges ``[start, stop)`` of chunks ``first .. first + n - 1``, adjacent ones merged."""
        c = self.chunk
        if buf == SCRATCH_BUFFER:
            return [(first * c, (first + n) * c)]
        stride = self.stride or c
        out: list[tuple[int, int]] = []
        for k in range(first, first + n):
            start = (k // self.per_block) * self.count + (k % self.per_block) * stride + self.base
            if out and out[-1][1] == start:
                out[-1] = (out[-1][0], start + c)
            else:
                out.append((start, start + c))
        return out


@dataclass(frozen=True)
class LoweredStep:
    op: Op
    src: tuple[int, int] | None  #: (call buffer, chunk)
    dst: tuple[int, int] | None
    count: int
    dep: tuple[int, int] | None  #: (thread block index, step)
    private_src: bool  #: no step of the program writes the source chunks
    private_dst: bool  #: no other step of the program writes the destination chunks


@dataclass(frozen=True)
class LoweredThreadBlock:
    send: int
    recv: int
    channel: int
    steps: tuple[LoweredStep, ...]


def lowered_program(low: LoweredRank) -> list[LoweredThreadBlock]:
    """``low``'s rows as thread blocks of steps, with which memory each step may share."""
    writers: dict[tuple[int, int], set[int]] = {}
    for i, row in enumerate(low.steps):
        op, dbuf, doff, cnt = OP_OF_CODE[row[0]], row[3], row[4], row[5]
        if op.writes_dst:
            for c in range(doff, doff + cnt):
                writers.setdefault((dbuf, c), set()).add(i)
    tbs = []
    for send, recv, channel, first, n in low.threadblocks:
        steps = []
        for i in range(first, first + n):
            code, sbuf, soff, dbuf, doff, cnt, dep_tb, dep_step = low.steps[i]
            op = OP_OF_CODE[code]
            private_src = sbuf < 0 or all(not writers.get((sbuf, c)) for c in range(soff, soff + cnt))
            private_dst = dbuf < 0 or all(writers.get((dbuf, c), set()) <= {i} for c in range(doff, doff + cnt))
            steps.append(LoweredStep(op, (sbuf, soff) if sbuf >= 0 else None, (dbuf, doff) if dbuf >= 0 else None,
                                     cnt, (dep_tb, dep_step) if dep_tb >= 0 else None, private_src, private_dst))
        tbs.append(LoweredThreadBlock(send, recv, channel, tuple(steps)))
    return tbs


def sending_steps(tbs: list[LoweredThreadBlock], receiving: bool) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """(peer, channel) -> the steps ``(thread block, step)`` that send to (``receiving``:
    receive from) that peer on that channel, in the order their messages match; None when
    two thread blocks share a connection (their messages' order is then not the program's)."""
    out: dict[tuple[int, int], list[tuple[int, int]]] = {}
    owner: dict[tuple[int, int], int] = {}
    for t, tb in enumerate(tbs):
        peer = tb.recv if receiving else tb.send
        if peer < 0:
            continue
        if owner.setdefault((peer, tb.channel), t) != t:
            return None
        out.setdefault((peer, tb.channel), []).extend(
            (t, k) for k, step in enumerate(tb.steps) if (step.op.receives if receiving else step.op.sends))
    return out


def steps_after(tbs: list[LoweredThreadBlock], first: tuple[int, int]) -> dict[int, int]:
    """The steps that run only once step ``first`` has finished, and that step itself:
    thread block -> its first such step (the rest of the thread block follows it), by
    program order and chains of dependencies."""
    reached = {first[0]: first[1]}
    todo = [first[0]]
    while todo:
        t = todo.pop()
        for t2, tb in enumerate(tbs):
            for k2, step in enumerate(tb.steps):
                if step.dep is not None and step.dep[0] == t and step.dep[1] >= reached[t] \
                        and k2 < reached.get(t2, len(tb.steps)):
                    reached[t2] = k2
                    todo.append(t2)
                    break
    return reached


def received_before_reply(rank: int, tbs: list[LoweredThreadBlock], program_of) -> dict[tuple[int, int], frozenset]:
    """For each receiving step ``(thread block, step)`` of ``rank``: the sending steps of
    ``rank`` to the same peer whose messages that peer has received in full before it sends
    this step's message (``program_of(peer)`` is the peer's program). The memory such a
    send reads is free once this step's message can arrive, so the message may land there."""
    mine_out, mine_in = sending_steps(tbs, False), sending_steps(tbs, True)
    if mine_out is None or mine_in is None:
        return {}
    peers: dict[int, tuple] = {}
    safe: dict[tuple[int, int], frozenset] = {}
    for (peer, channel), receives in mine_in.items():
        if peer not in peers:
            theirs = program_of(peer)
            peers[peer] = (theirs, sending_steps(theirs, False), sending_steps(theirs, True))
        theirs, their_out, their_in = peers[peer]
        if their_out is None or their_in is None or len(their_out.get((rank, channel), ())) != len(receives):
            continue
        for n, step in enumerate(receives):
            t, k = their_out[(rank, channel)][n]  # the peer's step that sends this message
            ok = []
            for (to, ch), sends in mine_out.items():
                matched = their_in.get((rank, ch), ())
                if to != peer or len(matched) != len(sends):
                    continue
                ok += [mine for mine, got in zip(sends, matched) if k >= steps_after(theirs, got).get(t, k + 1)]
            if ok:
                safe[step] = frozenset(ok)
    return safe


class Waiters:
    """Daemon threads that wait for torch Work objects and report completions in a queue
    (one thread per operation in flight; threads are reused). Like the posting threads,
    they run on the rank's CPUs from before the backend pinned it
    (:func:`arborcc.torch.affinity.free_this_thread`), not on the one CPU of the calling thread."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.idle = 0
        self.lock = threading.Lock()

    def submit(self, work, token, done: queue.SimpleQueue) -> None:
        with self.lock:
            if self.idle == 0:
                threading.Thread(target=self._serve, name="arborcc-wait", daemon=True).start()
            else:
                self.idle -= 1
        self.jobs.put((work, token, done))

    def _serve(self) -> None:
        free_this_thread()
        while True:
            work, token, done = self.jobs.get()
            try:
                work.wait()
                done.put((token, None))
            except BaseException as e:  # reported to the issuing thread, which raises
                done.put((token, e))
            with self.lock:
                self.idle += 1


class Posters:
    """Daemon threads that post operations, one per peer and direction, in order, and hand
    their Work objects to the waiters: gloo posts an operation on a connection only while
    its I/O thread is not moving a message on it (a send to a peer that is already
    receiving writes the message before it returns), which would otherwise hold up the
    issuing thread, and with it the operations of every other peer."""

    def __init__(self, waiters: Waiters) -> None:
        self.waiters = waiters
        self.queues: dict[tuple[int, str], queue.SimpleQueue] = {}

    def submit(self, peer: int, kind: str, post, token, done: queue.SimpleQueue) -> None:
        """Run ``post()`` (returns a Work) on the thread of ``(peer, kind)`` after the
        operations posted there before it."""
        jobs = self.queues.get((peer, kind))
        if jobs is None:
            jobs = self.queues[(peer, kind)] = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(jobs,), name=f"arborcc-{kind}{peer}", daemon=True).start()
        jobs.put((post, token, done))

    def _serve(self, jobs: queue.SimpleQueue) -> None:
        free_this_thread()
        while True:
            post, token, done = jobs.get()
            try:
                work = post()
            except BaseException as e:  # reported to the issuing thread, which raises
                done.put((token, e))
            else:
                self.waiters.submit(work, token, done)


def _reducer(op: str):
    import torch

    return {"sum": torch.add, "avg": torch.add, "prod": torch.mul, "min": torch.minimum, "max": torch.maximum}[op]


class GroupExecutor:
    """Runs IR algorithms over ``group`` (a torch ProcessGroup, or a c10d Backend such as
    ``ProcessGroupGloo``), whose point-to-point operations take group ranks.

    ``rank_names`` gives the rank each group rank is called in errors (default: itself);
    ``failure``, if given, is asked while a call waits (every ``ABORT_POLL`` s) whether
    the job has failed elsewhere: a message stops the call with an error that repeats it;
    ``tagged`` False for back-ends that ignore tags (batched issue; NCCL); ``timeout`` is
    the seconds a call may wait without any operation completing; chunks larger than
    ``tile_bytes`` run as tiles of at most that size, ``window`` tiles in flight at a time
    (a pipeline, as GC3's runtime tiles large buffers: the wire carries one tile while
    another is reduced; tiles need tags, so untagged back-ends run one). Tiles are large
    (16 MB, two in flight, by default): every message costs gloo's TCP transport a
    rendezvous and CPU time of its own, and where ranks share CPUs (several per machine)
    CPU time decides the speed.
    """

    def __init__(self, group, timeout: float = 1800.0, plan: Plan | None = None, rank_names: list[int] | None = None,
                 failure=None,
                 tagged: bool = True, tag_base: int = 0, tile_bytes: int = 16 << 20, window: int = 2):
        self.group = group
        self.rank, self.size = group.rank(), group.size()
        self.timeout = timeout
        self.plan = plan or Plan()
        self.rank_names = rank_names or list(range(self.size))
        self.failure = failure
        self.tagged = tagged
        self.tag_base = tag_base
        self.tile_bytes = tile_bytes
        self.window = max(1, window)
        self._programs: dict[tuple[int, Mode], tuple[Algorithm, LoweredRank, list[LoweredThreadBlock]]] = {}
        self.waiters = Waiters()
        self.posters = Posters(self.waiters)
        self.spare: dict[tuple, list] = {}  #: temporaries to reuse, by (elements, dtype, device)
        self.spare_bytes = 0

    # -- collectives (the algorithm from the plan) -------------------------------------

    def allreduce(self, tensor, op: str = "sum"):
        return self._collective("allreduce", tensor, tensor, tensor.numel(), op)

    def broadcast(self, tensor, root: int = 0):
        return self._collective("broadcast", tensor, tensor, tensor.numel(), "sum", root)

    def reduce(self, tensor, root: int = 0, op: str = "sum"):
        return self._collective("reduce", tensor, tensor, tensor.numel(), op, root)

    def allgather(self, send, recv):
        """``recv`` (``size`` blocks of ``send``'s size) = every rank's ``send``, in rank order."""
        return self._collective("allgather", send, recv, send.numel(), "sum")

    def reduce_scatter(self, send, recv, op: str = "sum"):
        """``recv`` = block ``rank`` of the reduction of every rank's ``send``."""
        return self._collective("reducescatter", send, recv, recv.numel(), op)

    def alltoall(self, send, recv):
        return self._collective("alltoall", send, recv, send.numel() // self.size, "sum")

    def _collective(self, collective: str, send, recv, count: int, op: str, root: int = 0):
        if count == 0:
            return recv
        mode = self._mode(collective, send, recv, count, root if collective in ROOTED else 0)
        algo = self.plan.select(collective, self.size, mode, count, send.element_size(),
                                root if collective in ROOTED else 0)
        self._execute(algo, mode, send, recv, count, op, root)
        return recv

    # -- any algorithm -------------------------------------------------------------------

    def run_algorithm(self, algo: Algorithm, send, recv=None, op: str = "sum", count: int | None = None):
        """Run ``algo`` (verified first) on this call; ``count`` is the elements per rank
        block (by default from ``send``, as :meth:`arborcc.runtime.Communicator.run_algorithm`)."""
        if algo.num_ranks != self.size:
            raise InputError(f"the algorithm is for {algo.num_ranks} ranks, the group has {self.size}",
                             source=algo.name)
        require_verified(algo)
        recv = send if recv is None else recv
        if send.dtype != recv.dtype:
            raise InputError(f"holds {recv.dtype}, the send tensor {send.dtype}", source="recv")
        count, mode = algorithm_call(algo, self.rank, send.numel(), send.element_size(), send.data_ptr(),
                                     recv.data_ptr(), count, recv_elements=recv.numel())
        self._execute(algo, mode, send, recv, count, op, algo.effective_root)
        return recv

    def _mode(self, collective: str, send, recv, count: int, root: int) -> Mode:
        """The call's mode, by the one normalization of buffers (as the runtime decides it)."""
        return call_mode(collective, self.size, self.rank, root, send.data_ptr(), recv.data_ptr(),
                         count * send.element_size())

    # -- execution -------------------------------------------------------------------

    def _program(self, algo: Algorithm, mode: Mode) -> tuple[LoweredRank, list[LoweredThreadBlock], dict]:
        """This rank's program of ``algo`` in ``mode``, and which of its receives may land
        where its earlier sends read (:func:`received_before_reply`)."""
        key = (id(algo), mode)
        hit = self._programs.get(key)
        if hit is None or hit[0] is not algo:
            low = lower_rank(algo, self.rank, mode)
            tbs = lowered_program(low)
            if not self.tagged:
                self._check_untagged(algo, tbs)
            safe = received_before_reply(self.rank, tbs, lambda peer: lowered_program(lower_rank(algo, peer, mode)))
            hit = self._programs[key] = (algo, low, tbs, safe)
        return hit[1:]

    @staticmethod
    def _check_untagged(algo: Algorithm, tbs: list[LoweredThreadBlock]) -> None:
        for end in ("send", "recv"):
            peers = [getattr(tb, end) for tb in tbs if getattr(tb, end) >= 0]
            if len(peers) != len(set(peers)):
                raise InputError("uses several connections to one peer, which a back-end without tags (NCCL) "
                                 "cannot tell apart", source=algo.name)

    def _execute(self, algo: Algorithm, mode: Mode, send, recv, count: int, op: str, root: int) -> None:
        if op not in REDUCTIONS:
            raise InputError(f"unknown reduction {op!r} (known: {', '.join(REDUCTIONS)})", source="op")
        if count == 0:
            return
        flat = {SEND_BUFFER: send.view(-1), RECV_BUFFER: recv.view(-1)}
        low, tbs, safe = self._program(algo, mode)
        chunk = count // low.chunks_per_block
        tail = count - low.chunks_per_block * chunk
        if tail and algo.collective == "custom":
            raise InputError(f"{count} elements do not divide into the {low.chunks_per_block} chunks of a custom "
                             f"collective", source=algo.name)
        if chunk:
            tiles = max(1, -(-chunk * send.element_size() // self.tile_bytes)) if self.tagged else 1
            size = -(-chunk // tiles)
            geos = [Geometry(count, min(size, chunk - t), low.chunks_per_block, t, chunk)
                    for t in range(0, chunk, size)]
            self._run(tbs, safe, low, geos, flat, op, send)
        if tail:
            f_low, f_tbs, f_safe = self._program(fallback_algorithm(algo.collective, self.size, mode, root), mode)
            self._run(f_tbs, f_safe, f_low, [Geometry(count, tail, 1, low.chunks_per_block * chunk)], flat, op, send)
        if op == "avg" and low.result_checked:  # divide the rank's result (where the layout puts it)
            buffer, first = low.result
            start = chunk_start(first, low.chunks_per_block, count)
            flat[buffer][start:start + count].div_(self.size)

    def _run(self, tbs: list[LoweredThreadBlock], safe: dict, low: LoweredRank, geos: list[Geometry], flat: dict,
             op: str, like) -> None:
        tiles = []
        for geo in geos:
            bufs = dict(flat)
            if low.scratch_chunks:
                bufs[SCRATCH_BUFFER] = self.take_buffer(low.scratch_chunks * geo.chunk, like)
            tiles.append((geo, bufs))
        Run(self, tbs, safe, tiles, _reducer(op), like).execute()
        for _, bufs in tiles:  # (not after a failure: transfers may still be writing them)
            if SCRATCH_BUFFER in bufs:
                self.give_buffer(bufs[SCRATCH_BUFFER])

    def take_buffer(self, n: int, like):
        """A temporary of ``n`` elements like ``like`` (a spare one when there is)."""
        import torch

        spare = self.spare.get((n, like.dtype, like.device))
        if spare:
            buf = spare.pop()
            self.spare_bytes -= buf.numel() * buf.element_size()
            return buf
        return torch.empty(n, dtype=like.dtype, device=like.device)

    def give_buffer(self, buf) -> None:
        """Keep a temporary nothing uses any more for a later :meth:`take_buffer`."""
        size = buf.numel() * buf.element_size()
        if self.spare_bytes + size <= SPARE_BYTES:
            self.spare.setdefault((buf.numel(), buf.dtype, buf.device), []).append(buf)
            self.spare_bytes += size

    # -- transport -------------------------------------------------------------------

    def post(self, sends: list[tuple[int, int, object, int]], recvs: list[tuple[int, int, object, int]],
             done: queue.SimpleQueue) -> None:
        """Issue ``(peer, channel, tensor, token)`` sends and receives; each reports
        ``(token, error or None)`` in ``done`` when it completes. Tagged: through the
        posting threads of each peer (:class:`Posters`), receives first (gloo's sender
        writes a message once the receiver has posted its receive: posted early, the peer's
        send writes at once from its own thread instead of waiting for gloo's I/O thread);
        untagged: one batch, posted here."""
        if self.tagged:
            for peer, ch, t, token in recvs:
                self.posters.submit(peer, "recv", partial(self.group.recv, [t], peer, self.tag_base + ch), token,
                                    done)
            for peer, ch, t, token in sends:
                self.posters.submit(peer, "send", partial(self.group.send, [t], peer, self.tag_base + ch), token,
                                    done)
            return
        import torch.distributed as dist

        ops = [dist.P2POp(dist.isend, t, group_peer=peer, group=self.group) for peer, _, t, _ in sends]
        ops += [dist.P2POp(dist.irecv, t, group_peer=peer, group=self.group) for peer, _, t, _ in recvs]
        for work, (*_, token) in zip(dist.batch_isend_irecv(ops) if ops else [], sends + recvs):
            self.waiters.submit(work, token, done)


class Run:
    """One execution of one rank's thread blocks on one call's buffers (see the module
    docstring for the progress rule), once per tile: ``tiles`` holds each tile's geometry
    and buffers; thread block ``i`` of the run is thread block ``i % T`` of the program
    (``T`` of them) on tile ``i // T``, its messages tagged apart from other tiles'."""

    def __init__(self, ex: GroupExecutor, tbs: list[LoweredThreadBlock], safe: dict,
                 tiles: list[tuple[Geometry, dict]], reduce_fn, like):
        self.ex, self.safe, self.reduce_fn, self.like = ex, safe, reduce_fn, like
        self.per_tile = len(tbs)
        self.tbs = [tb for _ in tiles for tb in tbs]
        self.geos = [geo for geo, _ in tiles]
        self.bufs = [bufs for _, bufs in tiles]
        self.pos = [0] * len(self.tbs)
        self.pending: list[tuple | None] = [None] * len(self.tbs)  # (token, buffer, into destination)
        self.finished: set[int] = set()  # tokens of completed operations
        self.failed: dict[int, BaseException] = {}
        self.inflight: dict[int, tuple[str, int]] = {}  # token -> ("send"/"recv", peer)
        self.sends: list = []  # payloads kept alive until their sends complete
        self.sent_temps: dict[int, object] = {}  # send token -> the temporary it sends (free once it completes)
        #: send token -> (its step: (thread block, step), the (tile and buffer, start, stop) it reads)
        self.busy: dict[int, tuple[tuple[int, int], list[tuple[tuple[int, int], int, int]]]] = {}
        self.done = queue.SimpleQueue()
        self.next_token = 0
        self.started = min(len(tiles), ex.window)  # tiles begun (the others wait for a place in the window)
        self.temps: list = []  # temporaries taken for this run and not given back yet
        self.deferred = False  # a receive waits for a send that reads its destination
        self.stalled = False  # ... and nothing completed meanwhile: such receives go to temporaries
        self.new_sends: list[tuple[int, int, object, list | None, tuple[int, int]]] = []
        self.new_recvs: list[tuple[int, int, object, int]] = []

    # -- memory ------------------------------------------------------------------------

    def ranges(self, i: int, where: tuple[int, int], n: int) -> list[tuple[int, int]]:
        return self.geos[i // self.per_tile].ranges(where[0], where[1], n)

    def view(self, i: int, where: tuple[int, int], n: int):
        """Thread block ``i``'s chunks as one tensor view, or None when they are not contiguous."""
        ranges = self.ranges(i, where, n)
        if len(ranges) != 1:
            return None
        start, stop = ranges[0]
        return self.bufs[i // self.per_tile][where[0]][start:stop]

    def read(self, i: int, where: tuple[int, int], n: int):
        import torch

        v = self.view(i, where, n)
        if v is not None:
            return v
        buf = self.bufs[i // self.per_tile][where[0]]
        return torch.cat([buf[a:b] for a, b in self.ranges(i, where, n)])

    def write(self, i: int, where: tuple[int, int], n: int, value) -> None:
        buf = self.bufs[i // self.per_tile][where[0]]
        at = 0
        for a, b in self.ranges(i, where, n):
            buf[a:b].copy_(value[at:at + b - a])
            at += b - a

    def temp(self, i: int, n: int):
        """A temporary for ``n`` chunks of thread block ``i``'s tile (returned at the end of
        the run, or by the step that consumes it)."""
        buf = self.ex.take_buffer(n * self.geos[i // self.per_tile].chunk, self.like)
        self.temps.append(buf)
        return buf

    def consumed(self, data) -> None:
        """``data``, a temporary, is used up: later receives may take it."""
        for k, buf in enumerate(self.temps):
            if buf is data:
                self.ex.give_buffer(self.temps.pop(k))
                return

    def channel(self, i: int, tb: LoweredThreadBlock) -> int:
        """The tag of ``tb``'s connection on thread block ``i``'s tile."""
        return tb.channel + CHANNEL_TAGS * (i // self.per_tile)

    # -- the loop ------------------------------------------------------------------------

    def execute(self) -> None:
        deadline = time.monotonic() + self.ex.timeout
        tiles = len(self.geos)
        while True:
            moved = True
            while moved:
                self.deferred = False
                moved = any([self.advance(i) for i in range(self.started * self.per_tile)])
                self.flush()
                if self.started < tiles and self.tiles_done() > self.started - self.ex.window:
                    self.started += 1
                    moved = True
            if self.tiles_done() == tiles:
                break
            if self.deferred and not self.stalled:
                waited = self.wait_any(deadline, RECEIVE_PATIENCE)
                if waited is None:
                    self.stalled = True
                else:
                    deadline = waited
                continue
            self.stalled = False
            deadline = self.wait_any(deadline)
        while any(kind == "send" for kind, _ in self.inflight.values()):
            deadline = self.wait_any(deadline)
        self.sends.clear()
        for buf in self.temps:  # every operation has completed: no transfer touches them any more
            self.ex.give_buffer(buf)
        self.temps.clear()

    def tiles_done(self) -> int:
        """How many tiles, from the first, have run every step."""
        done = 0
        while done < self.started and all(self.pos[i] == len(self.tbs[i].steps)
                                          for i in range(done * self.per_tile, (done + 1) * self.per_tile)):
            done += 1
        return done

    def wait_any(self, deadline: float, patience: float | None = None) -> float | None:
        """Block until an operation completes; the new deadline (time without progress).
        With ``patience``: None if nothing completes within that many seconds."""
        if patience is not None:
            try:
                token, error = self.done.get(timeout=patience)
            except queue.Empty:
                return None
            self.complete(token, error)
            return time.monotonic() + self.ex.timeout
        while True:
            try:
                token, error = self.done.get(timeout=max(0.0, min(ABORT_POLL, deadline - time.monotonic())))
                break
            except queue.Empty:
                failure = self.ex.failure() if self.ex.failure else None
                if failure:
                    raise CommunicationError(f"rank {self.ex.rank_names[self.ex.rank]}: the job was stopped: "
                                             f"{failure}") from None
                if time.monotonic() < deadline:
                    continue
            waiting = sorted({self.ex.rank_names[p] for _, p in self.inflight.values()})
            raise CommunicationError(f"rank {self.ex.rank_names[self.ex.rank]}: timed out after "
                                     f"{self.ex.timeout:g} s waiting for rank{'s' if len(waiting) > 1 else ''} "
                                     f"{', '.join(map(str, waiting))}")
        self.complete(token, error)
        while True:  # take every other completion that is already there
            try:
                token, error = self.done.get_nowait()
            except queue.Empty:
                break
            self.complete(token, error)
        return time.monotonic() + self.ex.timeout

    def complete(self, token: int, error: BaseException | None) -> None:
        kind, peer = self.inflight.pop(token)
        self.busy.pop(token, None)
        if error is not None:
            me, them = self.ex.rank_names[self.ex.rank], self.ex.rank_names[peer]
            detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise CommunicationError(f"rank {me}: rank {them} failed or left while this rank waited for its "
                                     f"{'message' if kind == 'recv' else 'receipt'} ({detail[:200]})")
        self.finished.add(token)
        if token in self.sent_temps:  # nothing reads it any more: the next receive may take it (still in cache)
            self.consumed(self.sent_temps.pop(token))

    def flush(self) -> None:
        """Issue the operations collected by the last sweep (one batch)."""
        if not self.new_sends and not self.new_recvs:
            return
        sends, recvs = self.new_sends, self.new_recvs
        self.new_sends, self.new_recvs = [], []
        posted = []
        for peer, ch, payload, ranges, origin in sends:
            token = self.next_token
            self.next_token += 1
            self.inflight[token] = ("send", peer)
            self.sends.append(payload)
            if any(buf is payload for buf in self.temps):
                self.sent_temps[token] = payload
            if ranges:
                self.busy[token] = (origin, ranges)
            posted.append((peer, ch, payload, token))
        self.ex.post(posted, recvs, self.done)

    def send(self, i: int, tb: LoweredThreadBlock, payload, shared: tuple[int, int] | None = None,
             n: int = 0) -> None:
        """Send ``payload``; ``shared``: it is the ``n`` chunks at ``shared`` of a buffer
        that later steps may write, which they then do only once the send has completed."""
        ranges = None
        if shared:
            key = (i // self.per_tile, shared[0])
            ranges = [(key, a, b) for a, b in self.ranges(i, shared, n)]
        self.new_sends.append((tb.send, self.channel(i, tb), payload, ranges, (i, self.pos[i])))

    def in_use(self, i: int, where: tuple[int, int], n: int, receiving: bool = False) -> bool:
        """Whether a send in flight (or about to be issued) reads any of these chunks;
        ``receiving``: for the message of thread block ``i``'s current step, which the
        sends that its sender received first cannot be reading any more."""
        key = (i // self.per_tile, where[0])
        mine = self.ranges(i, where, n)
        tile = i - i % self.per_tile
        exempt = {(tile + t, k) for t, k in self.safe.get((i % self.per_tile, self.pos[i]), ())} if receiving else ()
        held = [r for origin, rs in self.busy.values() if origin not in exempt for r in rs]
        held += [r for *_, rs, origin in self.new_sends if rs and origin not in exempt for r in rs]
        return any(b == key and start < hi and lo < stop for b, start, stop in held for lo, hi in mine)

    def post_recv(self, i: int, tb: LoweredThreadBlock, target, into_dst: bool) -> None:
        token = self.next_token
        self.next_token += 1
        self.inflight[token] = ("recv", tb.recv)
        self.pending[i] = (token, target, into_dst)
        self.new_recvs.append((tb.recv, self.channel(i, tb), target, token))

    def dep_met(self, i: int, step: LoweredStep) -> bool:
        if step.dep is None:
            return True
        return self.pos[(i // self.per_tile) * self.per_tile + step.dep[0]] > step.dep[1]

    def advance(self, i: int) -> bool:
        """Run thread block ``i`` as far as it can; True if it finished a step."""
        tb = self.tbs[i]
        moved = False
        while self.pos[i] < len(tb.steps):
            step = tb.steps[self.pos[i]]
            if step.op.receives:
                pend = self.pending[i]
                if pend is None:
                    direct = not step.op.reduces and self.view(i, step.dst, step.count) is not None
                    if direct and self.in_use(i, step.dst, step.count, receiving=True):
                        if not self.stalled:  # wait for that send, then receive in place (no copy)
                            self.deferred = True
                            return moved
                        direct = False
                    if direct and not self.dep_met(i, step):
                        return moved
                    target = self.view(i, step.dst, step.count) if direct else self.temp(i, step.count)
                    self.post_recv(i, tb, target, direct)
                    return moved
                token, data, into_dst = pend
                if token not in self.finished or not self.dep_met(i, step) or (
                        not into_dst and step.dst is not None and self.in_use(i, step.dst, step.count, receiving=True)):
                    return moved
                self.finished.discard(token)
                self.pending[i] = None
                self.receive_step(i, tb, step, data, into_dst)
            else:
                if not self.dep_met(i, step) or (step.op.writes_dst and self.in_use(i, step.dst, step.count)):
                    return moved
                self.local_step(i, tb, step)
            self.pos[i] += 1
            moved = True
        return moved

    def receive_step(self, i: int, tb: LoweredThreadBlock, step: LoweredStep, data, into_dst: bool) -> None:
        op, n = step.op, step.count
        if op is Op.RECV:
            if not into_dst:
                self.write(i, step.dst, n, data)
                self.consumed(data)
        elif op is Op.RECV_COPY_SEND:
            if not into_dst:
                self.write(i, step.dst, n, data)
                self.send(i, tb, data)
            else:
                self.send(i, tb, data, None if step.private_dst else step.dst, step.count)
        elif op is Op.RECV_REDUCE_SEND:
            self.reduce_fn(self.read(i, step.src, n), data, out=data)
            self.send(i, tb, data)
        elif op is Op.RECV_REDUCE_COPY:
            dst = self.view(i, step.dst, n)
            if dst is not None:
                self.reduce_fn(self.read(i, step.src, n), data, out=dst)
            else:
                self.reduce_fn(self.read(i, step.src, n), data, out=data)
                self.write(i, step.dst, n, data)
            self.consumed(data)
        elif op is Op.RECV_REDUCE_COPY_SEND:
            dst = self.view(i, step.dst, n)
            if dst is not None:  # reduce into the destination and send it from there (no copy)
                self.reduce_fn(self.read(i, step.src, n), data, out=dst)
                self.consumed(data)
                self.send(i, tb, dst, None if step.private_dst else step.dst, n)
            else:
                self.reduce_fn(self.read(i, step.src, n), data, out=data)
                self.write(i, step.dst, n, data)
                self.send(i, tb, data)
        else:
            raise InputError(f"step type {op.value!r} is not supported by the torch.distributed executor")

    def local_step(self, i: int, tb: LoweredThreadBlock, step: LoweredStep) -> None:
        op, n = step.op, step.count
        if op is Op.SEND:
            v = self.view(i, step.src, n)
            if v is None:
                self.send(i, tb, self.read(i, step.src, n))  # gathered into a new tensor
            else:
                self.send(i, tb, v, None if step.private_src else step.src, step.count)
        elif op is Op.COPY:
            self.write(i, step.dst, n, self.read(i, step.src, n))
        elif op is Op.REDUCE:
            dst = self.view(i, step.dst, n)
            if dst is not None:
                self.reduce_fn(dst, self.read(i, step.src, n), out=dst)
            else:
                self.write(i, step.dst, n, self.reduce_fn(self.read(i, step.dst, n), self.read(i, step.src, n)))
        elif op is not Op.NOP:
            raise InputError(f"step type {op.value!r} is not supported by the torch.distributed executor")

