"""Recursive halving-doubling, written once in the GC3 DSL with aggregated (multi-count)
references: the all-reduce of the library and the stages of BlueConnect's plans.

Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in
MPICH", IJHPCA 19(1), 2005 (https://doi.org/10.1177/1094342005051521); BlueConnect's
eq. (2) restates its cost.

Reduce-scatter by recursive halving over a group of p members (p a power of two): in
the round at distance d = p/2, p/4, ..., 1, position j exchanges with ``j XOR d``; each
keeps half of the range it still owns (the lower half when bit d of j is 0) and reduces
its partner's copy of that half into its own. After log2 p rounds position j owns
sub-block j, fully reduced. All-gather by recursive doubling retraces the rounds
(d = 1, 2, ..., p/2), each position sending everything it owns to its partner.
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

from arborcc.errors import InputError
from arborcc.ir.model import Buffer
from arborcc.lang import AllReduce, Program, chunk
from arborcc.library.common import positive
from arborcc.library.spec import Built

IN, OUT = Buffer.INPUT, Buffer.OUTPUT

#: how a contiguous range of chunks ``(start, count)`` is cut into transfers
Transfers = Callable[[int, int], Iterable[tuple[int, int]]]


def whole_transfers(start: int, count: int) -> list[tuple[int, int]]:
    """A range as one transfer."""
    return [(start, count)]


def near_equal_transfers(most: int) -> Transfers:
    """A range cut into the fewest near-equal transfers of at most ``most`` chunks (the
    first ones a chunk larger where they do not divide evenly)."""
    def cut(start: int, count: int) -> list[tuple[int, int]]:
        if count <= 0:
            return []
        parts = -(-count // most)
        base, extra = divmod(count, parts)
        out, at = [], start
        for j in range(parts):
            size = base + (1 if j < extra else 0)
            out.append((at, size))
            at += size
        return out
    return cut


def recursive_halving(group: Sequence[int], offset: int, block: int, buffer: Buffer = IN, ch: int = -1,
                      transfers: Transfers = whole_transfers) -> None:
    """Reduce-scatter among ``group`` (ranks by position) of the ``len(group)`` blocks of
    ``block`` chunks at ``offset`` of ``buffer``: position j ends owning block j, reduced.
    ``transfers`` cuts each exchanged range into transfers (default: one)."""
    p = len(group)
    lo, hi = [0] * p, [p] * p
    d = p // 2
    while d >= 1:
        keep = []
        for j in range(p):
            mid = (lo[j] + hi[j]) // 2
            keep.append((lo[j], mid) if j & d == 0 else (mid, hi[j]))
        for j in range(p):
            a, b = keep[j]
            for s, c in transfers(offset + a * block, (b - a) * block):
                chunk(group[j], buffer, s, c).reduce(chunk(group[j ^ d], buffer, s, c), ch=ch)
        for j in range(p):
            lo[j], hi[j] = keep[j]
        d //= 2


def recursive_doubling(group: Sequence[int], offset: int, block: int, buffer: Buffer = IN, ch: int = -1,
                       transfers: Transfers = whole_transfers) -> None:
    """All-gather among ``group`` of the blocks :func:`recursive_halving` left: at distance
    d = 1, 2, ..., p/2 every position sends all it owns to its partner ``j XOR d``."""
    p = len(group)
    lo, hi = list(range(p)), [j + 1 for j in range(p)]
    d = 1
    while d < p:
        for j in range(p):
            for s, c in transfers(offset + lo[j] * block, (hi[j] - lo[j]) * block):
                chunk(group[j], buffer, s, c).copy(group[j ^ d], buffer, s, ch=ch)
        new = [(min(lo[j], lo[j ^ d]), max(hi[j], hi[j ^ d])) for j in range(p)]
        for j in range(p):
            lo[j], hi[j] = new[j]
        d *= 2


def hd_allreduce(ranks: int, instances: int = 1, protocol: str = "Simple", inplace: bool = True,
                 topology: object = None, name: str | None = None) -> Built:
    """Recursive halving reduce-scatter then recursive doubling all-gather over ranks
    0..R-1 (R a power of two), one chunk per rank."""
    R = positive(ranks, "ranks", "hd-allreduce")
    if R & (R - 1):
        raise InputError(f"recursive halving-doubling needs a power-of-two number of ranks, got {R} "
                         f"(use ring-allreduce, or {1 << (R.bit_length() - 1)} or {1 << R.bit_length()} ranks)",
                         source="hd-allreduce", place="ranks")
    name = name or f"hd-allreduce-{R}r-{instances}i"
    with Program(name, AllReduce(R, R, inplace), topology, instances=instances, protocol=protocol) as prog:
        buf = IN
        if not inplace:  # work in the output buffer
            for r in range(R):
                chunk(r, IN, 0, R).copy(r, OUT, 0)
            buf = OUT
        everyone = list(range(R))
        recursive_halving(everyone, 0, 1, buf)
        recursive_doubling(everyone, 0, 1, buf)
    return Built(prog.compile(), prog)
