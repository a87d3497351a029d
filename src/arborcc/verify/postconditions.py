"""Checking a finished symbolic run against the collective's postcondition.

GC3 section 3.2: "for each index of each output buffer, the postcondition specifies
either an input chunk or a reduction chunk that the algorithm must place into it".
The chunk layouts are those of :mod:`arborcc.verify.collectives`; each required
contribution must be present exactly once and nothing else may be.

Both the requirement and the memory come as runs of consecutive chunks, so a correct
output is confirmed a run at a time; only wrong runs are looked at chunk by chunk.
"""

from __future__ import annotations

from arborcc.ir.model import Algorithm, Buffer
from arborcc.verify.collectives import expected_runs
from arborcc.verify.layout import MemoryMap, effective_root
from arborcc.verify.memory import RankMemory
from arborcc.verify.report import ViolationLog
from arborcc.verify.values import compare, format_ranks, mask_ranks, run_values


def check_postcondition(algo: Algorithm, mm: MemoryMap, memory: list[RankMemory], writer_of,
                        log: ViolationLog) -> bool:
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
        for first, length, chunk, mask in expected_runs(coll, n, k, r, root,
                                                        min(prog.output_chunks, sig.output_chunks)):
            start = base + first
            for a, size, v, w in memory[r].pieces(start, start + length):
                c = chunk + a - start
                if v != (c, mask):
                    _log_wrong_chunks(log, coll, r, a - base, c, mask, run_values(size, v), writer_of, w)
    return True


def _log_wrong_chunks(log: ViolationLog, coll: str, r: int, x: int, chunk: int, mask: int, values: list,
                      writer_of, w: int) -> None:
    """Output chunks ``x, x+1, ...`` of rank ``r`` hold ``values`` and need ``chunk + j`` of
    the ranks in ``mask``; ``w`` last wrote them."""
    by = f" (last written by {writer_of(w)})" if w >= 0 else " (never written)"
    for j, v in enumerate(values):
        if v == (chunk + j, mask):
            continue
        diff = compare(v, chunk + j, mask)
        log.add(r, None, None, "postcondition",
                f"output chunk {x + j} {diff}{by}; {coll} needs chunk {chunk + j} of ranks "
                f"{format_ranks(mask_ranks(mask))} there, each exactly once")
