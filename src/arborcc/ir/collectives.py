"""The collectives arborcc knows, and the facts every stage shares about them.

One definition of each fact: the canonical names (the XML writer maps them to each
MSCCL dialect's spelling, see :mod:`arborcc.ir.limits`), which collectives have a root,
which carry the rank count in their chunk size (MSCCL's ``sizeMultiplier``), and the
nccl-tests bus-bandwidth factor that turns algorithm bandwidth into bus bandwidth
(``busbw = algbw x factor``; nccl-tests ``doc/PERFORMANCE.md``: all-reduce
``2(n-1)/n``; reduce-scatter, all-gather, all-to-all, gather and scatter ``(n-1)/n``;
broadcast and reduce ``1``). For all-gather and reduce-scatter the size ``S`` in
``algbw = S / t`` is the total size, the per-rank count times ``n``.
"""

from __future__ import annotations

from dataclasses import dataclass

#: canonical collective names, in the order tables list them
COLLECTIVES: tuple[str, ...] = (
    "allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce", "gather", "scatter", "custom",
)
#: collectives with a root rank
ROOTED: frozenset[str] = frozenset({"broadcast", "reduce", "gather", "scatter"})
#: collectives whose chunk size carries the rank count (MSCCL ``sizeMultiplier``)
RANK_MULTIPLIED: frozenset[str] = frozenset({"allgather", "reducescatter", "alltoall"})
#: collectives that combine values with the call's reduction operator
REDUCING: frozenset[str] = frozenset({"allreduce", "reducescatter", "reduce"})


#: collectives whose call size counts every rank's block (nccl-tests' ``S`` for all-gather
#: and reduce-scatter: the per-rank count times ``n``)
RANK_BLOCKED: frozenset[str] = frozenset({"allgather", "reducescatter", "alltoall", "gather", "scatter"})


def call_blocks(collective: str, num_ranks: int) -> tuple[int, int]:
    """(send, receive) buffer lengths of one rank's call, in rank blocks of NCCL's count:
    ``n`` blocks for what holds every rank's block (all-gather's and gather's receive
    buffer, reduce-scatter's and scatter's send buffer, both of all-to-all's), else one."""
    n = num_ranks
    return (n if collective in ("reducescatter", "alltoall", "scatter") else 1,
            n if collective in ("allgather", "alltoall", "gather") else 1)


def busbw_factor(collective: str, num_ranks: int) -> float:
    """nccl-tests' bus-bandwidth factor of ``collective`` on ``num_ranks`` ranks."""
    n = num_ranks
    if n < 1:
        raise ValueError(f"a collective needs at least one rank, got {n}")
    if collective == "allreduce":
        return 2 * (n - 1) / n
    if collective in RANK_BLOCKED:
        return (n - 1) / n
    if collective in ("broadcast", "reduce"):
        return 1.0
    raise ValueError(f"no bus-bandwidth factor for collective {collective!r}")


def has_signature(collective: str, n: int, k: int) -> bool:
    """Whether :func:`signature` describes ``collective`` on ``n`` ranks with ``k`` chunks
    per loop (not for ``custom``, nor when a rank-multiplied ``k`` is not a multiple of n)."""
    return collective != "custom" and n >= 1 and k >= 1 and not (collective in RANK_MULTIPLIED and k % n)


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
