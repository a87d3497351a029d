"""Synchronization insertion: steps and cross-thread-block dependencies (GC3 section 5.2).

Instructions go to their thread blocks in the global order, becoming IR steps. Within a
thread block instructions run in sequence, so a processing edge between two of them
needs nothing. An edge from another thread block of the same rank becomes a dependency
on that block's step - only the latest step per block, and only when this block has not
already waited for that step or a later one. The IR carries one dependency per step; the
others become ``nop`` steps placed right before it. A step others wait on gets
``has_dep``. Communication edges need nothing: a receive waits for its send.
"""

from __future__ import annotations

from arborcc.compiler.instructions import KIND_OP, InstrTable
from arborcc.compiler.layout import IR_BUFFERS
from arborcc.compiler.threadblocks import Assignment
from arborcc.ir.model import Dependency, Op, Step


def emit_steps(t: InstrTable, order: list[int], preds: list, rep: list[int], a: Assignment) -> int:
    """Append every instruction (and its nops) to its thread block as IR steps (offsets of
    instance 0); returns the number of nops added."""
    tb_of = a.tb_of
    step_of = [0] * len(t)
    kind, sbuf, soff, dbuf, doff, cnt = t.kind, t.sbuf, t.soff, t.dbuf, t.doff, t.cnt
    ops, bufs = KIND_OP, IR_BUFFERS
    nops = 0
    for i in order:
        tb = tb_of[i]
        steps = tb.steps
        deps = None
        for p in preds[i]:
            p = rep[p]
            u = tb_of[p]
            if u is tb:
                continue
            s = step_of[p]
            if deps is None:
                deps = {u: s}
            elif deps.get(u, -1) < s:
                deps[u] = s
        dep = None
        if deps:
            known = tb.known
            wait = [(u, s) for u, s in deps.items() if known.get(u, -1) < s]
            if wait:
                wait.sort(key=lambda us: (us[0].id, us[1]))
                for u, s in wait:
                    known[u] = s
                    u.steps[s].has_dep = True
                for u, s in wait[:-1]:
                    steps.append(Step(Op.NOP, None, -1, None, -1, 0, Dependency(u.id, s)))
                    nops += 1
                u, s = wait[-1]
                dep = Dependency(u.id, s)
        step_of[i] = len(steps)
        steps.append(Step(ops[kind[i]], bufs[sbuf[i]], soff[i], bufs[dbuf[i]], doff[i], cnt[i], dep))
    return nops
