"""The verifier's one symbolic run, in compiled code: :func:`symbolic_run`.

It runs ``run_layouts`` of ``verify/csrc/symbolic.cpp``: the schedule (every program:
the order steps complete in, the send each receive pops, count mismatches, the waits of
a deadlock, messages never received) and, per kind of call, the values, race rule and
postcondition of :func:`arborcc.verify.symbolic.simulate_layouts` and
:func:`arborcc.verify.postconditions.check_postcondition`, one value per chunk slot,
which answer only whether the run would report nothing (a proof). Where it would report
something, or would have to look further (a value with several chunk indices or a
repeated contribution, a conflicting pair that program order and dependencies of the
rank do not order and only other ranks might), the layout is not proved, and the
verifier follows its values in Python over the order this run returns
(:mod:`arborcc.verify.symbolic`), which says what is wrong.
"""

from __future__ import annotations

from arborcc.ir.collectives import has_signature
from arborcc.ir.model import Algorithm, Buffer
import arborcc.verify.native as native
from arborcc.verify.encoding import BUFFERS, encoded_program
from arborcc.verify.layout import MemoryMap
from arborcc.verify.postconditions import expected_runs


#: the proof keeps 16 bytes per chunk slot (and its work is the chunks the steps move);
#: the Python values keep a segment per range the steps cut (:mod:`arborcc.verify.memory`).
#: Beyond this many slots per step (big buffers moved in few long steps) those are the
#: cheaper ones and the layout is left to them.
SLOTS_PER_STEP = 16


def symbolic_run(algo: Algorithm, mms: list[MemoryMap], slots: int, check_races: bool) -> tuple[native.SymbolicRun,
                                                                                                  list[bool]]:
    """The symbolic run of ``algo`` with ``slots`` FIFO slots per connection (a
    ``native.SymbolicRun``: its order and findings), and per memory layout of ``mms``:
    is the run on it free of every violation, its postcondition met where the
    collective has one? Layouts of more than :data:`SLOTS_PER_STEP` slots per step (and
    65,536), and programs with numbers beyond 32 bits, are not tried (not proved).

    Assumes :func:`arborcc.verify.structure.check_structure` found nothing fatal."""
    if slots < 1:
        raise ValueError("a connection needs at least one slot")
    program = encoded_program(algo)
    most = SLOTS_PER_STEP * program.num_steps + (1 << 16)
    layouts = [None if program.clamped or mm.total > most else _layout_arrays(algo, mm) for mm in mms]
    tried = [v for v, lay in enumerate(layouts) if lay is not None]
    run = native.run_layouts(program, algo.num_ranks, [layouts[v] for v in tried], slots, check_races)
    proved = [False] * len(mms)
    for v, ok in zip(tried, run.proved):
        proved[v] = ok
    return run, proved


def _layout_arrays(algo: Algorithm, mm: MemoryMap) -> tuple | None:
    """``mm`` and the postcondition as the compiled run takes them, or None if the
    postcondition asks for a set of ranks other than one rank or all of them (none does)."""
    n = algo.num_ranks
    ranks = sorted(p.rank for p in algo.ranks)
    bases, data, data_end, expected = [], [], [], []
    for r in ranks:
        bases.extend(mm.bases[r].get(b, -1) for b in BUFFERS)
        first, end = mm.data(r)
        data.append(first)
        data_end.append(end if mm.layouts[r].data_defined else first)
    coll, k = algo.collective, algo.chunks_per_loop
    if has_signature(coll, n, k):
        everyone = (1 << n) - 1
        root = algo.effective_root
        for r in ranks:
            lay = mm.layouts[r]
            if not lay.result_checked:
                continue
            out = mm.bases[r][Buffer.OUTPUT]
            for first, length, chunk, mask in expected_runs(coll, n, k, r, root, lay.received_chunks):
                if mask == everyone:
                    whose = -1
                elif mask & (mask - 1) == 0:
                    whose = mask.bit_length() - 1
                else:
                    return None
                expected.append((out + first, length, chunk, whose))
    return mm.total, bases, data, data_end, expected
