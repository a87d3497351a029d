"""The collective's postcondition: what a finished symbolic run must leave in the outputs.

GC3 section 3.2: "for each index of each output buffer, the postcondition specifies
either an input chunk or a reduction chunk that the algorithm must place into it";
each required contribution must be present exactly once and nothing else may be.

Everything is counted in chunks, as in MSCCL XML: ``K = algo.chunks_per_loop`` and a
chunk is ``elements x mult / K`` where ``mult`` is the rank count for allgather,
reducescatter and alltoall and 1 otherwise (MSCCL executor's ``sizeMultiplier``,
``msccl_parser.cc``). ``n`` is the rank count, ``B = K / n``. A contribution
``(r, j)`` is chunk ``j`` of rank ``r``'s *input* buffer at the start of the call.

=============  ===========  ===============  =========================================
collective     input        output           output chunk ``x`` of rank ``r`` must hold
=============  ===========  ===============  =========================================
allreduce      K            K                ``(q, x)`` for every rank ``q``
allgather      B            K                ``(x // B, x % B)``
reducescatter  K            B                ``(q, r*B + x)`` for every rank ``q``
alltoall       K            K                ``(x // B, r*B + x % B)``
broadcast      K (root)     K                ``(root, x)``
reduce         K            K (root)         root: ``(q, x)`` for every ``q``
gather         K            n*K (root)       root: ``(x // K, x % K)``
scatter        n*K (root)   K                ``(root, r*K + x)``
custom         any          any              nothing known (structure only)
=============  ===========  ===============  =========================================

"(root)" marks a buffer only the root needs: other ranks may declare it with the
same size or with 0 chunks; their contents are not constrained (and a non-root input
of broadcast and scatter holds no data: reading it is reading uninitialized memory).
Every listed contribution must appear exactly once and nothing else may appear.

The requirement comes as runs of consecutive chunks (:func:`expected_runs`), which the
compiled symbolic run (:mod:`arborcc.verify.proof`) checks its memory against; a wrong
output chunk it finds is worded by :func:`log_wrong_chunk`.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

from arborcc.ir.report import ViolationLog
from arborcc.verify.values import compare, format_ranks, mask_ranks


def log_wrong_chunk(log: ViolationLog, coll: str, r: int, x: int, chunk: int, mask: int, value, writer_of,
                    w: int) -> None:
    """Output chunk ``x`` of rank ``r`` holds ``value`` (:mod:`arborcc.verify.values`) but
    needs ``chunk`` of the ranks in ``mask``; step ``w`` last wrote it (-1: none),
    ``writer_of(w)`` names it."""
    by = f" (last written by {writer_of(w)})" if w >= 0 else " (never written)"
    log.add(r, None, None, "postcondition",
            f"output chunk {x} {compare(value, chunk, mask)}{by}; {coll} needs chunk {chunk} of ranks "
            f"{format_ranks(mask_ranks(mask))} there, each exactly once")


def expected_runs(collective: str, n: int, k: int, rank: int, root: int,
                  size: int) -> list[tuple[int, int, int, int]]:
    """What output chunks ``0 .. size-1`` of ``rank`` must hold, as runs
    ``(first index, length, input chunk, rank bitmask)``: index ``first + j`` of a run
    needs input chunk ``chunk + j`` of the ranks in the mask (bit ``q`` for rank ``q``),
    each exactly once. Every postcondition of the table above is such runs.
    """
    b = k // n if n else 0
    everyone = (1 << n) - 1
    if collective in ("allreduce", "reduce"):
        runs = [(0, size, 0, everyone)]
    elif collective == "allgather":
        runs = [(q * b, b, 0, 1 << q) for q in range(n)]
    elif collective == "reducescatter":
        runs = [(0, size, rank * b, everyone)]
    elif collective == "alltoall":
        runs = [(q * b, b, rank * b, 1 << q) for q in range(n)]
    elif collective == "broadcast":
        runs = [(0, size, 0, 1 << root)]
    elif collective == "gather":
        runs = [(q * k, k, 0, 1 << q) for q in range(n)]
    elif collective == "scatter":
        runs = [(0, size, rank * k, 1 << root)]
    else:
        raise ValueError(f"no postcondition for collective {collective!r}")
    return [(first, min(length, size - first), chunk, mask) for first, length, chunk, mask in runs
            if first < size and length > 0]
