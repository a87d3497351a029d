"""An MSCCL++ execution plan as an arborcc :class:`~arborcc.ir.model.Algorithm`.

MSCCL++ operations are one-sided (a rank writes into or reads from a peer's buffer;
signal/wait on a channel pair order them); the IR's are two-sided (a send is received
by the peer's matching receive). Where the meaning maps, :func:`plan_to_algorithm`
rewrites one into the other:

* a *link* is one direction of a channel pair: rank ``r``'s ``k``-th channel of a type
  to ``p`` pairs with ``p``'s ``k``-th channel to ``r`` (the executor connects them so),
  and the ``n``-th ``wait``/``rlxwait`` on ``p``'s side returns after the ``n``-th
  ``signal``/``rlxsignal`` on ``r``'s; each link that carries data is one IR connection
  ``r -> p`` (a link that only signals, such as a credit, has none: the IR has as many
  channels between two ranks as links that carry data between them);
* a write into ``p``'s buffer (``put pws pwsf``, the remote part of ``res rres``) is
  sent at the writer's next signal to ``p`` and received at the wait that signal
  releases, into the written chunks;
* a read of ``p``'s buffer (``get rre rres``) is sent by ``p`` at the signal that
  released the reader's last wait on a link from ``p``, received at that wait into extra
  scratch chunks of the reader, and read from there;
* LL packets (``ppkt rppkt respkt recspkt``) need no signal: each written scratch chunk
  is sent by the writer and received, in the writer's order, by the thread block whose
  packet read (``upkt repkt respkt recpkt recspkt rppkt``) first needs it;
* local operations become ``cpy``/``re`` steps (``dst := a + b + c`` as a copy and
  additions);
* ``sem_release``/``sem_acquire`` of a semaphore one thread block releases and one other
  acquires: the ``n``-th acquire depends on release ``n - init_value`` (and on the
  receives the releaser waited for); the acquirer knows the releaser's waits (its reads
  are served as the releaser's would be) and publishes the releaser's writes that no
  later signal of the releaser does; a thread block
  that starts by acquiring what another releases as its last operation continues it (the
  writer's split of long thread blocks) and is merged into it;
* ``barrier``: the operations after the ``n``-th barrier of an id in each member thread
  block depend on every member's operations before it, and writes a member has not
  published before it are published by the first member's first signal to that peer
  after it;
* thread-block groups (``tbg_info``): every chunk cut into as many parts as the groups
  need, each member's operation on its part (:meth:`_Translator.refine_for_groups`);
* ``pipeline``: unrolled into its iterations, each on its part of every chunk
  (:mod:`arborcc.ir.mscclpp.pipelines`);
* NVLS ``glres``/``gstore``/``gstorepkt`` on a switch channel: reads of every member's
  chunks and writes into them, as ``rres``/``rppkt`` over memory channels
  (:mod:`arborcc.ir.mscclpp.switch_channels`); the connections that carry them and
  nothing else are the Algorithm's ``switch_traffic``, which the simulator charges as
  in-switch reduction;
* a thread block's operations keep their order: the IR thread blocks one plan thread
  block becomes (one per link it sends or receives on, one for local work) are chained
  by dependencies - except receives, which a put lands whenever the sender makes it (a
  put never waits for the receiver): they are ordered by their link and by what the
  writer waited for (a put after a wait on the receiver's signal lands after the
  receiver's steps before that signal - the writer's credits), and the receiver's step
  after the wait (or the packet read) depends on them.

What does not map raises :class:`PlanNotTranslatable` naming the operation: a switch
channel its members do not agree on, a ``gstorepkt`` into another chunk of its own rank,
a barrier fewer or more
thread blocks reach than it waits for, a semaphore
several thread blocks release or acquire, a read with no wait before it, a write no
signal publishes, two thread blocks on one side of a link. The result is not proved
correct here - the verifier says whether it is.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from dataclasses import dataclass, field

from arborcc.errors import IRFormatError
from arborcc.ir.collectives import COLLECTIVES, signature
from arborcc.ir.model import Algorithm, Buffer, Dependency, Op, Protocol, RankProgram, Step, ThreadBlock
from arborcc.ir.mscclpp import rules
from arborcc.ir.mscclpp.pipelines import unroll_pipelines
from arborcc.ir.mscclpp.plan import BufferRef, ExecutionPlan, Operation, PlanGpu, PlanThreadBlock
from arborcc.ir.mscclpp.switch_channels import SwitchTraffic, lower_switch_ops

SIGNALS = ("signal", "rlxsignal", "pws", "pwsf")
WAITS = ("wait", "rlxwait")
#: MSCCL++'s collective names that arborcc spells otherwise; "test" (the DSL's TestCollective) and
#: "sendrecv" define no postcondition: arborcc's ``custom`` (deadlock and races are still checked)
COLLECTIVE_NAMES = {"reduce_scatter": "reducescatter", "all_reduce": "allreduce", "all_gather": "allgather",
                    "test": "custom", "sendrecv": "custom"}


class PlanNotTranslatable(IRFormatError):
    """A plan whose meaning has no arborcc IR form (a write no signal publishes, ...)."""


@dataclass
class _Message:
    """Chunks sent over a link: from the sender's ``src`` to the receiver's ``dst``."""

    src: tuple[Buffer, int, int]
    dst: tuple[Buffer, int, int]
    #: (link, ordinal) of the writer's last wait on a signal of the receiver before the write:
    #: the data cannot land before the receiver's steps that precede that signal
    after: tuple | None = None
    #: whether it is a transfer of an NVLS operation (a member's chunks to the reducing rank,
    #: or the result to a member)
    switch: bool = False


@dataclass
class _Rank:
    rank: int
    scratch: int  #: scratch chunks, the extra ones for remote reads included
    tbs: list[ThreadBlock] = field(default_factory=list)
    roles: dict = field(default_factory=dict)  #: (plan tb, role) -> IR thread block
    last: dict = field(default_factory=dict)  #: plan tb -> (IR tb id, step index) of its last step


def plan_to_algorithm(plan: ExecutionPlan, source: str) -> Algorithm:
    """The IR form of ``plan`` (see the module doc), or :class:`PlanNotTranslatable`."""
    return _Translator(plan, source).run()


def normalize_plan(plan: ExecutionPlan, source: str) -> tuple[ExecutionPlan, dict[tuple[int, int, int], str]]:
    """``plan`` with continuation thread blocks merged into the ones they continue and
    thread-block groups cut into finer chunks (as the translation sees it), and where each
    operation of it is in the file: ``(rank, tb, op) -> "gpus[r].threadblocks[t].ops[o]"``."""
    t = _Translator(plan, source)
    return t.plan, t.places


_BUF = {"i": Buffer.INPUT, "o": Buffer.OUTPUT, "s": Buffer.SCRATCH}


class _Translator:
    def __init__(self, plan: ExecutionPlan, source: str):
        self.places: dict[tuple[int, int, int], str] = {}  # (rank, tb, op) after merging -> where in the file
        self.source = source
        plan = dataclasses.replace(plan, gpus=[self.merge_continuations(g) for g in plan.gpus])
        plan = self.refine_for_groups(plan)
        plan = unroll_pipelines(plan, self.places, self.group_cut, self.fail)
        plan, self.switch_ops = lower_switch_ops(plan, self.places, self.fail)
        self.plan = plan
        self.peers: dict[tuple[int, str], list[int]] = {}  # (rank, channel type) -> peer by channel index
        self.n = plan.num_ranks
        self.ranks = [_Rank(g.id, g.scratch_chunks) for g in plan.gpus]
        self.link_ids: dict[tuple, int] = {}  # (type, r, p, k) or ("pkt", r, tb, p, tb) -> IR channel
        self.pair_links: dict[tuple[int, int], int] = defaultdict(int)  # (sender, receiver) -> links so far
        self.messages: dict[tuple, list[list[_Message]]] = defaultdict(list)  # link -> per signal
        self.handed: dict[tuple, dict[int, list[_Message]]] = defaultdict(lambda: defaultdict(list))
        self.handed_where: dict[tuple, str] = {}  # ((rank, barrier, n), peer) -> the barrier handing writes over
        self.after_barrier: dict[tuple, tuple] = {}  # ((rank, barrier, n), tb, peer) -> (link, signal ordinal)
        self.signalers: dict[tuple, int] = {}
        self.waiters: dict[tuple, int] = {}
        self.reads: dict[tuple[int, int, int, int], tuple[Buffer, int, int]] = {}  # op of a read -> shadow
        self.packet_writer: dict[tuple[int, int], tuple[int, int]] = {}  # (rank, scratch chunk) -> (rank, tb)
        self.packet_sends: dict[tuple, list[tuple[int, tuple]]] = defaultdict(list)  # pkt link -> chunks in order
        self.switch_steps: set[tuple[int, int, int]] = set()  # (rank, IR tb, step) an NVLS operation's local work
        self.carried: dict[tuple[int, int, int], set] = defaultdict(set)  # IR connection -> whether its transfers are NVLS ones

    def place(self, rank: int, tb: int, op: int) -> str:
        return self.places.get((rank, tb, op), f"gpus[{rank}].threadblocks[{tb}].ops[{op}]")

    def merge_continuations(self, gpu: PlanGpu) -> PlanGpu:
        """Thread blocks that continue another one become part of it: ``Y`` continues ``X``
        when ``Y``'s first operation acquires a semaphore (init 0) that only ``X``'s last
        operation releases and nothing else uses, and both list the same channels and
        remote buffers (the writer splits thread blocks beyond 64 operations so; MSCCL++
        keeps a channel's counters in device memory, so the parts share it in order)."""
        uses: dict[int, list[tuple[int, int, str]]] = defaultdict(list)  # sem -> (tb, op index, kind)
        for tb in gpu.threadblocks:
            for o, op in enumerate(tb.ops):
                if op.name in ("sem_acquire", "sem_release"):
                    for sem in op.semaphore_ids:
                        uses[sem].append((tb.id, o, op.name))
        by_id = {tb.id: tb for tb in gpu.threadblocks}
        follows: dict[int, int] = {}  # head tb -> its continuation
        for sem, events in uses.items():
            if gpu.semaphores[sem] != 0 or len(events) != 2:
                continue
            (a, ao, akind), (b, bo, bkind) = sorted(events, key=lambda e: e[2] != "sem_release")
            head, tail = by_id[a], by_id[b]
            if (akind, bkind) != ("sem_release", "sem_acquire") or a == b or bo != 0 \
                    or ao != len(head.ops) - 1 or head.ops[ao].semaphore_ids != (sem,) \
                    or tail.ops[0].semaphore_ids != (sem,) or head.channels != tail.channels \
                    or head.buffer_refs != tail.buffer_refs or a in follows:
                continue
            follows[a] = b
        continued = set(follows.values())
        merged = []
        for tb in gpu.threadblocks:
            if tb.id in continued:
                continue
            ops, places, cur = [], [], tb
            while True:
                skip_first = cur.id in continued
                skip_last = cur.id in follows
                for o, op in enumerate(cur.ops):
                    if (skip_first and o == 0) or (skip_last and o == len(cur.ops) - 1):
                        continue
                    ops.append(op)
                    places.append(f"gpus[{gpu.id}].threadblocks[{cur.id}].ops[{o}]")
                if cur.id not in follows:
                    break
                cur = by_id[follows[cur.id]]
            for o, where in enumerate(places):
                self.places[(gpu.id, tb.id, o)] = where
            merged.append(PlanThreadBlock(tb.id, tb.channels, tb.buffer_refs, ops))
        return dataclasses.replace(gpu, threadblocks=merged)

    def refine_for_groups(self, plan: ExecutionPlan) -> ExecutionPlan:
        """Thread-block groups (``tbg_info``) split an operation's chunks among ``tbg_size``
        thread blocks, member ``tb_id`` taking the ``tb_id``-th of ``tbg_size`` equal parts
        (the executor's ``calcOffset``). With every chunk cut into ``R`` (the least common
        multiple of the group sizes) the parts are whole chunks: the IR sees ``R`` times
        the chunks, each operation on its member's part, and no group."""
        sizes = {op.tbg[1] for g in plan.gpus for tb in g.threadblocks for top in tb.ops for op in [top, *top.ops]
                 if op.tbg}  # a pipeline's inner operations too
        cut = math.lcm(*sizes) if sizes else 1
        self.group_cut = cut
        if cut == 1:
            return plan
        from arborcc.limits import limit

        most = max(max(g.input_chunks, g.output_chunks, g.scratch_chunks) for g in plan.gpus)
        if most * cut > limit("chunks").value:
            self.fail("gpus", f"thread-block groups of sizes {sorted(sizes)} cut {most} chunks into {most * cut}, "
                              f"beyond the chunks limit ({limit('chunks').value:,})")

        def part(ref: BufferRef, tbg) -> BufferRef:
            start, length = ref.index * cut, ref.size * cut
            if tbg is not None:
                member, size = tbg
                length //= size
                start += member * length
            return dataclasses.replace(ref, index=start, size=length)

        def refine(op: Operation) -> Operation:
            return dataclasses.replace(op, src=tuple(part(b, op.tbg) for b in op.src),
                                       dst=tuple(part(b, op.tbg) for b in op.dst), tbg=None,
                                       ops=[refine(o) for o in op.ops])

        gpus = [dataclasses.replace(g, input_chunks=g.input_chunks * cut, output_chunks=g.output_chunks * cut,
                                    scratch_chunks=g.scratch_chunks * cut,
                                    threadblocks=[dataclasses.replace(tb, ops=[refine(o) for o in tb.ops])
                                                  for tb in g.threadblocks]) for g in plan.gpus]
        return dataclasses.replace(plan, gpus=gpus)

    def fail(self, where: str, problem: str):
        raise PlanNotTranslatable(problem, source=self.source, place=where)

    # --- pass 1: links, what each signal carries, packet writers ------------------------
    def link(self, rank: int, ctype: str, channel: int, where: str, outgoing: bool) -> tuple:
        peers = self.channel_peers(rank, ctype)
        peer = peers[channel]
        k = peers[:channel].count(peer)
        if self.channel_peers(peer, ctype).count(rank) <= k:
            self.fail(where, f"{ctype} channel {channel} of rank {rank} to rank {peer} has no partner: rank {peer} "
                             f"declares only {self.channel_peers(peer, ctype).count(rank)} to rank {rank}")
        key = (ctype, rank, peer, k) if outgoing else (ctype, peer, rank, k)
        return key

    def channel_peers(self, rank: int, ctype: str) -> list[int]:
        """Rank ``rank``'s :meth:`~arborcc.ir.mscclpp.plan.PlanGpu.channel_peers` (made once)."""
        key = (rank, ctype)
        peers = self.peers.get(key)
        if peers is None:
            peers = self.peers[key] = self.plan.gpus[rank].channel_peers(ctype)
        return peers

    def channel_links(self, rank: int, tb, op: Operation, where: str, outgoing: bool) -> list[tuple]:
        ctype = op.channel_type or "memory"
        if ctype not in ("memory", "port"):
            self.fail(where, f"{op.name} on a {ctype} channel has no IR form")
        return [self.link(rank, ctype, tb.channels[ctype][c], where, outgoing) for c in op.channel_ids]

    def remote_of(self, rank: int, tb, op: Operation, ref: BufferRef) -> tuple[int, Buffer]:
        rb = self.plan.gpus[rank].remote_buffers[tb.buffer_refs[op.channel_type or "memory"][ref.ref]]
        return rb.rank, _BUF[rb.type]

    def first_pass(self) -> None:
        """Walk every thread block (:meth:`walk`), each as far as it can go: one that
        acquires a semaphore waits until the release it needs has been walked, so that
        what the releaser knows (its waits, its unpublished writes) passes to it."""
        self.sem_known: dict[tuple[int, int], list] = defaultdict(list)  # (rank, sem) -> per release
        blocked = [(self.walk(gpu, tb), None) for gpu in self.plan.gpus for tb in gpu.threadblocks]
        while blocked:
            still, progressed = [], False
            for walker, need in blocked:
                if need is not None and len(self.sem_known[need[0]]) <= need[1]:
                    still.append((walker, need))
                    continue
                progressed = True
                try:
                    still.append((walker, next(walker) if need is None else walker.send(True)))
                except StopIteration:
                    pass
            if not progressed:  # a cycle of acquires: go on without what the releases carry
                walker, _need = still.pop(0)
                try:
                    still.append((walker, walker.send(False)))
                except StopIteration:
                    pass
            blocked = still
        self.publish_handed()

    def walk(self, gpu: PlanGpu, tb: PlanThreadBlock):
        """One thread block's first pass: links, what each signal carries, remote reads.
        Yields ``((rank, sem), n)`` before its acquire of release ``n`` of a semaphore and
        is sent whether that release has been walked."""
        r = gpu.id
        pending: dict[int, list[_Message]] = defaultdict(list)  # peer -> writes not yet published
        last_wait: dict[int, tuple] = {}  # peer -> (link, ordinal) of the last wait on a link from it
        counts: dict[tuple, int] = defaultdict(int)
        barriers_seen: dict[int, int] = defaultdict(int)
        passed: list[tuple] = []  # barriers this tb has passed: (rank, id, n)
        acquired: dict[int, int] = defaultdict(int)
        signalled_later = self.peers_signalled_later(gpu, tb)
        for o, op in enumerate(tb.ops):
            where = self.place(r, tb.id, o)
            self.check_mappable(op, where)
            if op.name == "sem_acquire":
                for sem in op.semaphore_ids:
                    n = acquired[sem] - gpu.semaphores[sem]
                    acquired[sem] += 1
                    if n >= 0 and (yield ((r, sem), n)):
                        waits, writes = self.sem_known[(r, sem)][n]
                        for peer, at in waits.items():
                            mine = last_wait.get(peer)
                            if mine is None or mine[0] != at[0] or mine[1] < at[1]:
                                last_wait[peer] = at
                        for peer, msgs in writes.items():
                            pending[peer].extend(msgs)
            for k, ref in enumerate(op.src):  # remote reads: served at the signal that released the last wait
                if ref.kind != "R":
                    continue
                owner, btype = self.remote_of(r, tb, op, ref)
                if owner not in last_wait:
                    self.fail(where, f"{op.name} reads rank {owner}'s buffer with no wait on a channel from "
                                     f"rank {owner} before it: nothing says the data is there")
                lk, ordinal = last_wait[owner]
                shadow = (Buffer.SCRATCH, self.ranks[r].scratch, ref.size)
                self.ranks[r].scratch += ref.size
                self.reads[(r, tb.id, o, k)] = shadow
                self.serve(lk, ordinal, _Message((btype, ref.index, ref.size), shadow,
                                                 switch=(r, tb.id, o) in self.switch_ops))
            for d, ref in enumerate(op.dst):
                if ref.kind != "R":
                    continue
                owner, btype = self.remote_of(r, tb, op, ref)
                if self.plan.protocol == "LL" and op.name in rules.PACKET_WRITES:
                    for j in range(ref.size):
                        self.packet_writer.setdefault((owner, ref.index + j), (r, tb.id))
                    continue
                # a put writes its d-th source; res/rres write the result they leave in dst[0]
                src = op.src[min(d, len(op.src) - 1)] if op.name in ("put", "pws", "pwsf") else op.dst[0]
                pending[owner].append(_Message((_BUF[src.type], src.index, ref.size),
                                               (btype, ref.index, ref.size), last_wait.get(owner),
                                               (r, tb.id, o) in self.switch_ops))
            if op.name == "barrier":  # writes not yet published: any member's later signal may
                key = (r, op.barrier_id, barriers_seen[op.barrier_id])
                barriers_seen[op.barrier_id] += 1
                passed.append(key)
                for peer, msgs in pending.items():
                    self.handed[key][peer].extend(msgs)
                    self.handed_where[(key, peer)] = where
                pending.clear()
            if op.name in SIGNALS:
                links = (self.channel_links(r, tb, op, where, True) if op.channel_ids else [])
                for lk in links:
                    self.own(self.signalers, lk, tb.id, where, "signal")
                    for key in passed:  # the first signal to this peer after each barrier passed
                        self.after_barrier.setdefault((key, tb.id, lk[2]), (lk, len(self.messages[lk])))
                    self.messages[lk].append(pending.pop(lk[2], []))
            if op.name in WAITS:
                for lk in self.channel_links(r, tb, op, where, False):
                    self.own(self.waiters, lk, tb.id, where, "wait")
                    last_wait[lk[1]] = (lk, counts[lk])
                    counts[lk] += 1
            if op.name == "sem_release":  # the acquirer knows these waits and publishes the writes
                handed = {peer: pending.pop(peer) for peer in list(pending)  # this tb will not publish
                          if pending[peer] and peer not in signalled_later[o]}
                for k, sem in enumerate(op.semaphore_ids):
                    self.sem_known[(r, sem)].append((dict(last_wait), handed if k == 0 else {}))
        for peer, msgs in pending.items():
            if msgs:
                self.fail(f"gpus[{r}].threadblocks[{tb.id}]", f"writes into rank {peer}'s buffer that no "
                                                              f"later signal to rank {peer} publishes")

    def peers_signalled_later(self, gpu: PlanGpu, tb: PlanThreadBlock) -> list[set[int]]:
        """Per operation of ``tb``: the peers it signals after that operation."""
        later: list[set[int]] = [set() for _ in tb.ops]
        seen: set[int] = set()
        for o in range(len(tb.ops) - 1, -1, -1):
            later[o] = set(seen)
            op = tb.ops[o]
            if op.name in SIGNALS and op.channel_ids:
                seen |= {lk[2] for lk in self.channel_links(gpu.id, tb, op, self.place(gpu.id, tb.id, o), True)}
        return later

    def publish_handed(self) -> None:
        """Writes handed over at a barrier travel with the first member's signal after it."""
        for key, by_peer in self.handed.items():  # writes before a barrier: the first member's signal after it
            for peer, msgs in by_peer.items():
                if not msgs:
                    continue
                carriers = sorted((tb, at) for (k, tb, p), at in self.after_barrier.items() if k == key and p == peer)
                if not carriers:
                    self.fail(self.handed_where[(key, peer)], f"writes into rank {peer}'s buffer that no signal to "
                                                              f"rank {peer} after barrier {key[1]} publishes")
                lk, ordinal = carriers[0][1]
                self.messages[lk][ordinal].extend(msgs)

    def serve(self, lk: tuple, ordinal: int, msg: _Message) -> None:
        self.serves[(lk, ordinal)].append(msg)

    def own(self, table: dict, lk: tuple, tb: int, where: str, what: str) -> None:
        if table.setdefault(lk, tb) != tb:
            self.fail(where, f"thread blocks {table[lk]} and {tb} both {what} on the {lk[0]} channel pair "
                             f"{lk[1]}->{lk[2]} #{lk[3]}: their order is not defined")

    def check_mappable(self, op: Operation, where: str) -> None:
        if op.name in rules.PACKET_READS and self.plan.protocol != "LL":
            self.fail(where, f"{op.name} reads packets in a {self.plan.protocol} plan")

    # --- pass 2: emit IR steps -------------------------------------------------------------
    def ir_tb(self, r: int, ptb: int, role: tuple) -> ThreadBlock:
        rk = self.ranks[r]
        tb = rk.roles.get((ptb, role))
        if tb is None:
            kind, peer, channel = role
            tb = ThreadBlock(len(rk.tbs), send=peer if kind == "send" else -1, recv=peer if kind == "recv" else -1,
                             channel=channel)
            rk.tbs.append(tb)
            rk.roles[(ptb, role)] = tb
        return tb

    def emit(self, r: int, ptb: int, role: tuple, step: Step) -> None:
        rk = self.ranks[r]
        tb = self.ir_tb(r, ptb, role)
        tb.steps.extend(self.deferred.pop((r, ptb), []))  # dependencies carried by nops right before the step
        prev = rk.last.get(ptb)
        if prev is not None and prev[0] != tb.id and step.dep is None:
            step.dep = Dependency(*prev)
            rk.tbs[prev[0]].steps[prev[1]].has_dep = True
        tb.steps.append(step)
        rk.last[ptb] = (tb.id, len(tb.steps) - 1)

    def land(self, r: int, ptb: int, role: tuple, step: Step) -> tuple[int, int]:
        """A receive: in its link's IR thread block, ordered only by the link (MSCCL++'s
        data lands in the receiver's memory whenever the sender puts it - the sender never
        waits for the receiver, so the receive is not chained to the receiver's program);
        the receiver's next step depends on it (the wait, or the packet read)."""
        tb = self.ir_tb(r, ptb, role)
        tb.steps.append(step)
        at = (tb.id, len(tb.steps) - 1)
        step.has_dep = True
        self.deferred[(r, ptb)].append(Step(Op.NOP, None, -1, None, -1, 0, dep=Dependency(*at)))
        return at

    def channel_of(self, lk: tuple) -> int:
        """The IR channel of a link that carries data: numbered among such links from the
        same rank to the same peer, in the order they first carry some. A link that only
        signals (the writer's credits go back on the channel pair of the data they free
        room for) has no IR connection: numbering it too gave two ranks that exchange data
        both ways up to twice the original's channels (beyond the runtime's 32)."""
        if lk not in self.link_ids:
            pair = (lk[1], lk[2]) if lk[0] != "pkt" else (lk[1], lk[3])
            self.link_ids[lk] = self.pair_links[pair]
            self.pair_links[pair] += 1
        return self.link_ids[lk]

    def local(self, r: int, ptb: int, op: Op, src: tuple | None, dst: tuple) -> None:
        self.emit(r, ptb, ("local", -1, 0), Step(op, src[0] if src else None, src[1] if src else -1, dst[0], dst[1],
                                                 dst[2]))

    def reduce_into(self, r: int, ptb: int, dst: tuple, srcs: list[tuple], where: str) -> None:
        """dst := srcs[0] + srcs[1] + ... as a copy and additions."""
        same = [s for s in srcs if s[:2] == dst[:2]]
        rest = [s for s in srcs if s[:2] != dst[:2]]
        for s in rest:
            if s[0] == dst[0] and s[1] < dst[1] + dst[2] and dst[1] < s[1] + s[2]:
                self.fail(where, "a reduction whose destination partly overlaps a source")
        if not same:
            self.local(r, ptb, Op.COPY, rest[0], dst)
            rest = rest[1:]
        for s in rest:
            self.local(r, ptb, Op.REDUCE, s, dst)

    def packet_in(self, r: int, ptb: int, chunks: range, received: set) -> None:
        """Receive the packets of ``chunks`` of this rank's scratch (and, in the writer's
        order, every packet sent before them on the same connection)."""
        for j in chunks:
            writer = self.packet_writer.get((r, j))
            if writer is None or writer[0] == r or (r, j) in received:
                continue
            key = (writer[0], writer[1], r, ptb)
            channel = self.channel_of(("pkt",) + key)
            for chunk, _msg in self.packet_sends[key]:
                if (r, chunk) in received:
                    continue
                received.add((r, chunk))
                at = self.land(r, ptb, ("recv", writer[0], channel), Step(Op.RECV, None, -1, Buffer.SCRATCH, chunk, 1))
                self.local_packets[(r, chunk)] = at  # other readers wait for it
                if chunk == j:
                    break

    def second_pass(self) -> None:
        consumers = self.consumers
        received: set = set()
        ordinals: dict[tuple, int] = defaultdict(int)
        for gpu in self.plan.gpus:
            r = gpu.id
            for tb in gpu.threadblocks:
                for o, op in enumerate(tb.ops):
                    where = self.place(r, tb.id, o)
                    self.operation(r, tb, o, op, where, consumers, received, ordinals)

    def operation(self, r, tb, o, op, where, consumers, received, ordinals) -> None:
        ptb = tb.id
        loc = [(_BUF[x.type], x.index, x.size) if x.kind == "L" else self.reads.get((r, ptb, o, k))
               for k, x in enumerate(op.src)]
        if op.name in rules.PACKET_READS:
            for ref in op.src[rules.PACKET_READS[op.name]:]:
                self.packet_in(r, ptb, range(ref.index, ref.index + ref.size), received)
                for j in range(ref.index, ref.index + ref.size):  # packets another tb of this rank holds
                    writer = self.packet_writer_local.get((r, j), consumers.get((r, j)))
                    if writer is not None and writer != ptb:
                        nop = Step(Op.NOP, None, -1, None, -1, 0)  # placed before this tb's next step
                        self.deferred[(r, ptb)].append(nop)
                        self.pending_deps.append((nop, (r, j)))
        name = op.name
        if name in ("copy", "cpkt", "upkt", "get"):
            for s, d in zip(loc, op.dst):
                self.local(r, ptb, Op.COPY, s, (_BUF[d.type], d.index, d.size))
        elif name in ("re", "repkt", "res", "respkt", "recpkt", "recspkt", "rre", "rres", "glres", "gstore"):
            d0 = op.dst[0]
            dst = (_BUF[d0.type], d0.index, d0.size)
            local = self.ir_tb(r, ptb, ("local", -1, 0))
            first = len(local.steps)
            self.reduce_into(r, ptb, dst, loc, where)
            if (r, ptb, o) in self.switch_ops:  # the switch reduces and stores: no GPU work
                self.switch_steps.update((r, local.id, s) for s in range(first, len(local.steps))
                                         if local.steps[s].op in (Op.COPY, Op.REDUCE))
            if name in ("recpkt", "recspkt"):
                d1 = op.dst[1]
                self.local(r, ptb, Op.COPY, dst, (_BUF[d1.type], d1.index, d1.size))
        if self.plan.protocol == "LL" and name in rules.PACKET_WRITES:
            for d, ref in enumerate(op.dst):
                if ref.kind == "L" and d >= rules.PACKET_WRITES[name]:  # local packets: readers may be other tbs
                    for j in range(ref.size):
                        self.local_packets[(r, ref.index + j)] = self.ranks[r].last[ptb]
                if ref.kind != "R":
                    continue
                # ppkt writes its d-th source (handlePutPackets); the others the result in dst[0]
                src = (loc[min(d, len(loc) - 1)] if name in ("ppkt", "rppkt")
                       else (_BUF[op.dst[0].type], op.dst[0].index, op.dst[0].size))
                owner, _ = self.remote_of(r, tb, op, ref)
                for j in range(ref.size):
                    consumer = consumers.get((owner, ref.index + j))
                    if consumer is None:
                        continue  # written, never read: nothing to deliver
                    key = (r, ptb, owner, consumer)
                    channel = self.channel_of(("pkt",) + key)
                    self.carried[(r, owner, channel)].add((r, ptb, o) in self.switch_ops)
                    self.emit(r, ptb, ("send", owner, channel),
                              Step(Op.SEND, src[0], src[1] + j, Buffer.SCRATCH, ref.index + j, 1))
        if name in SIGNALS and op.channel_ids:
            for lk in self.channel_links(r, tb, op, where, True):
                self.signal_at[(lk, ordinals[("s",) + lk])] = self.ranks[r].last.get(ptb)
                msgs = self.batch(lk, ordinals[("s",) + lk])
                ordinals[("s",) + lk] += 1
                if not msgs:  # a signal only (a credit): no IR connection for it
                    continue
                channel = self.channel_of(lk)
                for m in msgs:
                    self.carried[(r, lk[2], channel)].add(m.switch)
                    self.emit(r, ptb, ("send", lk[2], channel), Step(Op.SEND, m.src[0], m.src[1], m.dst[0], m.dst[1],
                                                                     m.src[2]))
        if name == "barrier":  # after it, this tb waits for every other member's steps before it
            key = (r, op.barrier_id, self.barrier_counts[(r, ptb, op.barrier_id)])
            self.barrier_counts[(r, ptb, op.barrier_id)] += 1
            self.barrier_arrivals[key][ptb] = self.ranks[r].last.get(ptb)
            for other in self.barrier_members[key]:
                if other != ptb:
                    nop = Step(Op.NOP, None, -1, None, -1, 0)
                    self.deferred[(r, ptb)].append(nop)
                    self.barrier_waits.append((nop, key, other))
        if name == "sem_release":
            # receives this tb waited for but has no step after yet: the acquirer waits for them too
            landed = [nop.dep for nop in self.deferred.get((r, ptb), []) if nop.dep is not None]
            for sem in op.semaphore_ids:
                self.sem_releases[(r, sem)].append((ptb, self.ranks[r].last.get(ptb), where, landed))
        if name == "sem_acquire":
            for sem in op.semaphore_ids:
                n = len(self.sem_acquires[(r, sem)]) - self.plan.gpus[r].semaphores[sem]
                releases = self.sem_releases.get((r, sem), [])
                for dep in releases[n][3] if 0 <= n < len(releases) else []:
                    self.deferred[(r, ptb)].append(Step(Op.NOP, None, -1, None, -1, 0, dep=dep))
                nop = Step(Op.NOP, None, -1, None, -1, 0)  # placed before this tb's next step
                self.deferred[(r, ptb)].append(nop)
                self.sem_acquires[(r, sem)].append((ptb, nop, where))
        if name in WAITS:
            for lk in self.channel_links(r, tb, op, where, False):
                msgs = self.batch(lk, ordinals[("w",) + lk])
                ordinals[("w",) + lk] += 1
                if not msgs:
                    continue
                channel = self.channel_of(lk)
                for m in msgs:
                    step = Step(Op.RECV, None, -1, m.dst[0], m.dst[1], m.dst[2])
                    self.land(r, ptb, ("recv", lk[1], channel), step)
                    if m.after is not None:
                        self.landing_deps.append((step, m.after, r))

    def batch(self, lk: tuple, ordinal: int) -> list[_Message]:
        """What the ``ordinal``-th signal on link ``lk`` carries, in order; messages that
        continue each other (both ends contiguous) travel as one, so that a signal carries
        as few IR messages as the plan's puts allow (the IR's FIFOs hold a few only)."""
        writes = self.messages[lk][ordinal] if ordinal < len(self.messages[lk]) else []
        merged: list[_Message] = []
        for m in writes + self.serves.get((lk, ordinal), []):
            if merged:
                last = merged[-1]
                if (last.src[0], last.src[1] + last.src[2]) == m.src[:2] and \
                        (last.dst[0], last.dst[1] + last.dst[2]) == m.dst[:2] and last.after == m.after \
                        and last.switch == m.switch:
                    merged[-1] = _Message((last.src[0], last.src[1], last.src[2] + m.src[2]),
                                          (last.dst[0], last.dst[1], last.dst[2] + m.dst[2]), m.after, m.switch)
                    continue
            merged.append(m)
        return merged

    # --- the whole ------------------------------------------------------------------------
    def run(self) -> Algorithm:
        plan = self.plan
        collective = COLLECTIVE_NAMES.get(plan.collective, plan.collective)
        if collective not in COLLECTIVES:
            self.fail("collective", f"{plan.collective!r} is no collective arborcc knows ({', '.join(COLLECTIVES)})")
        self.serves: dict[tuple, list[_Message]] = defaultdict(list)
        self.local_packets: dict[tuple[int, int], tuple[int, int]] = {}  # (rank, chunk) -> IR (tb, step) writing it
        self.packet_writer_local: dict[tuple[int, int], int] = {}  # (rank, chunk) -> plan tb writing its packets
        self.pending_deps: list[tuple[Step, tuple[int, int]]] = []
        self.deferred: dict[tuple[int, int], list[Step]] = defaultdict(list)
        self.signal_at: dict[tuple, tuple[int, int] | None] = {}  # (link, ordinal) -> last step before the signal
        self.landing_deps: list[tuple[Step, tuple, int]] = []  # (receive, (link, ordinal), rank)
        self.barrier_counts: dict[tuple[int, int, int], int] = defaultdict(int)  # (rank, tb, barrier) -> seen
        self.barrier_arrivals: dict[tuple, dict] = defaultdict(dict)  # (rank, barrier, n) -> tb -> its last step
        self.barrier_waits: list[tuple[Step, tuple, int]] = []  # (nop, (rank, barrier, n), the tb it waits for)
        self.barrier_members = self.find_barrier_members()
        self.sem_releases: dict[tuple[int, int], list] = defaultdict(list)  # (rank, sem) -> (tb, IR step, where,
        #                                                                     receives it waited for)
        self.sem_acquires: dict[tuple[int, int], list] = defaultdict(list)  # (rank, sem) -> (tb, nop, where)
        self.first_pass()
        self.packet_plan()
        self.second_pass()
        self.match_semaphores()
        for step, key, r in self.landing_deps:  # a put lands after what the receiver did before its signal
            target = self.signal_at.get(key)
            if target is not None:
                step.dep = Dependency(*target)
                self.ranks[r].tbs[target[0]].steps[target[1]].has_dep = True
        for nop, key, other in self.barrier_waits:
            target = self.barrier_arrivals[key].get(other)
            if target is not None:
                nop.dep = Dependency(*target)
                self.ranks[key[0]].tbs[target[0]].steps[target[1]].has_dep = True
        for nop, key in self.pending_deps:  # a packet read waits for the local write of its packets
            target = self.local_packets.get(key)
            if target is not None:
                nop.dep = Dependency(*target)
                self.ranks[key[0]].tbs[target[0]].steps[target[1]].has_dep = True
        waits_on: dict[tuple, int] = defaultdict(int)  # link -> the receiver's wait operations on it
        receivers = {lk[2] for lk in self.messages}
        for g in plan.gpus:
            if g.id in receivers:
                for tb in g.threadblocks:
                    for op in tb.ops:
                        if op.name in WAITS and op.channel_ids:
                            for lk in set(self.channel_links(g.id, tb, op, "", False)):
                                waits_on[lk] += 1
        for lk, sigs in self.messages.items():
            waits = waits_on[lk]
            if waits != len(sigs):
                self.fail(f"gpus[{lk[1]}]", f"signals rank {lk[2]} {len(sigs)} times on {lk[0]} channel pair #{lk[3]} "
                                            f"but rank {lk[2]} waits {waits} times: the plan deadlocks or leaves a "
                                            f"signal pending")
        k = self.chunks_per_loop(collective)
        ranks = []
        for gpu, rk in zip(plan.gpus, self.ranks):
            ranks.append(RankProgram(gpu.id, gpu.input_chunks, gpu.output_chunks, rk.scratch, rk.tbs))
        return Algorithm(plan.name, collective, self.n, k, ranks,
                         Protocol.LL if plan.protocol == "LL" else Protocol.SIMPLE, inplace=plan.inplace,
                         outofplace=not plan.inplace,
                         min_bytes=min(plan.min_message_size, 2**63 - 1),
                         max_bytes=0 if plan.max_message_size >= 2**63 - 1 else plan.max_message_size,
                         switch_traffic=self.switch_traffic())

    def switch_traffic(self) -> SwitchTraffic | None:
        """The plan's NVLS operations and the connections that carry only their transfers
        (a connection that also carries plain data keeps the plain model)."""
        if not self.switch_ops:
            return None
        return SwitchTraffic(tuple(self.switch_ops.values()),
                             frozenset(c for c, kinds in self.carried.items() if kinds == {True}),
                             frozenset(self.switch_steps))

    def find_barrier_members(self) -> dict[tuple[int, int, int], list[int]]:
        """(rank, barrier id, n) -> the thread blocks whose n-th barrier of that id it is;
        their number must be the barrier's ``num_threadblocks`` (else it never opens)."""
        members: dict[tuple[int, int, int], list[int]] = defaultdict(list)
        expected: dict[tuple[int, int, int], tuple[int, str]] = {}
        for gpu in self.plan.gpus:
            for tb in gpu.threadblocks:
                seen: dict[int, int] = defaultdict(int)
                for o, op in enumerate(tb.ops):
                    if op.name != "barrier":
                        continue
                    key = (gpu.id, op.barrier_id, seen[op.barrier_id])
                    seen[op.barrier_id] += 1
                    members[key].append(tb.id)
                    expected.setdefault(key, (op.num_threadblocks, self.place(gpu.id, tb.id, o)))
        for key, tbs in members.items():
            want, where = expected[key]
            if want != len(tbs):
                self.fail(where, f"barrier {key[1]} waits for {want} thread blocks but {len(tbs)} of rank {key[0]} "
                                 f"reach it (thread blocks {tbs}): it never opens")
        return members

    def match_semaphores(self) -> None:
        """A semaphore released by one thread block and acquired by one other: the n-th
        acquire waits for release n - init_value (a dependency on the step before it)."""
        for (r, sem), acquires in self.sem_acquires.items():
            releases = self.sem_releases.get((r, sem), [])
            for what, events in (("released", releases), ("acquired", acquires)):
                tbs = sorted({e[0] for e in events})
                if len(tbs) > 1:
                    self.fail(events[1][2], f"semaphore {sem} of rank {r} is {what} by thread blocks {tbs}: their "
                                            f"order is not defined")
            init = self.plan.gpus[r].semaphores[sem]
            for n, (_tb, nop, where) in enumerate(acquires):
                if n < init:
                    continue
                if n - init >= len(releases):
                    self.fail(where, f"sem_acquire of semaphore {sem}: acquired {len(acquires)} times, released "
                                     f"{len(releases)} times from init_value {init}: it waits forever")
                target = releases[n - init][1]
                if target is not None:
                    nop.dep = Dependency(*target)
                    self.ranks[r].tbs[target[0]].steps[target[1]].has_dep = True

    def packet_plan(self) -> None:
        """Which thread block first reads each packet chunk, and the order in which each
        writer thread block sends packets to each such reader."""
        self.consumers: dict[tuple[int, int], int] = {}  # (rank, scratch chunk) -> plan tb reading its packets
        consumers = self.consumers
        for gpu in self.plan.gpus:
            for tb in gpu.threadblocks:
                for op in tb.ops:
                    if op.name in rules.PACKET_READS:
                        for ref in op.src[rules.PACKET_READS[op.name]:]:
                            for j in range(ref.size):
                                consumers.setdefault((gpu.id, ref.index + j), tb.id)
        for gpu in self.plan.gpus:
            for tb in gpu.threadblocks:
                for op in tb.ops:
                    if self.plan.protocol != "LL" or op.name not in rules.PACKET_WRITES:
                        continue
                    for ref in op.dst[rules.PACKET_WRITES[op.name]:]:
                        if ref.kind == "L":
                            for j in range(ref.size):
                                self.packet_writer_local.setdefault((gpu.id, ref.index + j), tb.id)
                    for ref in op.dst:
                        if ref.kind != "R":
                            continue
                        owner, _ = self.remote_of(gpu.id, tb, op, ref)
                        for j in range(ref.size):
                            consumer = consumers.get((owner, ref.index + j))
                            if consumer is not None:
                                self.packet_sends[(gpu.id, tb.id, owner, consumer)].append((ref.index + j, None))

    def chunks_per_loop(self, collective: str) -> int:
        g = self.plan.gpus[0]
        for k in sorted({g.input_chunks, g.output_chunks, g.input_chunks * self.n, g.output_chunks * self.n} - {0}):
            sig = signature(collective, self.n, k, 0, 0)
            if sig is None or (sig.input_chunks in (g.input_chunks, 0) or self.plan.inplace) and \
                    (sig.output_chunks == g.output_chunks or self.plan.inplace and g.output_chunks == 0):
                return k
        self.fail("gpus[0]", f"input_chunks {g.input_chunks} and output_chunks {g.output_chunks} fit no {collective} "
                             f"layout on {self.n} ranks")
