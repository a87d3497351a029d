"""The symbolic run's findings in the verifier's words.

The compiled run (:func:`arborcc.verify.proof.symbolic_run`) says what it found by
step ids (gids: thread blocks numbered rank by rank, ranks by id, thread blocks in file
order), slot addresses and codes; :class:`StepNames` turns them into the violations
the verifier reports, and :func:`report_findings` logs everything the run found on one
memory layout, in the order the run found it: count mismatches, reads of
uninitialized memory and steps reaching outside their buffers as they ran, races, the
deadlock or the messages never received, and the wrong output chunks of the
postcondition. :func:`range_problem` words a step's range outside its buffer for the
structure rules (:mod:`arborcc.verify.structure`) and the run alike.
"""

from __future__ import annotations

from arborcc.ir.collectives import has_signature
from arborcc.ir.model import Algorithm, Buffer, Op
from arborcc.ir.report import ViolationLog
from arborcc.verify.deadlock import TbName, Wait, explain_deadlock
from arborcc.verify.encoding import encoded_program
from arborcc.verify.layout import MemoryMap
from arborcc.verify.postconditions import log_wrong_chunk
from arborcc.verify.values import Mixed

MAX_CANDIDATES = 2_000_000  #: conflicting pairs analysed across ranks before giving up (reported; symbolic.cpp)

#: the waits of ``SymbolicRun.blocked``, by code
WAIT_KINDS = ("dep", "recv", "send")
#: the events of a layout's findings, by code (symbolic.hpp, ``Event``)
MISMATCH, UNINITIALIZED_SOURCE, UNINITIALIZED_DESTINATION, OUTSIDE_SOURCE, OUTSIDE_DESTINATION = 0, 1, 2, 3, 4


def range_problem(op: Op, what: str, buf, off: int, cnt: int, size: int | None) -> tuple[str, str]:
    """The kind and message of a step ``op`` whose ``what`` ("source" or "destination")
    range ``buf[off:off+cnt]`` is not inside its rank's buffer of ``size`` chunks (None:
    the rank has no such buffer)."""
    if buf is None:
        return "structure", f"'{op.value}' needs a {what} buffer"
    if size is None:
        return "structure", f"unknown {what} buffer {buf!r}"
    return "bounds", f"{what} chunks {off}..{off + cnt - 1} of buffer '{buf.value}' are outside its {size} chunks"


