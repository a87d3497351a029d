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


def check_collective(name: str) -> str:
    """``name`` if it is a canonical collective, else ValueError naming the known ones."""
    if name not in COLLECTIVES:
        raise ValueError(f"unknown collective {name!r} (known: {', '.join(COLLECTIVES)})")
    return name


def busbw_factor(collective: str, num_ranks: int) -> float:
    """nccl-tests' bus-bandwidth factor of ``collective`` on ``num_ranks`` ranks."""
    n = num_ranks
    if n < 1:
        raise ValueError(f"a collective needs at least one rank, got {n}")
    if collective == "allreduce":
        return 2 * (n - 1) / n
    if collective in ("allgather", "reducescatter", "alltoall", "gather", "scatter"):
        return (n - 1) / n
    if collective in ("broadcast", "reduce"):
        return 1.0
    raise ValueError(f"no bus-bandwidth factor for collective {collective!r}")
