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

from dataclasses import dataclass

CANONICAL_COLLECTIVES = (
    "allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce",
    "gather", "scatter", "custom",
)
ROOTED_COLLECTIVES = frozenset({"broadcast", "reduce", "gather", "scatter"})
#: collectives whose chunk size carries the rank count (MSCCL ``sizeMultiplier``)
RANK_MULTIPLIED = frozenset({"allgather", "reducescatter", "alltoall"})


def size_multiplier(collective: str, num_ranks: int) -> int:
    return num_ranks if collective in RANK_MULTIPLIED else 1


@dataclass(frozen=True)
class Signature:
    """What one rank's buffers must look like for a collective.

    ``alias`` describes the in-place placement: ``"same"`` (one buffer),
    ``"input_in_output"`` or ``"output_in_input"`` at ``alias_offset`` chunks.
    """

    input_chunks: int
    output_chunks: int
    input_root_only: bool = False
    output_root_only: bool = False
    input_defined: bool = True
    output_checked: bool = True
    alias: str = "same"
    alias_offset: int = 0


def signature(collective: str, n: int, k: int, rank: int, root: int) -> Signature | None:
    """The buffer signature of ``rank``; None for ``custom`` (nothing is known)."""
    b = k // n if n else 0
    is_root = rank == root
    if collective == "allreduce":
        return Signature(k, k)
    if collective == "allgather":
        return Signature(b, k, alias="input_in_output", alias_offset=rank * b)
    if collective == "reducescatter":
        return Signature(k, b, alias="output_in_input", alias_offset=rank * b)
    if collective == "alltoall":
        return Signature(k, k)
    if collective == "broadcast":
        return Signature(k, k, input_root_only=True, input_defined=is_root)
    if collective == "reduce":
        return Signature(k, k, output_root_only=True, output_checked=is_root)
    if collective == "gather":
        return Signature(k, n * k, output_root_only=True, output_checked=is_root,
                         alias="input_in_output", alias_offset=rank * k)
    if collective == "scatter":
        return Signature(n * k, k, input_root_only=True, input_defined=is_root,
                         alias="output_in_input", alias_offset=rank * k)
    return None


def expected_contributions(collective: str, n: int, k: int, rank: int, root: int,
                           index: int) -> tuple[int, int]:
    """What output chunk ``index`` of ``rank`` must hold: ``(input chunk, rank bitmask)``.

    Every postcondition above names one input chunk index and a set of source ranks
    (bit ``q`` of the mask set for rank ``q``), each to be present exactly once.
    """
    b = k // n if n else 0
    if collective in ("allreduce", "reduce"):
        return index, (1 << n) - 1
    if collective == "allgather":
        return index % b, 1 << (index // b)
    if collective == "reducescatter":
        return rank * b + index, (1 << n) - 1
    if collective == "alltoall":
        return rank * b + index % b, 1 << (index // b)
    if collective == "broadcast":
        return index, 1 << root
    if collective == "gather":
        return index % k, 1 << (index // k)
    if collective == "scatter":
        return rank * k + index, 1 << root
    raise ValueError(f"no postcondition for collective {collective!r}")

