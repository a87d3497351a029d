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
order, as MSCCL's FIFOs are. On a back-end without tags (NCCL) the operations the
schedule posts one after the other are issued as one batch (``batch_isend_irecv``, an
NCCL group), and an algorithm may use at most one thread block per peer and direction
there.

Progress. The calling thread posts every receive, waits for every operation and runs
every step, in an order fixed before the first call (:mod:`arborcc.torch.schedule`: a
simulation of all ranks' programs that waits for an operation only once its peer has
posted the matching one, so no order of arrivals can deadlock it); a sending thread
posts the sends in that order (a gloo send to a peer that has posted its receive writes
the message before it returns), and a waiting thread waits on gloo's Work objects in
that order and reports completions, so the calling thread can look for a failure
elsewhere in the job while it waits. Sends read the caller's memory where it is,
without a copy; a step that would write memory a send in flight still reads waits for
that send (the IR's semantics: a send captures its data when it is posted). A receive
lands in its destination when nothing may still be reading it, else in a temporary
buffer; temporaries are reused from call to call.

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
from arborcc.runtime.errors import CommunicationError
from arborcc.runtime.lowering import STEP_CODE, LoweredRank, algorithm_call, call_mode, chunk_start, lower_rank
from arborcc.runtime.plan import Plan, fallback_algorithm, require_verified
from arborcc.torch.affinity import free_this_thread, free_threads
from arborcc.torch.schedule import (CHANNEL_TAGS, GATHER, MEMORY, POST_RECV, POST_SEND, STEP, TEMP, WAIT, Schedule,
                                    build_schedules)

OP_OF_CODE = {code: op for op, code in STEP_CODE.items()}
#: IR buffer numbers of a call (as :mod:`arborcc.runtime.lowering` numbers them)
SEND_BUFFER, RECV_BUFFER, SCRATCH_BUFFER = 0, 1, 2
#: the reductions the executor computes (avg is a sum, then a division)
REDUCTIONS = ("sum", "prod", "min", "max", "avg")
#: seconds between checks for a failure elsewhere in the job while a call waits
ABORT_POLL = 0.2
#: bytes of temporary buffers an executor keeps for later calls (fresh memory costs a page
#: fault per 4 KB on first touch, as much as the copy that fills it)
SPARE_BYTES = 256 << 20


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
        if op in (Op.RECV, Op.RECV_REDUCE_COPY, Op.RECV_COPY_SEND, Op.RECV_REDUCE_COPY_SEND, Op.COPY, Op.REDUCE):
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



class Sender:
    """A daemon thread that runs jobs in the order given: the executor's sends (a gloo send
    to a peer that has posted its receive writes the whole message before it returns, which
    would hold up the calling thread). Free of the calling thread's CPU, as :class:`Waiter`."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread: threading.Thread | None = None

    def submit(self, job) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._serve, name="arborcc-send", daemon=True)
            self.thread.start()
        self.jobs.put(job)

    def _serve(self) -> None:
        free_this_thread()
        while True:
            self.jobs.get()()


class Waiter:
    """A daemon thread that waits for torch Work objects, one after the other in the order
    they are given, and reports each completion in a queue. It runs on the rank's CPUs from
    before the backend pinned it (:func:`arborcc.torch.affinity.free_this_thread`), not on
    the one CPU of the calling thread."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread: threading.Thread | None = None

    def submit(self, work, token, done: queue.SimpleQueue) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._serve, name="arborcc-wait", daemon=True)
            self.thread.start()
        self.jobs.put((work, token, done))

    def _serve(self) -> None:
        free_this_thread()
        while True:
            work, token, done = self.jobs.get()
            try:
                work.wait()
                done.put((token, None))
            except BaseException as e:  # reported to the calling thread, which raises
                done.put((token, e))


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
    another is reduced; tiles need tags, so untagged back-ends run one). By default 4 MB
    tiles, two in flight: every message costs gloo's TCP transport a rendezvous and CPU
    time of its own (which decides where ranks share CPUs), but a rank waits for its
    messages in a fixed order, and the larger a message the longer a late one holds up the
    others (1, 2, 4 and 16 MB compared in docs/torch.md, session 9).

    While a call runs, its thread may run on any of the rank's CPUs from before the
    backend pinned it (:func:`arborcc.torch.affinity.free_threads`), as gloo's own threads
    do; sends are posted by a sending thread (:class:`Sender`), completions reported by a
    waiting thread (:class:`Waiter`).
    """

    def __init__(self, group, timeout: float = 1800.0, plan: Plan | None = None, rank_names: list[int] | None = None,
                 failure=None,
                 tagged: bool = True, tag_base: int = 0, tile_bytes: int = 4 << 20, window: int = 2):
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
        self._schedules: dict[tuple, Schedule] = {}
        self.waiter = Waiter()
        self.sender = Sender()
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

    def _program(self, algo: Algorithm, mode: Mode) -> tuple[LoweredRank, list[list[LoweredThreadBlock]]]:
        """This rank's lowering of ``algo`` in ``mode``, and every rank's thread blocks."""
        key = (id(algo), mode)
        hit = self._programs.get(key)
        if hit is None or hit[0] is not algo:
            low = lower_rank(algo, self.rank, mode)
            programs = [lowered_program(low if r == self.rank else lower_rank(algo, r, mode)) for r in range(self.size)]
            if not self.tagged:
                self._check_untagged(algo, programs[self.rank])
            hit = self._programs[key] = (algo, low, programs)
        return hit[1:]

    def _schedule(self, algo: Algorithm, mode: Mode, programs: list[list[LoweredThreadBlock]],
                  geos: list[Geometry]) -> Schedule:
        """This rank's schedule of ``algo`` on tiles ``geos`` (:func:`arborcc.torch.schedule.build_schedules`),
        kept per number of tiles and which chunks lie next to each other."""
        geo = geos[0]
        stride = geo.stride or geo.chunk
        key = (id(algo), mode, len(geos), stride == geo.chunk, geo.count == (geo.per_block - 1) * stride + geo.chunk)
        hit = self._schedules.get(key)
        if hit is None or hit[0] is not algo:
            def chunk_lists(rank, tb, where, n):
                return [(where[0], c) for c in range(where[1], where[1] + n)], len(geo.ranges(where[0], where[1], n)) == 1

            schedules = build_schedules(programs, len(geos), self.window, chunk_lists)
            hit = self._schedules[key] = (algo, schedules[self.rank])
        return hit[1]

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
        low, programs = self._program(algo, mode)
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
            self._run(algo, mode, low, programs, geos, flat, op, send)
        if tail:
            fallback = fallback_algorithm(algo.collective, self.size, mode, root)
            f_low, f_programs = self._program(fallback, mode)
            self._run(fallback, mode, f_low, f_programs, [Geometry(count, tail, 1, low.chunks_per_block * chunk)],
                      flat, op, send)
        if op == "avg" and low.result_checked:  # divide the rank's result (where the layout puts it)
            buffer, first = low.result
            start = chunk_start(first, low.chunks_per_block, count)
            flat[buffer][start:start + count].div_(self.size)

    def _run(self, algo: Algorithm, mode: Mode, low: LoweredRank, programs: list[list[LoweredThreadBlock]],
             geos: list[Geometry], flat: dict, op: str, like) -> None:
        schedule = self._schedule(algo, mode, programs, geos)
        tiles = []
        for geo in geos:
            bufs = dict(flat)
            if low.scratch_chunks:
                bufs[SCRATCH_BUFFER] = self.take_buffer(low.scratch_chunks * geo.chunk, like)
            tiles.append((geo, bufs))
        with free_threads():  # the calling thread too may run on any of the rank's CPUs meanwhile
            Run(self, programs[self.rank], schedule, tiles, _reducer(op), like).execute()
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

    def post(self, send: bool, peer: int, channel: int, tensor):
        """Post one send or receive (tagged back-ends); its Work."""
        if send:
            return self.group.send([tensor], peer, self.tag_base + channel)
        return self.group.recv([tensor], peer, self.tag_base + channel)

    def post_batch(self, ops: list[tuple[bool, int, object]]) -> list:
        """Post ``(send, peer, tensor)`` operations as one batch (back-ends without tags: NCCL's
        group semantics); their Works."""
        import torch.distributed as dist

        return dist.batch_isend_irecv([dist.P2POp(dist.isend if send else dist.irecv, t, group_peer=peer,
                                                  group=self.group) for send, peer, t in ops])


class Run:
    """One execution of one rank's :class:`arborcc.torch.schedule.Schedule` on one call's
    buffers: ``tiles`` holds each tile's geometry and buffers; thread block instance ``i``
    is thread block ``i % T`` of ``tbs`` (``T`` of them) on tile ``i // T``, its messages
    tagged apart from other tiles'."""

    def __init__(self, ex: GroupExecutor, tbs: list[LoweredThreadBlock], schedule: Schedule,
                 tiles: list[tuple[Geometry, dict]], reduce_fn, like):
        self.ex, self.schedule, self.reduce_fn, self.like = ex, schedule, reduce_fn, like
        self.per_tile = len(tbs)
        self.tbs = [tb for _ in tiles for tb in tbs]
        self.geos = [geo for geo, _ in tiles]
        self.bufs = [bufs for _, bufs in tiles]
        largest = max(geo.chunk for geo in self.geos)
        self.temps = [ex.take_buffer(n * largest, like) for n in schedule.temps]
        self.works: dict[int, object] = {}  # token -> Work, until it is handed to the waiter
        self.kept: dict[int, object] = {}  # token -> what its operation reads or writes, until it completes
        self.peers: dict[int, tuple[str, int]] = {}  # token -> ("send"/"recv", peer), while in flight
        self.finished: set[int] = set()
        self.done: queue.SimpleQueue = queue.SimpleQueue()
        self.handed = 0  # how many of the schedule's waits the waiter has been given
        self.batch: list[tuple[int, bool, int, object]] = []  # untagged: operations posted together
        self.lock = threading.Lock()  # works and handed, shared with the sending thread

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

    def temp(self, i: int, slot: int, n: int):
        return self.temps[slot][:n * self.geos[i // self.per_tile].chunk]

    def tensor(self, i: int, what):
        kind, at, n = what
        if kind == MEMORY:
            return self.view(i, at, n)
        if kind == TEMP:
            return self.temp(i, at, n)
        assert kind == GATHER
        return self.read(i, at, n)

    # -- the schedule -------------------------------------------------------------------

    def execute(self) -> None:
        deadline = time.monotonic() + self.ex.timeout
        for act in self.schedule.actions:
            kind = act[0]
            if kind == POST_RECV or kind == POST_SEND:
                self.post(act[1], act[2], kind == POST_SEND, self.tensor(act[2], act[3]))
                continue
            self.flush()
            if kind == WAIT:
                deadline = self.wait(act[1], deadline)
            else:
                assert kind == STEP
                _, i, k, slot = act
                step = self.tbs[i].steps[k]
                self.step(i, step, None if slot is None else self.temp(i, slot, step.count))
        self.flush()
        for buf in self.temps:  # every operation has completed: no transfer touches them any more
            self.ex.give_buffer(buf)

    def post(self, token: int, i: int, send: bool, tensor) -> None:
        tb = self.tbs[i]
        peer = tb.send if send else tb.recv
        self.kept[token] = tensor
        self.peers[token] = ("send" if send else "recv", peer)
        if not self.ex.tagged:
            self.batch.append((token, send, peer, tensor))
            return
        tag = tb.channel + CHANNEL_TAGS * (i // self.per_tile)
        if send:
            self.ex.sender.submit(partial(self.post_send, token, peer, tag, tensor))
            return
        work = self.ex.post(send, peer, tag, tensor)
        with self.lock:
            self.works[token] = work
            self.hand_over()

    def post_send(self, token: int, peer: int, tag: int, tensor) -> None:
        """(On the sending thread.)"""
        try:
            work = self.ex.post(True, peer, tag, tensor)
        except BaseException as e:  # reported to the calling thread, which raises
            self.done.put((token, e))
            return
        with self.lock:
            self.works[token] = work
            self.hand_over()

    def flush(self) -> None:
        if self.batch:
            works = self.ex.post_batch([(send, peer, t) for _, send, peer, t in self.batch])
            with self.lock:
                self.works.update((token, work) for (token, *_), work in zip(self.batch, works))
                self.hand_over()
            self.batch = []

    def hand_over(self) -> None:
        """Give the waiter the posted operations next in the schedule's order of waits."""
        waits = self.schedule.waits
        while self.handed < len(waits) and waits[self.handed] in self.works:
            token = waits[self.handed]
            self.ex.waiter.submit(self.works.pop(token), token, self.done)
            self.handed += 1

    def wait(self, token: int, deadline: float) -> float:
        """Block until operation ``token`` has completed; the new deadline (time without progress)."""
        while token not in self.finished:
            try:
                done, error = self.done.get(timeout=max(0.0, min(ABORT_POLL, deadline - time.monotonic())))
            except queue.Empty:
                failure = self.ex.failure() if self.ex.failure else None
                if failure:
                    raise CommunicationError(f"rank {self.ex.rank_names[self.ex.rank]}: the job was stopped: "
                                             f"{failure}") from None
                if time.monotonic() < deadline:
                    continue
                kind, peer = self.peers[token]
                raise CommunicationError(f"rank {self.ex.rank_names[self.ex.rank]}: timed out after "
                                         f"{self.ex.timeout:g} s waiting for rank {self.ex.rank_names[peer]}") from None
            kind, peer = self.peers.pop(done)
            if error is not None:
                failure = self.ex.failure() if self.ex.failure else None
                if failure:
                    raise CommunicationError(f"rank {self.ex.rank_names[self.ex.rank]}: the job was stopped: "
                                             f"{failure}") from None
                me, them = self.ex.rank_names[self.ex.rank], self.ex.rank_names[peer]
                detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
                raise CommunicationError(f"rank {me}: rank {them} failed or left while this rank waited for its "
                                         f"{'message' if kind == 'recv' else 'receipt'} ({detail[:200]})")
            self.kept.pop(done)
            self.finished.add(done)
            deadline = time.monotonic() + self.ex.timeout
        self.finished.discard(token)
        return deadline

    def step(self, i: int, step: LoweredStep, data) -> None:
        """Run a step's reduction or copy; ``data``: its message, when it landed in a temporary."""
        op, n = step.op, step.count
        if op in (Op.RECV, Op.RECV_COPY_SEND):
            if data is not None:
                self.write(i, step.dst, n, data)
        elif op is Op.RECV_REDUCE_SEND:
            self.reduce_fn(self.read(i, step.src, n), data, out=data)
        elif op in (Op.RECV_REDUCE_COPY, Op.RECV_REDUCE_COPY_SEND):
            dst = self.view(i, step.dst, n)
            if dst is not None:
                self.reduce_fn(self.read(i, step.src, n), data, out=dst)
            else:
                self.reduce_fn(self.read(i, step.src, n), data, out=data)
                self.write(i, step.dst, n, data)
        elif op is Op.COPY:
            self.write(i, step.dst, n, self.read(i, step.src, n))
        elif op is Op.REDUCE:
            dst = self.view(i, step.dst, n)
            if dst is not None:
                self.reduce_fn(dst, self.read(i, step.src, n), out=dst)
            else:
                self.write(i, step.dst, n, self.reduce_fn(self.read(i, step.dst, n), self.read(i, step.src, n)))
