"""Structural checks: is this a well-formed program for the MSCCL runtime model?

The rules come from GC3 section 5 (a thread block has at most one send and one
receive peer; a connection (sender, receiver, channel) has exactly one sending and
one receiving thread block) and from what the MSCCL parsers reject
(``msccl_parser.cc``: peers other than the GPU itself, sends only in thread blocks
with a send peer, receives only with a receive peer, offsets inside the buffers,
``hasdep`` on every step another waits on).

A violation is *fatal* when the symbolic execution cannot even be set up (unknown
ranks or thread blocks, accesses outside a buffer, a send without a peer...): the
later checks are then skipped.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

from dataclasses import dataclass, field

from arborcc.ir.collectives import COLLECTIVES
from arborcc.ir.model import Algorithm, Buffer, Op, Protocol
from arborcc.ir.report import Violation
import arborcc.verify.native as native
from arborcc.verify.encoding import encoded_program
from arborcc.verify.findings import range_problem
from arborcc.verify.semantics import OPS


@dataclass
class StructureResult:
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    fatal: bool = False

    def add(self, rank, tb, step, kind: str, message: str, fatal: bool = False) -> None:
        self.violations.append(Violation(rank, tb, step, kind, message))
        self.fatal = self.fatal or fatal


def check_structure(algo: Algorithm, max_per_kind: int = 20, compiled: bool = True) -> StructureResult:
    """All structural rules; see the module docstring.

    The rules over every rank, thread block and step are first asked of their compiled
    form (``compiled``: ``check_structure_rules`` in ``verify/csrc/structure.cpp``,
    which says only whether they hold); when they do not, or the program cannot be
    encoded exactly (numbers beyond 32 bits), the Python rules below run and say what
    is wrong."""
    res = StructureResult()
    n = algo.num_ranks
    if algo.collective not in COLLECTIVES:
        res.add(None, None, None, "structure",
                f"unknown collective {algo.collective!r} (known: {', '.join(COLLECTIVES)})")
    if not isinstance(algo.protocol, Protocol):
        res.add(None, None, None, "structure", f"unknown protocol {algo.protocol!r}")
    if algo.chunks_per_loop < 1:
        res.add(None, None, None, "structure", f"chunks per loop must be at least 1, not {algo.chunks_per_loop}")
    if algo.min_bytes < 0 or algo.max_bytes < 0:
        res.add(None, None, None, "structure", "minBytes and maxBytes must not be negative")
    if n < 1:
        res.add(None, None, None, "structure", f"the rank count must be at least 1, not {n}", fatal=True)
        return res
    seen: dict[int, int] = {}
    for pos, prog in enumerate(algo.ranks):
        if not 0 <= prog.rank < n:
            res.add(prog.rank, None, None, "structure", f"rank id {prog.rank} is outside 0..{n - 1}", fatal=True)
        elif prog.rank in seen:
            res.add(prog.rank, None, None, "structure", "this rank is described twice", fatal=True)
        seen[prog.rank] = pos
    if len(algo.ranks) != n:
        missing = sorted(set(range(n)) - set(seen))
        res.add(None, None, None, "structure",
                f"the algorithm is for {n} ranks but describes {len(algo.ranks)}"
                + (f" (missing {missing[:8]})" if missing else ""), fatal=True)
    if res.fatal:
        return res
    if compiled:
        try:
            program = encoded_program(algo)
            clean, unwaited = native.check_structure_rules(program, n) if not program.clamped else (False, 0)
        except (KeyError, TypeError, AttributeError):  # not encodable: the rules below say why
            clean = False
        if clean:
            if unwaited:
                res.notes.append(_unwaited_note(unwaited))
            return res

    senders: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
    receivers: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
    send_counts: dict[tuple[int, int, int], int] = {}
    recv_counts: dict[tuple[int, int, int], int] = {}
    counts: dict[str, int] = {}
    unwaited = 0
    ops_get = OPS.get
    NOP = Op.NOP

    def add_step(rank, tb, step, kind, message, fatal=False):
        counts[kind] = counts.get(kind, 0) + 1
        if fatal:
            res.fatal = True
        if counts[kind] <= max_per_kind:
            res.violations.append(Violation(rank, tb, step, kind, message))

    for prog in algo.ranks:
        r = prog.rank
        sizes = {Buffer.INPUT: prog.input_chunks, Buffer.OUTPUT: prog.output_chunks,
                 Buffer.SCRATCH: prog.scratch_chunks}
        for buf, size in sizes.items():
            if size < 0:
                add_step(r, None, None, "structure", f"negative {buf.name.lower()} chunk count {size}", True)
        by_id: dict[int, object] = {}
        for tb in prog.threadblocks:
            if tb.id in by_id:
                add_step(r, tb.id, None, "structure", "thread block id used twice on this rank", True)
            by_id[tb.id] = tb
        if tb_id_negative := [tb.id for tb in prog.threadblocks if tb.id < 0]:
            add_step(r, tb_id_negative[0], None, "structure", "negative thread block id", True)
        waited: set[tuple[int, int]] = set()
        signalling: list[tuple[int, int]] = []
        sizes_get = sizes.get
        for tb in prog.threadblocks:
            for peer, what in ((tb.send, "send"), (tb.recv, "receive")):
                if peer == r:
                    add_step(r, tb.id, None, "structure", f"{what} peer is the rank itself", True)
                elif not -1 <= peer < n:
                    add_step(r, tb.id, None, "structure", f"{what} peer {peer} is not a rank (0..{n - 1} or -1)", True)
            if tb.channel < 0 and (tb.send >= 0 or tb.recv >= 0):
                add_step(r, tb.id, None, "structure", f"channel {tb.channel} is negative", True)
            if tb.send >= 0 and tb.send != r:
                senders.setdefault((r, tb.send, tb.channel), []).append((r, tb.id))
            if tb.recv >= 0 and tb.recv != r:
                receivers.setdefault((tb.recv, r, tb.channel), []).append((r, tb.id))
            nsend = nrecv = 0
            no_send, no_recv = tb.send < 0, tb.recv < 0
            for i, st in enumerate(tb.steps):
                op = st.op
                info = ops_get(op)
                if info is None:
                    add_step(r, tb.id, i, "structure", f"unknown step type {op!r}", True)
                    continue
                sends, receives, reads_src, reads_dst, writes_dst = info
                if st.has_dep:
                    signalling.append((tb.id, i))
                dep = st.dep
                if dep is not None:
                    target = by_id.get(dep.tb)
                    if (target is not None and target is not tb and 0 <= dep.step < len(target.steps)
                            and target.steps[dep.step].has_dep and target.steps[dep.step].op is not NOP):
                        waited.add((dep.tb, dep.step))  # the common case: all is well
                    else:
                        _check_dependency(add_step, r, tb, i, dep, by_id, waited)
                if sends:
                    nsend += 1
                    if no_send:
                        add_step(r, tb.id, i, "structure", f"'{op.value}' sends but the thread block has no send peer", True)
                if receives:
                    nrecv += 1
                    if no_recv:
                        add_step(r, tb.id, i, "structure", f"'{op.value}' receives but the thread block has no receive peer", True)
                if op is NOP:
                    continue
                cnt = st.count
                if cnt < 1:
                    add_step(r, tb.id, i, "structure", f"count {cnt} must be at least 1", True)
                    continue
                src_ok = dst_ok = False
                if reads_src:
                    size = sizes_get(st.src_buf)
                    off = st.src_off
                    src_ok = size is not None and 0 <= off and off + cnt <= size
                    if not src_ok:
                        _range_violation(add_step, r, tb.id, i, op, "source", st.src_buf, off, cnt, size)
                if writes_dst or reads_dst:
                    size = sizes_get(st.dst_buf)
                    off = st.dst_off
                    dst_ok = size is not None and 0 <= off and off + cnt <= size
                    if not dst_ok:
                        _range_violation(add_step, r, tb.id, i, op, "destination", st.dst_buf, off, cnt, size)
                        continue
                    if src_ok and st.src_buf is st.dst_buf:
                        o1 = st.src_off
                        if o1 != off and o1 < off + cnt and off < o1 + cnt:
                            add_step(r, tb.id, i, "structure",
                                     f"source and destination ranges of '{op.value}' overlap without being equal")
            if tb.send >= 0:
                key = (r, tb.send, tb.channel)
                send_counts[key] = send_counts.get(key, 0) + nsend
            if tb.recv >= 0:
                key = (tb.recv, r, tb.channel)
                recv_counts[key] = recv_counts.get(key, 0) + nrecv
        unwaited += sum(1 for key in signalling if key not in waited)

    for key in sorted(set(senders) | set(receivers)):
        src, dst, ch = key
        s_tbs = senders.get(key, [])
        r_tbs = receivers.get(key, [])
        if len(s_tbs) > 1:
            add_step(src, s_tbs[1][1], None, "connection",
                     f"connection {src}->{dst} channel {ch} has {len(s_tbs)} sending thread blocks "
                     f"({', '.join(str(t) for _, t in s_tbs)}); exactly one is allowed", True)
        if len(r_tbs) > 1:
            add_step(dst, r_tbs[1][1], None, "connection",
                     f"connection {src}->{dst} channel {ch} has {len(r_tbs)} receiving thread blocks "
                     f"({', '.join(str(t) for _, t in r_tbs)}); exactly one is allowed", True)
        if not s_tbs:
            add_step(dst, r_tbs[0][1], None, "connection",
                     f"receives from rank {src} on channel {ch}, but no thread block of rank {src} sends to "
                     f"rank {dst} on channel {ch}")
        elif not r_tbs:
            add_step(src, s_tbs[0][1], None, "connection",
                     f"sends to rank {dst} on channel {ch}, but no thread block of rank {dst} receives from "
                     f"rank {src} on channel {ch}")
        elif send_counts.get(key, 0) != recv_counts.get(key, 0):
            add_step(src, s_tbs[0][1], None, "connection",
                     f"connection {src}->{dst} channel {ch}: {send_counts.get(key, 0)} sending steps but "
                     f"{recv_counts.get(key, 0)} receiving steps (tb {r_tbs[0][1]} of rank {dst})")
    for kind, n_kind in sorted(counts.items()):
        if n_kind > max_per_kind:
            res.notes.append(f"{n_kind - max_per_kind} more '{kind}' violations not listed")
    if unwaited:
        res.notes.append(_unwaited_note(unwaited))
    return res


def _unwaited_note(unwaited: int) -> str:
    return (f"{unwaited} step(s) set hasdep but no step waits on them (harmless, costs a fence and a semaphore "
            "write each)")



def _check_dependency(add_step, r: int, tb, i: int, dep, by_id: dict, waited: set) -> None:
    """Log what is wrong with step ``i`` of ``tb`` waiting on ``dep``; note the wait in ``waited``."""
    target = by_id.get(dep.tb)
    if target is None:
        add_step(r, tb.id, i, "dependency", f"depends on thread block {dep.tb}, which this rank does not have", True)
        return
    if not 0 <= dep.step < len(target.steps):
        add_step(r, tb.id, i, "dependency",
                 f"depends on step {dep.step} of tb {dep.tb}, which has {len(target.steps)} steps", True)
        return
    waited.add((dep.tb, dep.step))
    tstep = target.steps[dep.step]
    if target is tb:
        add_step(r, tb.id, i, "dependency",
                 "depends on its own thread block (program order already orders it; the runtime waits on its "
                 "own semaphore)")
    if tstep.op is Op.NOP:
        add_step(r, tb.id, i, "dependency",
                 f"depends on step {dep.step} of tb {dep.tb}, a nop, which the runtimes drop (it never signals)")
    elif not tstep.has_dep:
        add_step(r, tb.id, i, "dependency",
                 f"depends on step {dep.step} of tb {dep.tb}, which does not signal (hasdep=0)")


def _range_violation(add_step, r: int, tb: int, i: int, op: Op, what: str, buf, off: int, cnt: int,
                     size: int | None) -> None:
    """Log why ``buf[off:off+cnt]`` is not inside the rank's buffer (fatal)."""
    add_step(r, tb, i, *range_problem(op, what, buf, off, cnt, size), True)
