"""Checking a finished symbolic run against the collective's postcondition.

GC3 section 3.2: "for each index of each output buffer, the postcondition specifies
either an input chunk or a reduction chunk that the algorithm must place into it".
The chunk layouts are those of :mod:`arborcc.verify.collectives`; each required
contribution must be present exactly once and nothing else may be.
"""

from __future__ import annotations

from array import array

from arborcc.ir.model import Algorithm, Buffer
from arborcc.verify.collectives import expected_contributions
from arborcc.verify.layout import MemoryMap, effective_root
from arborcc.verify.report import ViolationLog
from arborcc.verify.values import compare, format_ranks, mask_ranks


def check_postcondition(algo: Algorithm, mm: MemoryMap, memory: list, last_write: array,
                        writer_of, log: ViolationLog) -> bool:
    """Log a ``postcondition`` violation per wrong output chunk; True if it was checkable.

    ``writer_of(gid)`` names the step that last wrote a slot (for the message).
    """
    coll, n, k = algo.collective, algo.num_ranks, algo.chunks_per_loop
    if coll == "custom":
        return False
    root = effective_root(algo)
    for prog in sorted(algo.ranks, key=lambda p: p.rank):
        r = prog.rank
        sig = mm.signatures[r]
        if sig is None:
            return False
        if not sig.output_checked:
            continue
        base = mm.bases[r][Buffer.OUTPUT]
        for x in range(min(prog.output_chunks, sig.output_chunks)):
            v = memory[base + x]
            want = expected_contributions(coll, n, k, r, root, x)
            if v == want:
                continue
            chunk, mask = want
            diff = compare(v, chunk, mask)
            w = last_write[base + x]
            by = f" (last written by {writer_of(w)})" if w >= 0 else " (never written)"
            log.add(r, None, None, "postcondition",
                    f"output chunk {x} {diff}{by}; {coll} needs chunk {chunk} of ranks "
                    f"{format_ranks(mask_ranks(mask))} there, each exactly once")
    return True

