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
conflicting pair is ordered.
"""

from __future__ import annotations

from array import array
from collections import deque
from dataclasses import dataclass

from arborcc.ir.model import Algorithm, Buffer, Op
from arborcc.verify.deadlock import TbName, Wait, explain_deadlock
from arborcc.verify.layout import MemoryMap, initial_memory
from arborcc.verify.races import Candidate, HappensBefore, resolve_candidates
from arborcc.verify.report import ViolationLog
from arborcc.verify.semantics import OPS
from arborcc.verify.values import add

DEFAULT_SLOTS = 8  #: NCCL_STEPS: FIFO slots per connection for the Simple protocol
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
    memory: list
    last_write: array
    steps_run: int = 0
    race_candidates: int = 0  #: conflicts not ordered by rank-local edges (resolved globally)


def simulate(algo: Algorithm, mm: MemoryMap, log: ViolationLog, slots: int = DEFAULT_SLOTS,
             check_races: bool = True) -> SimOutcome:
    """Run ``algo`` on memory laid out by ``mm``; violations go to ``log``.

    Assumes :func:`arborcc.verify.structure.check_structure` found nothing fatal.
    """
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

    mem = initial_memory(algo, mm)
    nslots = mm.total
    last_write = array("q", [-1]) * nslots
    readers: list = [None] * nslots
    hb = HappensBefore(tb_base, tb_rank, total)
    gid_tb, done_seq, recv_src, sends_flag, dep_target = hb.gid_tb, hb.done_seq, hb.recv_src, hb.sends, hb.dep_target
    ordered_locally = hb.ordered_locally
    bases = mm.bases
    candidates: list[Candidate] = []
    candidate_pairs: set[tuple[int, int, bool]] = set()

    def where(gid: int) -> tuple[int, int, int]:
        g = gid_tb[gid]
        return tb_rank[g], tb_obj[g].id, gid - tb_base[g]

    def slot_name(r: int, addr: int) -> str:
        prog = progs[r]
        names = []
        for buf, size in ((Buffer.INPUT, prog.input_chunks), (Buffer.OUTPUT, prog.output_chunks),
                          (Buffer.SCRATCH, prog.scratch_chunks)):
            b = bases[r][buf]
            if b <= addr < b + size:
                names.append(f"{buf.name.lower()} chunk {addr - b}")
        return " = ".join(names) if names else f"slot {addr}"

    def conflict(prev: int, gid: int, addr: int, prev_writes: bool, writes: bool, received: bool) -> None:
        """prev and gid conflict on addr and rank-local order does not settle it."""
        key = (prev, gid, received)
        if key not in candidate_pairs and len(candidates) < MAX_CANDIDATES:
            candidate_pairs.add(key)
            candidates.append(Candidate(prev, gid, received, addr, prev_writes, writes))

    def read(a: int, cnt: int, gid: int, g: int) -> list:
        if check_races:
            for s in range(a, a + cnt):
                w = last_write[s]
                if w >= 0 and gid_tb[w] != g and not ordered_locally(w, gid):
                    conflict(w, gid, s, True, False, False)
                rd = readers[s]
                if rd is None:
                    readers[s] = gid
                elif type(rd) is int:
                    tg = gid_tb[rd]
                    readers[s] = gid if tg == g else {tg: rd, g: gid}
                else:
                    rd[g] = gid
        return mem[a:a + cnt]

    def write(a: int, vals, gid: int, g: int, received: bool) -> None:
        if check_races:
            for s in range(a, a + len(vals)):
                w = last_write[s]
                if w >= 0 and gid_tb[w] != g and not ordered_locally(w, gid):
                    conflict(w, gid, s, True, True, received)
                rd = readers[s]
                if rd is not None:
                    if type(rd) is int:
                        if gid_tb[rd] != g and not ordered_locally(rd, gid):
                            conflict(rd, gid, s, False, True, received)
                    else:
                        for tg, rg in rd.items():
                            if tg != g and not ordered_locally(rg, gid):
                                conflict(rg, gid, s, False, True, received)
                    readers[s] = None
                last_write[s] = gid
        else:
            for s in range(a, a + len(vals)):
                last_write[s] = gid
        mem[a:a + len(vals)] = vals

    def uninitialized(r: int, g: int, i: int, a: int, vals: list, what: str) -> None:
        j = vals.index(None)
        log.add(r, tb_obj[g].id, i, "uninitialized",
                f"'{tb_obj[g].steps[i].op.value}' reads {slot_name(r, a + j)} ({what}), which holds no data yet")

    pc = [0] * ntb
    signal = [-1] * ntb
    blocked: dict[int, Wait] = {}
    dep_waiters: dict[int, list[tuple[int, int]]] = {}
    ready = deque(range(ntb))
    seq = 0
    NOP = Op.NOP
    RECV, COPY, REDUCE = Op.RECV, Op.COPY, Op.REDUCE
    RRC, RRS, RCS, SEND, RA = (Op.RECV_REDUCE_COPY, Op.RECV_REDUCE_SEND, Op.RECV_COPY_SEND,
                               Op.SEND, Op.RESIDUAL_ADD)

    while ready:
        g = ready.popleft()
        blocked.pop(g, None)
        tb = tb_obj[g]
        steps = tb.steps
        nsteps = len(steps)
        r = tb_rank[g]
        ids = ids_by_rank[r]
        base_r = bases[r]
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
                    blocked[g] = Wait("dep", on=tg, dep_tb=dep.tb, dep_step=dep.step)
                    dep_waiters.setdefault(tg, []).append((dep.step, g))
                    break
            sends, receives, reads_src, _, _ = OPS[op]
            if receives and not rc.q:
                rc.reader_waiting = True
                blocked[g] = Wait("recv", rc.src, rc.ch, rc.sender)
                break
            if sends and len(sc.q) >= slots:
                sc.writer_waiting = True
                blocked[g] = Wait("send", sc.dst, sc.ch, sc.receiver, slots=slots)
                break
            gid = gbase + i
            if dep is not None:
                dep_target[gid] = tb_base[tg] + dep.step
                if check_races:
                    hb.on_dependency(g, i, tg, dep.step)
            if op is not NOP:
                cnt = st.count
                got = None
                if receives:
                    sgid, got = rc.q.popleft()
                    recv_src[gid] = sgid
                    if rc.writer_waiting:
                        rc.writer_waiting = False
                        ready.append(rc.sender)
                    if len(got) != cnt:
                        sr, stb, si = where(sgid)
                        log.add(r, tb.id, i, "mismatch",
                                f"'{op.value}' receives {cnt} chunk(s) but the matching send (rank {sr} tb {stb} "
                                f"step {si}) sent {len(got)}")
                        got = (list(got) + [None] * cnt)[:cnt]
                src = None
                if reads_src:
                    sa = base_r[st.src_buf] + st.src_off
                    src = read(sa, cnt, gid, g)
                    if None in src:
                        uninitialized(r, g, i, sa, src, "source")
                if op is SEND:
                    out = src
                elif op is RECV:
                    write(base_r[st.dst_buf] + st.dst_off, list(got), gid, g, True)
                    out = None
                elif op is COPY:
                    write(base_r[st.dst_buf] + st.dst_off, src, gid, g, False)
                    out = None
                elif op is REDUCE or op is RA:
                    da = base_r[st.dst_buf] + st.dst_off
                    cur = read(da, cnt, gid, g)
                    if None in cur:
                        uninitialized(r, g, i, da, cur, "destination")
                    write(da, [add(cur[j], src[j]) for j in range(cnt)], gid, g, False)
                    out = None
                elif op is RRC:
                    write(base_r[st.dst_buf] + st.dst_off, [add(src[j], got[j]) for j in range(cnt)], gid, g, True)
                    out = None
                elif op is RRS:
                    out = [add(src[j], got[j]) for j in range(cnt)]
                elif op is RCS:
                    write(base_r[st.dst_buf] + st.dst_off, list(got), gid, g, True)
                    out = got
                else:  # RRCS
                    out = [add(src[j], got[j]) for j in range(cnt)]
                    write(base_r[st.dst_buf] + st.dst_off, out, gid, g, True)
                if sends:
                    sends_flag[gid] = 1
                    sc.q.append((gid, tuple(out)))
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
                    f"race: {mine} {slot_name(r, c.addr)}, which tb {ptb} step {pi} {theirs}, and neither is "
                    "ordered before the other (no program-order/dependency path, directly or through other ranks)")
        if len(candidates) >= MAX_CANDIDATES:
            log.add(None, None, None, "race",
                    f"race check incomplete: more than {MAX_CANDIDATES} conflicting access pairs are not ordered "
                    "by dependencies; only the first were analysed")

    names = {g: TbName(tb_rank[g], tb_obj[g].id, pc[g],
                       tb_obj[g].steps[pc[g]].op.value if pc[g] < len(tb_obj[g].steps) else "-")
             for g in range(ntb)}
    unfinished = [g for g in range(ntb) if pc[g] < len(tb_obj[g].steps)]
    if unfinished:
        finished = {g for g in range(ntb) if pc[g] >= len(tb_obj[g].steps)}
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
    return SimOutcome(not unfinished, mem, last_write, seq, len(candidates))
