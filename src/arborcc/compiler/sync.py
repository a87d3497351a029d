"""Synchronization insertion: steps and cross-thread-block dependencies (GC3 section 5.2).

Instructions go to their thread blocks in the global order, becoming IR steps. Within a
thread block instructions run in sequence, so a processing edge between two of them
needs nothing. An edge from another thread block of the same rank becomes a dependency
on that block's step - only the latest step per block, and only when this block has not
already waited for that step or a later one. The IR carries one dependency per step; the
others become ``nop`` steps placed right before it. A step others wait on gets
``has_dep``. Communication edges need nothing: a receive waits for its send.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
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
    alone = [len(tbs) == 1 for tbs in a.tbs]  # ranks with one thread block wait for nothing
    nops = 0
    for i in order:
        tb = tb_of[i]
        steps = tb.steps
        dep = None
        if not alone[tb.rank]:
            ps = preds[i]
            if len(ps) == 1:  # the common case: at most one step to wait for
                p = rep[ps[0]]
                u = tb_of[p]
                if u is not tb:
                    s = step_of[p]
                    if tb.known.get(u.id, -1) < s:
                        tb.known[u.id] = s
                        u.steps[s].has_dep = True
                        dep = Dependency(u.id, s)
            elif ps:
                wait = _new_waits(tb, ps, rep, tb_of, step_of)
                if wait:
                    for u, s in wait[:-1]:
                        steps.append(Step(Op.NOP, None, -1, None, -1, 0, Dependency(u.id, s)))
                        nops += 1
                    u, s = wait[-1]
                    dep = Dependency(u.id, s)
            step_of[i] = len(steps)
        steps.append(Step(ops[kind[i]], bufs[sbuf[i]], soff[i], bufs[dbuf[i]], doff[i], cnt[i], dep))
    return nops


def _new_waits(tb, preds, rep: list[int], tb_of: list, step_of: list[int]) -> list[tuple]:
    """The (thread block, step) pairs ``tb`` must now wait for, one per other thread block
    (its latest step among ``preds``) unless ``tb`` already waited for it or a later step,
    ordered by thread block; they are marked as waited for."""
    latest: dict = {}
    for p in preds:
        p = rep[p]
        u = tb_of[p]
        if u is not tb and latest.get(u, -1) < step_of[p]:
            latest[u] = step_of[p]
    known = tb.known
    wait = sorted(((u, s) for u, s in latest.items() if known.get(u.id, -1) < s), key=lambda us: (us[0].id, us[1]))
    for u, s in wait:
        known[u.id] = s
        u.steps[s].has_dep = True
    return wait