class StepNames:
    """Names of the steps, thread blocks and slots of ``algo`` for the messages."""

    def __init__(self, algo: Algorithm):
        self.algo = algo
        self.progs = sorted(algo.ranks, key=lambda p: p.rank)
        self.tb_rank: list[int] = []
        self.tb_obj: list = []
        self.ids_by_rank: list[dict[int, int]] = []
        for prog in self.progs:
            ids: dict[int, int] = {}
            for tb in prog.threadblocks:
                ids[tb.id] = len(self.tb_obj)
                self.tb_obj.append(tb)
                self.tb_rank.append(prog.rank)
            self.ids_by_rank.append(ids)
        self.tb_base = [0] * (len(self.tb_obj) + 1)
        for g, tb in enumerate(self.tb_obj):
            self.tb_base[g + 1] = self.tb_base[g] + len(tb.steps)
        self.gid_tb = [g for g, tb in enumerate(self.tb_obj) for _ in tb.steps]

    def where(self, gid: int) -> tuple[int, int, int]:
        """Rank, thread block id and step index of step ``gid``."""
        g = self.gid_tb[gid]
        return self.tb_rank[g], self.tb_obj[g].id, gid - self.tb_base[g]

    def slot_name(self, bases, r: int, addr: int) -> str:
        """The buffer chunks of rank ``r`` at slot ``addr`` (``bases``: a layout's, by rank)."""
        prog = self.progs[r]
        names = []
        for buf, size in ((Buffer.INPUT, prog.input_chunks), (Buffer.OUTPUT, prog.output_chunks),
                          (Buffer.SCRATCH, prog.scratch_chunks)):
            b = bases[r][buf]
            if b <= addr < b + size:
                names.append(f"{buf.name.lower()} chunk {addr - b}")
        return " = ".join(names) if names else f"slot {addr}"

    def uninitialized(self, log: ViolationLog, bases, gid: int, addr: int, what: str) -> None:
        r, tb, i = self.where(gid)
        st = self.tb_obj[self.gid_tb[gid]].steps[i]
        log.add(r, tb, i, "uninitialized",
                f"'{st.op.value}' reads {self.slot_name(bases, r, addr)} ({what}), which holds no data yet")

    def outside(self, log: ViolationLog, gid: int, what: str) -> None:
        """Step ``gid``'s ``what`` ("source" or "destination") range is outside its buffer."""
        r, tb, i = self.where(gid)
        st = self.tb_obj[self.gid_tb[gid]].steps[i]
        buf, off = (st.src_buf, st.src_off) if what == "source" else (st.dst_buf, st.dst_off)
        prog = self.progs[r]
        size = {Buffer.INPUT: prog.input_chunks, Buffer.OUTPUT: prog.output_chunks,
                Buffer.SCRATCH: prog.scratch_chunks}.get(buf)
        log.add(r, tb, i, *range_problem(st.op, what, buf, off, st.count, size))

    def mismatch(self, log: ViolationLog, gid: int, sgid: int) -> None:
        r, tb, i = self.where(gid)
        sr, stb, si = self.where(sgid)
        st = self.tb_obj[self.gid_tb[gid]].steps[i]
        sent = self.tb_obj[self.gid_tb[sgid]].steps[si].count
        log.add(r, tb, i, "mismatch",
                f"'{st.op.value}' receives {st.count} chunk(s) but the matching send (rank {sr} "
                f"tb {stb} step {si}) sent {sent}")

    def race(self, log: ViolationLog, bases, y: int, x: int, addr: int, y_writes: bool, x_writes: bool) -> None:
        r, tbid, i = self.where(y)
        _, ptb, pi = self.where(x)
        mine = "writes" if y_writes else "reads"
        theirs = "writes" if x_writes else "reads"
        log.add(r, tbid, i, "race",
                f"race: {mine} {self.slot_name(bases, r, addr)}, which tb {ptb} step {pi} {theirs}, and "
                "neither is ordered before the other (no program-order/dependency path, directly or "
                "through other ranks)")

    @staticmethod
    def incomplete_races(log: ViolationLog) -> None:
        log.add(None, None, None, "race",
                f"race check incomplete: more than {MAX_CANDIDATES} conflicting access pairs are not "
                "ordered by dependencies; only the first were analysed")

    def schedule(self, log: ViolationLog, run, slots: int) -> None:
        """The deadlock the compiled ``run`` (with ``slots`` FIFO slots) ran into, or else
        the messages it left unreceived."""
        if run.blocked:
            for v in explain_deadlock(*self._deadlock_graph(run.blocked, slots)):
                log.add(v.rank, v.tb, v.step, v.kind, v.message)
            log.add(None, None, None, "deadlock",
                    f"deadlock: {len(run.blocked)} of {len(self.tb_obj)} thread blocks cannot finish")
            return
        connections = None
        for c, first, messages_left in run.unreceived:
            connections = connections or encoded_program(self.algo).connections
            _, dst, channel, _, _ = connections[c]
            sr, stb, si = self.where(first)
            log.add(sr, stb, si, "unmatched",
                    f"sent {messages_left} message(s) to rank {dst} on channel {channel} (first: this step) "
                    "that no step received")

    def _deadlock_graph(self, blocked: list[tuple[int, int, int, int]],
                        slots: int) -> tuple[dict[int, Wait], dict[int, TbName], set[int]]:
        """The arguments of :func:`explain_deadlock` from the compiled run's ``blocked``
        findings: what each blocked thread block waits for, every thread block's name and
        where it stopped, and the finished ones."""
        stopped = {g: step for g, step, _, _ in blocked}
        names = {}
        for g, tb in enumerate(self.tb_obj):
            pc = stopped.get(g, len(tb.steps))
            names[g] = TbName(self.tb_rank[g], tb.id, pc, tb.steps[pc].op.value if pc < len(tb.steps) else "-")
        connections = encoded_program(self.algo).connections
        waits: dict[int, Wait] = {}
        for g, step, wait, on in blocked:
            kind = WAIT_KINDS[wait]
            if kind == "dep":
                dep = self.tb_obj[g].steps[step].dep
                waits[g] = Wait("dep", on=on, dep_tb=dep.tb, dep_step=dep.step)
            else:
                src, dst, channel, sender, receiver = connections[on]
                if kind == "recv":
                    waits[g] = Wait("recv", src, channel, sender if sender >= 0 else None)
                else:
                    waits[g] = Wait("send", dst, channel, receiver if receiver >= 0 else None, slots=slots)
        finished = {g for g in range(len(self.tb_obj)) if g not in stopped}
        return waits, names, finished


def report_findings(names: StepNames, run, layout, mm: MemoryMap, log: ViolationLog, slots: int,
                    writer_of) -> None:
    """Log what the compiled ``run`` (``slots`` FIFO slots) found on the memory layout
    ``mm`` (``layout``: its :class:`arborcc.verify.proof.LayoutRun`); ``writer_of(gid)``
    names the step that last wrote a wrong output chunk."""
    found = layout.found
    for kind, gid, x in found["events"]:
        if kind == MISMATCH:
            names.mismatch(log, gid, x)
        elif kind in (OUTSIDE_SOURCE, OUTSIDE_DESTINATION):
            names.outside(log, gid, "source" if kind == OUTSIDE_SOURCE else "destination")
        else:
            names.uninitialized(log, mm.bases, gid, x, "source" if kind == UNINITIALIZED_SOURCE else "destination")
    for y, x, addr, y_writes, x_writes in found["races"]:
        names.race(log, mm.bases, y, x, addr, y_writes, x_writes)
    if found["races_incomplete"]:
        names.incomplete_races(log)
    names.schedule(log, run, slots)
    algo = names.algo
    if run.blocked or not has_signature(algo.collective, algo.num_ranks, algo.chunks_per_loop):
        return
    for k, j, length, writer, initialized, dup, parts in found["wrong"]:
        r, first, chunk, mask = layout.wanted[k]
        for d in range(j, j + length):
            log_wrong_chunk(log, algo.collective, r, first + d, chunk + d, mask,
                            held_value(initialized, dup, parts, d - j), writer_of, writer)


def held_value(initialized: bool, dup: bool, parts: list[tuple[int, list[int]]], shift: int = 0):
    """A value of the compiled run as :mod:`arborcc.verify.values` writes it, with every
    input chunk index ``shift`` higher (the value ``shift`` slots further along a run)."""
    if not initialized:
        return None
    masks = {c + shift: sum(1 << r for r in ranks) for c, ranks in parts}
    if not dup and len(masks) == 1:
        (c, m), = masks.items()
        return (c, m)
    return Mixed(masks, dup)
