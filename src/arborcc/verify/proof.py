"""The symbolic run's common case in compiled code: proving a run free of violations.

Most programs the verifier sees are correct. For them :func:`prove_layouts` runs
``prove_layouts`` of ``verify/csrc/symbolic.cpp`` - the schedule, values, race rule and
postcondition of :func:`arborcc.verify.symbolic.simulate_layouts` and
:func:`arborcc.verify.postconditions.check_postcondition`, one value per chunk slot -
which answers, per kind of call, only whether those would report nothing. Where they
would report something, or would have to look further (a value with several chunk
indices or a repeated contribution, a conflicting pair that program order and
dependencies of the rank do not order and only other ranks might), the layout is not
proved, and the verifier runs the Python passes on it: they are the description of
the semantics and the ones that explain what is wrong, so the verdict and every
message are theirs.
"""

from __future__ import annotations

from arborcc.ir.collectives import has_signature
from arborcc.ir.model import Algorithm, Buffer
import arborcc.verify.native as native
from arborcc.verify.encoding import BUFFERS, encoded_program
from arborcc.verify.layout import MemoryMap
from arborcc.verify.postconditions import expected_runs


#: the proof keeps 16 bytes per chunk slot (and its work is the chunks the steps move);
#: the Python run keeps a segment per range the steps cut (:mod:`arborcc.verify.memory`).
#: Beyond this many slots per step (big buffers moved in few long steps) the Python run
#: is the cheaper one and is left to do it.
SLOTS_PER_STEP = 16


def prove_layouts(algo: Algorithm, mms: list[MemoryMap], slots: int, check_races: bool) -> tuple[list[bool], int]:
    """Per memory layout of ``mms``: is the symbolic run on it (with ``slots`` FIFO slots
    per connection) free of every violation, its postcondition met where the collective
    has one? And the steps the run took (all of them when any layout is proved).
    Layouts of more than :data:`SLOTS_PER_STEP` slots per step (and 65,536), and
    programs with numbers beyond 32 bits, are not tried (not proved).

    Assumes :func:`arborcc.verify.structure.check_structure` found nothing fatal."""
    program = encoded_program(algo)
    most = SLOTS_PER_STEP * program.num_steps + (1 << 16)
    if program.clamped or any(mm.total > most for mm in mms):  # numbers beyond 32 bits, or big buffers
        return [False] * len(mms), 0
    layouts = [_layout_arrays(algo, mm) for mm in mms]
    if any(lay is None for lay in layouts):
        return [False] * len(mms), 0
    proved, steps = native.prove_layouts(program, algo.num_ranks, layouts, slots, check_races)
    return proved, steps


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
