"""The values of the symbolic run, and what it found, in the verifier's words.

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
schedule. That run is made once, in compiled code (``run_layouts`` of
``verify/csrc/symbolic.cpp``, through :mod:`arborcc.verify.proof`): it returns the
order the steps completed in, the send each receive popped, and its findings - count
mismatches, the wait of every thread block left blocked, messages never received -
and proves the layouts on which the run reports nothing.

For the layouts it does not prove, :func:`simulate_layouts` follows the values over
that order (no schedule, no FIFO here: the order and the pairing of sends with
receives are the compiled run's) and turns the findings into violations. The values
it computes are the values of every schedule when there is no race, which it checks
at the same time (:mod:`arborcc.verify.races`): for each slot it keeps the last writer
and the readers since, and asks whether each conflicting pair is ordered. Slots with
the same history are kept together, as segments of a rank's memory
(:mod:`arborcc.verify.memory`), so a step costs about the same whatever its chunk count.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

from dataclasses import dataclass

from arborcc.ir.model import Algorithm, Buffer, Op
from arborcc.ir.report import ViolationLog
from arborcc.verify.deadlock import TbName, Wait, explain_deadlock
from arborcc.verify.encoding import encoded_program
from arborcc.verify.layout import MemoryMap
from arborcc.verify.memory import RankMemory, initial_memory
from arborcc.verify.races import ConflictLog, HappensBefore, ordered_through_ranks
from arborcc.verify.values import add_runs, first_uninitialized, fit_runs

MAX_CANDIDATES = 2_000_000  #: conflicting pairs analysed across ranks before giving up (reported)


@dataclass
class SimOutcome:
    finished: bool
    memory: list[RankMemory]  #: by rank id: values and last writers at the end
    steps_run: int = 0
    race_candidates: int = 0  #: conflicts not ordered by rank-local edges (resolved globally)


#: the waits of ``SymbolicRun.blocked``, by code
WAIT_KINDS = ("dep", "recv", "send")


def simulate_layouts(algo: Algorithm, run, mms: list[MemoryMap], cuts: dict[int, dict[Buffer, set[int]]],
                     logs: list[ViolationLog], slots: int, check_races: bool = True) -> list[SimOutcome]:
    """The values of the compiled symbolic run ``run`` (a ``native.SymbolicRun`` of
    :func:`arborcc.verify.proof.symbolic_run` with ``slots`` FIFO slots) on each memory
    layout of ``mms`` (one per kind of call), and its violations, into the matching
    log of ``logs``. Every layout has its own memory and race candidates; the order,
    the pairing of sends and receives and the findings of the schedule are shared.

    Assumes :func:`arborcc.verify.structure.check_structure` found nothing fatal;
    ``cuts`` are the ends of accessed chunk ranges it collected.
    """
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
    steps = [st for tb in tb_obj for st in tb.steps]

    hb = HappensBefore(tb_base, tb_rank)
    gid_tb = hb.gid_tb
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

    popped = run.recv_src
    mismatched = set(run.mismatches)
    messages: dict[int, tuple[list, int]] = {}  #: send gid -> (values per layout, count) until received
    NOP = Op.NOP

    for gid in run.order:
        g = gid_tb[gid]
        i = gid - tb_base[g]
        st = steps[gid]
        op = st.op
        r = tb_rank[g]
        dep = st.dep
        if dep is not None and check_races:
            hb.on_dependency(g, i, ids_by_rank[r][dep.tb], dep.step)
        if op is not NOP:
            sends, receives = op.sends, op.receives
            reads_src, reads_dst, writes_dst = op.reads_src, op.reads_dst, op.writes_dst
            cnt = st.count
            gots = None
            if receives:
                sgid = popped[gid]
                gots, sent = messages.pop(sgid)
                if gid in mismatched:
                    sr, stb, si = where(sgid)
                    for view in views:
                        view[4].add(r, tb_obj[g].id, i, "mismatch",
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
                messages[gid] = (outs, cnt)

    blocked = run.blocked
    outcomes = []
    for _, memory, bases, conflicts, log in views:
        candidates = conflicts.candidates if conflicts is not None else []
        if candidates:
            reported: set[tuple[int, int]] = set()
            for c, ok in zip(candidates, ordered_through_ranks(encoded_program(algo), run, candidates)):
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
        if blocked:
            for v in explain_deadlock(*_deadlock_graph(algo, blocked, tb_obj, tb_rank, slots)):
                log.add(v.rank, v.tb, v.step, v.kind, v.message)
            log.add(None, None, None, "deadlock",
                    f"deadlock: {len(blocked)} of {ntb} thread blocks cannot finish")
        else:
            connections = None
            for c, first, messages_left in run.unreceived:
                connections = connections or encoded_program(algo).connections
                _, dst, channel, _, _ = connections[c]
                sr, stb, si = where(first)
                log.add(sr, stb, si, "unmatched",
                        f"sent {messages_left} message(s) to rank {dst} on channel {channel} (first: this step) "
                        "that no step received")
        outcomes.append(SimOutcome(not blocked, memory, run.steps_run, len(candidates)))
    return outcomes


def _deadlock_graph(algo: Algorithm, blocked: list[tuple[int, int, int, int]], tb_obj: list, tb_rank: list[int],
                    slots: int) -> tuple[dict[int, Wait], dict[int, TbName], set[int]]:
    """The arguments of :func:`explain_deadlock` from the compiled run's ``blocked``
    findings on ``algo``: what each blocked thread block waits for, every thread block's name and
    where it stopped, and the finished ones."""
    stopped = {g: step for g, step, _, _ in blocked}
    names = {}
    for g, tb in enumerate(tb_obj):
        pc = stopped.get(g, len(tb.steps))
        names[g] = TbName(tb_rank[g], tb.id, pc, tb.steps[pc].op.value if pc < len(tb.steps) else "-")
    connections = encoded_program(algo).connections
    waits: dict[int, Wait] = {}
    for g, step, wait, on in blocked:
        kind = WAIT_KINDS[wait]
        if kind == "dep":
            dep = tb_obj[g].steps[step].dep
            waits[g] = Wait("dep", on=on, dep_tb=dep.tb, dep_step=dep.step)
        else:
            src, dst, channel, sender, receiver = connections[on]
            if kind == "recv":
                waits[g] = Wait("recv", src, channel, sender if sender >= 0 else None)
            else:
                waits[g] = Wait("send", dst, channel, receiver if receiver >= 0 else None, slots=slots)
    finished = {g for g in range(len(tb_obj)) if g not in stopped}
    return waits, names, finished
