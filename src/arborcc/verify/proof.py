"""The verifier's one symbolic run, in compiled code: :func:`symbolic_run`.

It runs ``run_layouts`` of ``verify/csrc/symbolic.cpp``: the schedule (every program:
the order steps complete in, the send each receive pops, count mismatches, the waits of
a deadlock, messages never received) and, per kind of call, the values, race rule and
postcondition over memory kept in segments, with what they find (reads of uninitialized
memory, steps reaching outside their buffers, races, wrong output chunks), which
:mod:`arborcc.verify.findings` words; a layout with no finding is proved. No other
module follows values: a program with numbers beyond 32 bits (which the compiled form
cannot hold) has no run on its layouts, and the verifier says so.
"""

from __future__ import annotations

from typing import NamedTuple

from arborcc.ir.collectives import has_signature
from arborcc.ir.model import Algorithm, Buffer
import arborcc.verify.native as native
from arborcc.verify.encoding import BUFFERS, encoded_program
from arborcc.verify.layout import MemoryMap
from arborcc.verify.postconditions import expected_runs


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
    where the collective has one; and what it found there (None for every layout of a
    program with numbers beyond 32 bits: not run, not proved).

    Assumes :func:`arborcc.verify.structure.check_structure` found nothing fatal."""
    if slots < 1:
        raise ValueError("a connection needs at least one slot")
    program = encoded_program(algo)
    layouts = [] if program.clamped else [_layout_arrays(algo, mm) for mm in mms]
    run = native.run_layouts(program, algo.num_ranks, [lay[0] for lay in layouts], slots, check_races)
    if program.clamped:
        return run, [False] * len(mms), [None] * len(mms)
    return run, list(run.proved), [LayoutRun(found, lay[1]) for found, lay in zip(run.layouts, layouts)]


def _layout_arrays(algo: Algorithm, mm: MemoryMap) -> tuple[tuple, list]:
    """``mm`` and the postcondition as the compiled run takes them, and the
    postcondition's runs as :class:`LayoutRun` lists them."""
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
                else:  # one rank: every postcondition asks for one rank's chunks or everyone's
                    whose = mask.bit_length() - 1
                expected.append((out + first, length, chunk, whose))
                wanted.append((r, first, chunk, mask))
    return (mm.total, bases, data, data_end, expected), wanted
