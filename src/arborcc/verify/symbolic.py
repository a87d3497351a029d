"""Symbolic execution of an algorithm with the runtime's semantics.

The machine (GC3 section 6; MSCCL runtime):

* every thread block runs its steps in order, all thread blocks concurrently;
* a step with a dependency waits until the named thread block's semaphore reaches
  the named step; a thread block sets its semaphore after each step with ``hasdep``
  (``nop`` steps are dropped by the runtimes' parsers and never set it);
* each connection (sender rank, receiver rank, channel) is a FIFO of ``slots``
  entries (NCCL_STEPS = 8 for Simple); a send occupies one slot whatever its count and
  blocks while all slots are full; a receive blocks while the FIFO is empty and pops
  the oldest entry; a fused receive-and-send step needs both at once;
* chunk slots hold symbolic values (:mod:`arborcc.verify.values`).

A thread block's enabledness is persistent (only its own steps consume what it waits
for: it is the only reader of its receive FIFO, the only writer of its send FIFO, and
semaphores only grow), so the order in which ready thread blocks are run does not
change whether the run completes: one greedy run decides deadlock for every
schedule. The values it computes are the values of every schedule when there is no
race, which the run checks at the same time (:mod:`arborcc.verify.races`): for each
slot it keeps the last writer and the readers since, and asks whether each
conflicting pair is ordered. Slots with the same history are kept together, as
segments of a rank's memory (:mod:`arborcc.verify.memory`), so a step costs about
the same whatever its chunk count.

This module is the description of the run and the one that explains what is wrong.
The verifier first asks the compiled proof (:mod:`arborcc.verify.proof`, the same
machine over one value per chunk slot), which only answers whether this run would
report nothing; the layouts it does not prove are run here.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from arborcc.ir.limits import DEFAULT_SLOTS
from arborcc.ir.model import Algorithm, Buffer, Op
from arborcc.ir.report import ViolationLog
from arborcc.verify.deadlock import TbName, Wait, explain_deadlock
from arborcc.verify.layout import MemoryMap
from arborcc.verify.memory import RankMemory, initial_memory
from arborcc.verify.races import ConflictLog, HappensBefore, resolve_candidates
from arborcc.verify.values import add_runs, first_uninitialized, fit_runs

MAX_CANDIDATES = 2_000_000  #: conflicting pairs analysed across ranks before giving up (reported)


class _Conn:
    __slots__ = ("q", "sender", "receiver", "src", "dst", "ch", "reader_waiting", "writer_waiting")

    def __init__(self, src: int, dst: int, ch: int):
        self.q: deque = deque()
        self.sender: int | None = None
        self.receiver: int | None = None
        self.src, self.dst, self.ch = src, dst, ch
        self.reader_waiting = False
        self.writer_waiting = False


@dataclass
class SimOutcome:
    finished: bool
    memory: list[RankMemory]  #: by rank id: values and last writers at the end
    steps_run: int = 0
    race_candidates: int = 0  #: conflicts not ordered by rank-local edges (resolved globally)


def simulate(algo: Algorithm, mm: MemoryMap, cuts: dict[int, dict[Buffer, set[int]]], log: ViolationLog,
             slots: int = DEFAULT_SLOTS, check_races: bool = True) -> SimOutcome:
    """Run ``algo`` on memory laid out by ``mm``; violations go to ``log``.

    Assumes :func:`arborcc.verify.structure.check_structure` found nothing fatal;
    ``cuts`` are the ends of accessed chunk ranges it collected.
    """
    return simulate_layouts(algo, [mm], cuts, [log], slots, check_races)[0]


def simulate_layouts(algo: Algorithm, mms: list[MemoryMap], cuts: dict[int, dict[Buffer, set[int]]],
                     logs: list[ViolationLog], slots: int = DEFAULT_SLOTS,
                     check_races: bool = True) -> list[SimOutcome]:
    """:func:`simulate` on each memory layout of ``mms`` (one per kind of call), in one
    run: which step runs when does not depend on the memory (module doc), so the
    schedule, its FIFOs and its happens-before are shared, and every layout has its own
    memory, race candidates and violations (into the matching log of ``logs``)."""
    if slots < 1:
        raise ValueError("a connection needs at least one slot")
    progs = sorted(algo.ranks, key=lambda p: p.rank)
    tb_rank: list[int] = []
    tb_obj: list = []
    ids_by_rank: list[dict[int, int]] = []
    for prog in progs:
        ids: dict[int, int] = {}
        for tb in prog.threadblocks:
            ids[tb.id] = len(tb_obj)
            tb_obj.append(tb)
            tb_rank.append(prog.rank)
        ids_by_rank.append(ids)
    ntb = len(tb_obj)
    tb_base = [0] * (ntb + 1)
    for g, tb in enumerate(tb_obj):
        tb_base[g + 1] = tb_base[g] + len(tb.steps)
    total = tb_base[ntb]

    conns: dict[tuple[int, int, int], _Conn] = {}
    send_conn: list[_Conn | None] = [None] * ntb
    recv_conn: list[_Conn | None] = [None] * ntb
    for g, tb in enumerate(tb_obj):
        r = tb_rank[g]
        if tb.send >= 0:
            key = (r, tb.send, tb.channel)
            c = conns.get(key) or conns.setdefault(key, _Conn(*key))
            c.sender = g
            send_conn[g] = c
        if tb.recv >= 0:
            key = (tb.recv, r, tb.channel)
            c = conns.get(key) or conns.setdefault(key, _Conn(*key))
            c.receiver = g
            recv_conn[g] = c

    hb = HappensBefore(tb_base, tb_rank, total)
    gid_tb, done_seq, recv_src, sends_flag, dep_target = hb.gid_tb, hb.done_seq, hb.recv_src, hb.sends, hb.dep_target
    #: per layout: (index, memory by rank, bases by rank, race log or None, violation log)
    views = [(v, initial_memory(algo, mm, cuts), mm.bases, ConflictLog(hb, MAX_CANDIDATES) if check_races else None,
              log) for v, (mm, log) in enumerate(zip(mms, logs))]
    nviews = len(views)
    #: per rank, each layout's (index, memory of the rank, its bases, race log, the layout)
    rank_views = [[(v, memory[r], bases[r], conflicts, view) for view in views
                   for v, memory, bases, conflicts, _ in (view,)] for r in range(len(progs))]

    def where(gid: int) -> tuple[int, int, int]:
        g = gid_tb[gid]
        return tb_rank[g], tb_obj[g].id, gid - tb_base[g]

    def slot_name(bases, r: int, addr: int) -> str:
        prog = progs[r]
        names = []
        for buf, size in ((Buffer.INPUT, prog.input_chunks), (Buffer.OUTPUT, prog.output_chunks),
                          (Buffer.SCRATCH, prog.scratch_chunks)):
            b = bases[r][buf]
            if b <= addr < b + size:
                names.append(f"{buf.name.lower()} chunk {addr - b}")
        return " = ".join(names) if names else f"slot {addr}"

    def check_initialized(view, r: int, g: int, i: int, a: int, runs: list, what: str) -> None:
        """Log a read of uninitialized slots (called unless ``runs`` is one run of data)."""
        j = first_uninitialized(runs)
        if j is not None:
            view[4].add(r, tb_obj[g].id, i, "uninitialized",
                        f"'{tb_obj[g].steps[i].op.value}' reads {slot_name(view[2], r, a + j)} ({what}), "
                        "which holds no data yet")

    pc = [0] * ntb
    signal = [-1] * ntb
    dep_waiters: dict[int, list[tuple[int, int]]] = {}
    ready = deque(range(ntb))
    seq = 0
    NOP = Op.NOP

    while ready:
        g = ready.popleft()
        tb = tb_obj[g]
        steps = tb.steps
        nsteps = len(steps)
        r = tb_rank[g]
        ids = ids_by_rank[r]
        rc = recv_conn[g]
        sc = send_conn[g]
        gbase = tb_base[g]
        i = pc[g]
        while i < nsteps:
            st = steps[i]
            op = st.op
            dep = st.dep
            if dep is not None:
                tg = ids[dep.tb]
                if signal[tg] < dep.step:
                    dep_waiters.setdefault(tg, []).append((dep.step, g))
                    break
            sends, receives = op.sends, op.receives
            if receives and not rc.q:
                rc.reader_waiting = True
                break
            if sends and len(sc.q) >= slots:
                sc.writer_waiting = True
                break
            gid = gbase + i
            if dep is not None:
                dep_target[gid] = tb_base[tg] + dep.step
                if check_races:
                    hb.on_dependency(g, i, tg, dep.step)
            if op is not NOP:
                reads_src, reads_dst, writes_dst = op.reads_src, op.reads_dst, op.writes_dst
                cnt = st.count
                gots = None
                if receives:
                    sgid, gots, sent = rc.q.popleft()
                    recv_src[gid] = sgid
                    if rc.writer_waiting:
                        rc.writer_waiting = False
                        ready.append(rc.sender)
                    if sent != cnt:
                        sr, stb, si = where(sgid)
                        for view in views:
                            view[4].add(r, tb.id, i, "mismatch",
                                        f"'{op.value}' receives {cnt} chunk(s) but the matching send (rank {sr} "
                                        f"tb {stb} step {si}) sent {sent}")
                        gots = [fit_runs(got, cnt) for got in gots]
                outs = [None] * nviews if sends else None
                for v, rmem, base_r, conflicts, view in rank_views[r]:
                    got = gots[v] if gots is not None else None
                    src = None
                    if reads_src:
                        sa = base_r[st.src_buf] + st.src_off
                        src = rmem.read(sa, cnt, gid, g, conflicts)
                        if len(src) > 1 or type(src[0][1]) is not tuple:
                            check_initialized(view, r, g, i, sa, src, "source")
                    # the step's value (arborcc.ir.steps): received, + src where it reads its
                    # source, or dst + src; written where it writes, pushed where it sends
                    out = got if receives else src
                    if receives and reads_src:
                        out = add_runs(src, got)
                    if writes_dst:
                        da = base_r[st.dst_buf] + st.dst_off
                        if reads_dst:
                            cur = rmem.read(da, cnt, gid, g, conflicts)
                            if len(cur) > 1 or type(cur[0][1]) is not tuple:
                                check_initialized(view, r, g, i, da, cur, "destination")
                            out = add_runs(cur, src)
                        rmem.write(da, out, cnt, gid, g, receives, conflicts)
                    if sends:
                        outs[v] = out
                if sends:
                    sends_flag[gid] = 1
                    sc.q.append((gid, outs, cnt))
                    if sc.reader_waiting:
                        sc.reader_waiting = False
                        ready.append(sc.receiver)
                if st.has_dep:
                    signal[g] = i
                    waiters = dep_waiters.get(g)
                    if waiters:
                        still = []
                        for k, wg in waiters:
                            if k <= i:
                                ready.append(wg)
                            else:
                                still.append((k, wg))
                        dep_waiters[g] = still
            seq += 1
            done_seq[gid] = seq
            i += 1
        pc[g] = i

    unfinished = [g for g in range(ntb) if pc[g] < len(tb_obj[g].steps)]
    outcomes = []
    for _, memory, bases, conflicts, log in views:
        candidates = conflicts.candidates if conflicts is not None else []
        if candidates:
            reported: set[tuple[int, int]] = set()
            for c, ok in zip(candidates, resolve_candidates(hb, candidates)):
                if ok or (c.x, c.y) in reported:
                    continue
                reported.add((c.x, c.y))
                r, tbid, i = where(c.y)
                _, ptb, pi = where(c.x)
                mine = "writes" if c.y_writes else "reads"
                theirs = "writes" if c.x_writes else "reads"
                log.add(r, tbid, i, "race",
                        f"race: {mine} {slot_name(bases, r, c.addr)}, which tb {ptb} step {pi} {theirs}, and "
                        "neither is ordered before the other (no program-order/dependency path, directly or "
                        "through other ranks)")
            if len(candidates) >= MAX_CANDIDATES:
                log.add(None, None, None, "race",
                        f"race check incomplete: more than {MAX_CANDIDATES} conflicting access pairs are not "
                        "ordered by dependencies; only the first were analysed")
        if unfinished:
            names = {g: TbName(tb_rank[g], tb_obj[g].id, pc[g],
                               tb_obj[g].steps[pc[g]].op.value if pc[g] < len(tb_obj[g].steps) else "-")
                     for g in range(ntb)}
            finished = {g for g in range(ntb) if pc[g] >= len(tb_obj[g].steps)}
            blocked = {g: _why_blocked(tb_obj[g].steps[pc[g]], signal, ids_by_rank[tb_rank[g]], recv_conn[g],
                                       send_conn[g], slots) for g in unfinished}
            for v in explain_deadlock(blocked, names, finished):
                log.add(v.rank, v.tb, v.step, v.kind, v.message)
            log.add(None, None, None, "deadlock",
                    f"deadlock: {len(unfinished)} of {ntb} thread blocks cannot finish")
        else:
            for c in conns.values():
                if c.q:
                    sg = c.q[0][0]
                    sr, stb, si = where(sg)
                    log.add(sr, stb, si, "unmatched",
                            f"sent {len(c.q)} message(s) to rank {c.dst} on channel {c.ch} (first: this step) "
                            "that no step received")
        outcomes.append(SimOutcome(not unfinished, memory, seq, len(candidates)))
    return outcomes


def _why_blocked(st, signal: list[int], ids: dict[int, int], rc: _Conn | None, sc: _Conn | None,
                 slots: int) -> Wait:
    """What the step ``st`` that a thread block stopped at waits for, when no thread block
    can move: the first of its conditions (in the order the run checks them) that fails.

    That is the condition it stopped on: whatever would have lifted it (a signal, data
    in the receive FIFO, a free slot) would also have put the thread block back to run.
    """
    dep = st.dep
    if dep is not None and signal[ids[dep.tb]] < dep.step:
        return Wait("dep", on=ids[dep.tb], dep_tb=dep.tb, dep_step=dep.step)
    sends, receives = st.op.sends, st.op.receives
    if receives and not rc.q:
        return Wait("recv", rc.src, rc.ch, rc.sender)
    assert sends and len(sc.q) >= slots, "a thread block that could move was left behind"
    return Wait("send", sc.dst, sc.ch, sc.receiver, slots=slots)
