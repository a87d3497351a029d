"""The symbolic run's values in Python, for the layouts the compiled run does not follow.

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
``verify/csrc/symbolic.cpp``, through :func:`arborcc.verify.proof.symbolic_run`), which
also follows the values of every layout it is handed, one value per chunk slot, and
returns what it finds (:mod:`arborcc.verify.findings` formats it).

The layouts it is not handed - big buffers moved in few long steps, numbers beyond 32
bits - or that a step reaches outside of are followed here, over the order the compiled
run returns (no schedule, no FIFO here: the order and the pairing of sends with
receives are the compiled run's), with the same messages. The values are the values of
every schedule when there is no race, which is checked at the same time
(:mod:`arborcc.verify.races`): for each slot the last writer and the readers since, and
whether each conflicting pair is ordered. Slots with the same history are kept
together, as segments of a rank's memory (:mod:`arborcc.verify.memory`), so a step
costs about the same whatever its chunk count.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

from dataclasses import dataclass

from arborcc.ir.model import Algorithm, Buffer, Op
from arborcc.ir.report import ViolationLog
from arborcc.verify.encoding import encoded_program
from arborcc.verify.findings import MAX_CANDIDATES, StepNames
from arborcc.verify.layout import MemoryMap
from arborcc.verify.memory import RankMemory, initial_memory
from arborcc.verify.races import ConflictLog, HappensBefore, ordered_through_ranks
from arborcc.verify.values import add_runs, first_uninitialized, fit_runs


@dataclass
class SimOutcome:
    finished: bool
    memory: list[RankMemory]  #: by rank id: values and last writers at the end
    steps_run: int = 0
    race_candidates: int = 0  #: conflicts not ordered by rank-local edges (resolved globally)


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
    names = StepNames(algo)
    tb_rank, tb_obj, ids_by_rank, tb_base = names.tb_rank, names.tb_obj, names.ids_by_rank, names.tb_base
    steps = [st for tb in tb_obj for st in tb.steps]

    hb = HappensBefore(tb_base, tb_rank)
    gid_tb = hb.gid_tb
    #: per layout: (index, memory by rank, bases by rank, race log or None, violation log)
    views = [(v, initial_memory(algo, mm, cuts), mm.bases, ConflictLog(hb, MAX_CANDIDATES) if check_races else None,
              log) for v, (mm, log) in enumerate(zip(mms, logs))]
    nviews = len(views)
    #: per rank, each layout's (index, memory of the rank, its bases, race log, the layout)
    rank_views = [[(v, memory[r], bases[r], conflicts, view) for view in views
                   for v, memory, bases, conflicts, _ in (view,)] for r in range(len(names.progs))]

    def check_initialized(view, gid: int, a: int, runs: list, what: str) -> None:
        """Log a read of uninitialized slots (called unless ``runs`` is one run of data)."""
        j = first_uninitialized(runs)
        if j is not None:
            names.uninitialized(view[4], view[2], gid, a + j, what)

    popped = run.recv_src
    mismatched = set(run.mismatches)
    messages: dict[int, list] = {}  #: send gid -> its values per layout, until received
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
                gots = messages.pop(sgid)
                if gid in mismatched:
                    for view in views:
                        names.mismatch(view[4], gid, sgid)
                    gots = [fit_runs(got, cnt) for got in gots]
            outs = [None] * nviews if sends else None
            for v, rmem, base_r, conflicts, view in rank_views[r]:
                got = gots[v] if gots is not None else None
                src = None
                if reads_src:
                    sa = base_r[st.src_buf] + st.src_off
                    src = rmem.read(sa, cnt, gid, g, conflicts)
                    if len(src) > 1 or type(src[0][1]) is not tuple:
                        check_initialized(view, gid, sa, src, "source")
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
                            check_initialized(view, gid, da, cur, "destination")
                        out = add_runs(cur, src)
                    rmem.write(da, out, cnt, gid, g, receives, conflicts)
                if sends:
                    outs[v] = out
            if sends:
                messages[gid] = outs

    program = encoded_program(algo)
    outcomes = []
    for _, memory, bases, conflicts, log in views:
        candidates = conflicts.candidates if conflicts is not None else []
        if candidates:
            reported: set[tuple[int, int]] = set()
            for c, ok in zip(candidates, ordered_through_ranks(program, run, candidates)):
                if ok or (c.x, c.y) in reported:
                    continue
                reported.add((c.x, c.y))
                names.race(log, bases, c.y, c.x, c.addr, c.y_writes, c.x_writes)
            if len(candidates) >= MAX_CANDIDATES:
                names.incomplete_races(log)
        names.schedule(log, run, slots)
        outcomes.append(SimOutcome(not run.blocked, memory, run.steps_run, len(candidates)))
    return outcomes
