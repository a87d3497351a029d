"""Chunk layouts of the collectives: buffer sizes, in-place aliasing, postconditions.

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

In-place calls alias the buffers as NCCL's in-place convention does: allreduce,
alltoall, broadcast, reduce and custom use one buffer (input = output); allgather and
gather place the input inside the output at ``rank * input_chunks``; reducescatter
and scatter place the output inside the input at ``rank * output_chunks``. When the
declared sizes do not allow that placement the buffers are taken as separate.
"""

from __future__ import annotations

from arborcc.ir.collectives import COLLECTIVES as CANONICAL_COLLECTIVES
from arborcc.ir.collectives import RANK_MULTIPLIED, Signature, signature
from arborcc.ir.collectives import ROOTED as ROOTED_COLLECTIVES

__all__ = ["CANONICAL_COLLECTIVES", "RANK_MULTIPLIED", "ROOTED_COLLECTIVES", "Signature", "signature",
           "expected_runs"]


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
