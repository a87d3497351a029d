"""The verifier's one symbolic run, in compiled code: :func:`symbolic_run`.

It runs ``run_layouts`` of ``verify/csrc/symbolic.cpp``: the schedule (every program:
the order steps complete in, the send each receive pops, count mismatches, the waits of
a deadlock, messages never received) and, per kind of call, the values, race rule and
postcondition, one value per chunk slot, with what they find (reads of uninitialized
memory, races, wrong output chunks), which :mod:`arborcc.verify.findings` formats; a
layout with no finding is proved. Layouts it is not handed (more than
:data:`SLOTS_PER_STEP` slots per step, numbers beyond 32 bits) or that a step reaches
outside of are not followed: :mod:`arborcc.verify.symbolic` follows their values in
Python over the order this run returns.
"""

from __future__ import annotations

from typing import NamedTuple

from arborcc.ir.collectives import has_signature
from arborcc.ir.model import Algorithm, Buffer
import arborcc.verify.native as native
from arborcc.verify.encoding import BUFFERS, encoded_program
from arborcc.verify.layout import MemoryMap
from arborcc.verify.postconditions import expected_runs


#: the compiled run keeps 16 bytes per chunk slot (and its work is the chunks the steps
#: move); the Python values keep a segment per range the steps cut
#: (:mod:`arborcc.verify.memory`). Beyond this many slots per step (big buffers moved in
#: few long steps) those are the cheaper ones and the layout is left to them.
SLOTS_PER_STEP = 16


class LayoutRun(NamedTuple):
    """What the compiled run found on one memory layout (``SymbolicRun.layouts``), and
    the postcondition's runs it checked: ``(rank, first output chunk, input chunk, rank
    bitmask)``, in the order the findings index them."""

    found: dict
    wanted: list[tuple[int, int, int, int]]


def symbolic_run(algo: Algorithm, mms: list[MemoryMap], slots: int,
                 check_races: bool) -> tuple[native.SymbolicRun, list[bool], list[LayoutRun | None]]:
    """The symbolic run of ``algo`` with ``slots`` FIFO slots per connection (a
    ``native.SymbolicRun``: its order and the findings of its schedule); per memory
    layout of ``mms``: is the run on it free of every violation, its postcondition met
    where the collective has one; and what it found there (None where the values are
    left to :func:`arborcc.verify.symbolic.simulate_layouts`). Layouts of more than
    :data:`SLOTS_PER_STEP` slots per step (and 65,536), layouts a step reaches outside
    of, and programs with numbers beyond 32 bits have no findings (and are not proved).

    Assumes :func:`arborcc.verify.structure.check_structure` found nothing fatal."""
    if slots < 1:
        raise ValueError("a connection needs at least one slot")
    program = encoded_program(algo)
    most = SLOTS_PER_STEP * program.num_steps + (1 << 16)
    layouts = [None if program.clamped or mm.total > most else _layout_arrays(algo, mm) for mm in mms]
    tried = [v for v, lay in enumerate(layouts) if lay is not None]
    run = native.run_layouts(program, algo.num_ranks, [layouts[v][0] for v in tried], slots, check_races)
    proved = [False] * len(mms)
    found: list[LayoutRun | None] = [None] * len(mms)
    for v, ok, layout in zip(tried, run.proved, run.layouts):
        proved[v] = ok
        if layout["followed"]:
            found[v] = LayoutRun(layout, layouts[v][1])
    return run, proved, found


def _layout_arrays(algo: Algorithm, mm: MemoryMap) -> tuple[tuple, list] | None:
    """``mm`` and the postcondition as the compiled run takes them, and the
    postcondition's runs as :class:`LayoutRun` lists them; or None if the postcondition
    asks for a set of ranks other than one rank or all of them (none does)."""
    n = algo.num_ranks
    ranks = sorted(p.rank for p in algo.ranks)
    bases, data, data_end, expected, wanted = [], [], [], [], []
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
                wanted.append((r, first, chunk, mask))
    return (mm.total, bases, data, data_end, expected), wanted
