"""Deadlock in a plan's own semantics: an abstract run of every thread block of every rank,
each running its operations in order, as MSCCL++'s executor does
(``src/core/include/execution_kernel.hpp`` at :data:`~arborcc.ir.mscclpp.rules.MSCCLPP_COMMIT`).

What blocks, and on what (everything else - data operations, ``nop``, ``flush``, NVLS
loads and stores - runs without waiting for another thread block):

* ``wait``/``rlxwait`` on a memory or port channel: a channel's semaphore is a counter in
  device memory, shared by the thread blocks that use the channel; the wait returns when
  the peer has signalled the channel pair more times than it has been waited on. The
  ``k``-th channel of ``r`` to ``p`` pairs with the ``k``-th of ``p`` to ``r`` (a *link*
  per direction, as :mod:`.translate` reads it); a wait on a channel the peer has no
  partner for never returns. ``signal rlxsignal pws pwsf`` signal; signal and wait on a
  switch channel do nothing in the executor (``handleSignal``/``handleWait``);
* ``sem_acquire``: the device semaphore (``DeviceSemaphore::acquire``) returns when its
  ``init_value`` plus the releases so far exceed the acquires before;
* ``barrier``: ``DeviceSyncer::sync`` opens when ``num_threadblocks`` thread blocks of the
  rank have arrived at barrier id;
* a packet read (LL, :data:`~arborcc.ir.mscclpp.rules.PACKET_READS`): each packet waits
  for its flag, so the read returns when every chunk it reads has had a packet write
  (:data:`~arborcc.ir.mscclpp.rules.PACKET_WRITES`; ``gstorepkt`` writes every rank of
  its switch channel's group);
* a ``pipeline`` runs its inner operations once (every rank runs the same number of
  iterations, so one iteration's counts stand for all).

The run goes to a fixed point with a worklist: a thread block runs until an operation
blocks, and is woken when the counter, barrier or packet it waits for changes; every
operation runs at most once, so the work is linear in the operations. Thread blocks left
unfinished deadlock: :func:`plan_deadlocks` names the operation each one is stuck at, and
why nothing can release it.

Where several thread blocks wait on one link or semaphore the executor's order between
them is a race; the run takes one order (a blocked one takes what is available when it
is woken), so it answers for that order. With one waiter per link and per semaphore (as
in the plans arborcc writes and the official ones) the answer is exact.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from arborcc.ir.mscclpp import rules
from arborcc.ir.mscclpp.plan import ExecutionPlan, Operation, PlanGpu, PlanThreadBlock
from arborcc.ir.mscclpp.races import SIGNALS, WAITS
from arborcc.ir.report import Violation


@dataclass
class _Step:
    """One operation as the run sees it: the links it signals, what it waits for, and the
    packet chunks it writes or must find written."""

    op: Operation
    place: str
    signals: tuple = ()  #: links (ctype, sender, receiver, k)
    waits: tuple = ()  #: (link or None when the channel has no partner, channel, peer)
    releases: tuple = ()  #: semaphore ids
    acquires: tuple = ()
    packets_out: tuple = ()  #: (rank, buffer type, chunk)
    packets_in: tuple = ()


def plan_deadlocks(plan: ExecutionPlan, source: str, most: int = 10) -> list[Violation]:
    """The thread blocks of ``plan`` that can never finish (at most ``most``), each as a
    ``deadlock`` violation naming the operation it is stuck at; empty when all finish."""
    from arborcc.ir.mscclpp.translate import normalize_plan

    plan, places = normalize_plan(plan, source)
    return _Run(plan, places, source).stuck(most)


class _Run:
    def __init__(self, plan: ExecutionPlan, places: dict, source: str):
        self.plan, self.source = plan, source
        self.tables: dict[tuple[int, str], list[tuple[int, int, bool]]] = {}
        self.tbs: list[tuple[PlanGpu, PlanThreadBlock]] = [(g, tb) for g in plan.gpus for tb in g.threadblocks]
        self.steps: list[list[_Step]] = []
        for g, tb in self.tbs:
            steps = []
            for o, op in enumerate(tb.ops):
                where = places.get((g.id, tb.id, o), f"gpus[{g.id}].threadblocks[{tb.id}].ops[{o}]")
                inner = op.ops if op.name == "pipeline" else []
                steps.append(self.step(g, tb, op, where))
                steps.extend(self.step(g, tb, x, f"{where}.ops[{j}]") for j, x in enumerate(inner))
            self.steps.append(steps)
        self.signalled: dict[tuple, int] = defaultdict(int)
        self.waited: dict[tuple, int] = defaultdict(int)
        self.released: dict[tuple[int, int], int] = defaultdict(int)
        self.acquired: dict[tuple[int, int], int] = defaultdict(int)
        self.written: set[tuple[int, str, int]] = set()
        self.arrived: dict[tuple[int, int], list[int]] = defaultdict(list)  # (rank, barrier id) -> tbs waiting
        self.sleepers: dict[tuple, list[int]] = defaultdict(list)  # what a tb waits for -> tbs
        self.pc = [0] * len(self.tbs)
        self.at_barrier = [False] * len(self.tbs)
        self.run()

    # --- the operations ---------------------------------------------------------------
    def channel_table(self, rank: int, ctype: str) -> list[tuple[int, int, bool]]:
        """Per channel of ``ctype`` of ``rank`` (the rank's index): its peer, which of the
        rank's channels to that peer it is (``k``), and whether the peer has a ``k``-th
        channel back to pair with it."""
        key = (rank, ctype)
        if key not in self.tables:
            peers = self.plan.gpus[rank].channel_peers(ctype)
            back = {p: self.plan.gpus[p].channel_peers(ctype).count(rank) for p in set(peers)}
            self.tables[key] = [(p, peers[:i].count(p), back[p] > peers[:i].count(p)) for i, p in enumerate(peers)]
        return self.tables[key]

    def step(self, g: PlanGpu, tb: PlanThreadBlock, op: Operation, where: str) -> _Step:
        s = _Step(op, where)
        ctype = op.channel_type or "memory"
        if op.name in SIGNALS + WAITS and ctype in ("memory", "port"):
            table = self.channel_table(g.id, ctype)
            links_out, links_in = [], []
            for c in op.channel_ids:
                peer, k, partnered = table[tb.channels[ctype][c]]
                if op.name in SIGNALS:
                    if partnered:
                        links_out.append((ctype, g.id, peer, k))
                else:
                    links_in.append(((ctype, peer, g.id, k) if partnered else None, c, peer))
            s.signals, s.waits = tuple(links_out), tuple(links_in)
        if op.name == "sem_release":
            s.releases = op.semaphore_ids
        if op.name == "sem_acquire":
            s.acquires = op.semaphore_ids
        if op.name in rules.PACKET_READS:
            s.packets_in = tuple((g.id, ref.type, j) for ref in op.src[rules.PACKET_READS[op.name]:]
                                 for j in range(ref.index, ref.index + ref.size))
        if op.name in rules.PACKET_WRITES or op.name == "gstorepkt":
            out = []
            for ref in op.dst[rules.PACKET_WRITES.get(op.name, 0):]:
                if ref.kind == "L":
                    owners = [(g.id, ref.type)]
                elif ref.kind == "R":
                    rb = g.remote_buffers[tb.buffer_refs[ctype][ref.ref]]
                    owners = [(rb.rank, rb.type)]
                else:  # a switch channel: every rank of its group
                    groups = [(c.buffer_type, ranks) for c in g.channels if c.type == "switch"
                              for _size, ranks in c.groups]
                    btype, ranks = groups[tb.channels["switch"][ref.ref]]
                    owners = [(r, btype) for r in ranks]
                out.extend((r, t, j) for r, t in owners for j in range(ref.index, ref.index + ref.size))
            s.packets_out = tuple(out)
        return s

    # --- the run ------------------------------------------------------------------------
    def run(self) -> None:
        work = list(range(len(self.tbs)))
        while work:
            t = work.pop()
            if self.at_barrier[t]:
                continue
            steps, rank = self.steps[t], self.tbs[t][0].id
            while self.pc[t] < len(steps):
                s = steps[self.pc[t]]
                blocker = self.blocker(rank, s)
                if blocker is not None:
                    self.sleepers[blocker].append(t)
                    break
                if s.op.name == "barrier":
                    key = (rank, s.op.barrier_id)
                    self.arrived[key].append(t)
                    self.at_barrier[t] = True
                    if len(self.arrived[key]) >= (s.op.num_threadblocks or 1):
                        opened, self.arrived[key] = self.arrived[key], []
                        for m in opened:
                            self.at_barrier[m] = False
                            self.pc[m] += 1
                        work.extend(m for m in opened if m != t)
                        continue
                    break
                for link, _c, _p in s.waits:
                    self.waited[link] += 1
                for sem in s.acquires:
                    self.acquired[(rank, sem)] += 1
                changed = list(s.signals) + [("sem", rank, sem) for sem in s.releases] + list(s.packets_out)
                for link in s.signals:
                    self.signalled[link] += 1
                for sem in s.releases:
                    self.released[(rank, sem)] += 1
                self.written.update(s.packets_out)
                for key in changed:
                    if key in self.sleepers:
                        work.extend(self.sleepers.pop(key))
                self.pc[t] += 1

    def blocker(self, rank: int, s: _Step) -> tuple | None:
        """What the step waits for that has not happened yet (a link, ``("sem", rank, id)``
        or a packet chunk), or None when it can run."""
        for link, c, p in s.waits:
            if link is None:
                return ("unpartnered",)
            if self.signalled[link] <= self.waited[link]:
                return link
        for sem in s.acquires:
            if self.plan.gpus[rank].semaphores[sem] + self.released[(rank, sem)] <= self.acquired[(rank, sem)]:
                return ("sem", rank, sem)
        for chunk in s.packets_in:
            if chunk not in self.written:
                return chunk
        return None

    # --- the verdict --------------------------------------------------------------------
    def stuck(self, most: int) -> list[Violation]:
        out = []
        for t, (g, tb) in enumerate(self.tbs):
            if self.pc[t] < len(self.steps[t]) and len(out) < most:
                s = self.steps[t][self.pc[t]]
                out.append(Violation(g.id, tb.id, self.pc[t], "deadlock",
                                     f"{self.source}:{s.place}: {self.why(g, s)}"))
        return out

    def why(self, g: PlanGpu, s: _Step) -> str:
        name = s.op.name
        if name == "barrier":
            key = (g.id, s.op.barrier_id)
            members = sorted(self.tbs[m][1].id for m in self.arrived[key])
            return (f"barrier {s.op.barrier_id} waits for {s.op.num_threadblocks} thread blocks of rank {g.id}; only "
                    f"{len(members)} can reach it (thread blocks {members}): it never opens")
        for link, c, p in s.waits:
            ctype = s.op.channel_type or "memory"
            if link is None:
                return (f"{name} on {ctype} channel {c} from rank {p}: no signal can satisfy it (rank {p} has no "
                        f"{ctype} channel paired with it)")
            if self.signalled[link] <= self.waited[link]:
                total = self._count_ops(self.plan.gpus[p], lambda x: link in x.signals)
                return (f"{name} on {ctype} channel {c} from rank {p}: no signal can satisfy it (it is wait "
                        f"{self.waited[link] + 1} on that channel pair; rank {p} signals it {total} time"
                        f"{'s' if total != 1 else ''}, {self.signalled[link]} before it stops)")
        for sem in s.acquires:
            init = g.semaphores[sem]
            if init + self.released[(g.id, sem)] <= self.acquired[(g.id, sem)]:
                total = self._count_ops(g, lambda x: sem in x.releases)
                return (f"sem_acquire of semaphore {sem}: no release can satisfy it (acquire "
                        f"{self.acquired[(g.id, sem)] + 1}, init_value {init}; rank {g.id} releases it {total} time"
                        f"{'s' if total != 1 else ''}, {self.released[(g.id, sem)]} before it stops)")
        for rank, btype, j in s.packets_in:
            if (rank, btype, j) not in self.written:
                writers = self._count_ops(None, lambda x: (rank, btype, j) in x.packets_out)
                return (f"{name} reads packets of {btype} chunk {j} of rank {rank}: no packet write can satisfy it "
                        + ("(no operation writes them)" if not writers else
                           f"({writers} operation{'s' if writers != 1 else ''} would write them, none is reached)"))
        return f"{name} cannot run"

    def _count_ops(self, gpu: PlanGpu | None, test) -> int:
        """How many steps (of ``gpu``'s thread blocks, or all) pass ``test``."""
        return sum(1 for t, (g, _tb) in enumerate(self.tbs) if gpu is None or g.id == gpu.id
                   for x in self.steps[t] if test(x))
