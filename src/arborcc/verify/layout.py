"""Buffer layout: do the declared chunk counts fit the collective in a mode, and where
each chunk lives in memory for an in-place or an out-of-place call.

The symbolic execution addresses one flat array of chunk slots for all ranks; a
:class:`MemoryMap` gives each rank's buffers their addresses in it. Both are built on
:mod:`arborcc.ir.aliasing`, the one normalization of in-place and out-of-place calls:
out of place the call's send and receive buffers are separate, in place they overlap
as NCCL's in-place convention says (and the IR's accesses to the buffer the call does
not pass separately land in the other one).
"""

from __future__ import annotations

from dataclasses import dataclass

from arborcc.ir.aliasing import Mode, RankLayout, layouts
from arborcc.ir.collectives import RANK_MULTIPLIED, ROOTED, signature
from arborcc.ir.model import Algorithm, Buffer
from arborcc.ir.report import Violation


def check_layout(algo: Algorithm, mode: Mode) -> tuple[list[Violation], list[str]]:
    """Declared buffer sizes against the collective's signature for a call in ``mode``
    (``layout`` violations, messages naming the mode) and notes.

    Out of place every rank declares its input and output with the collective's sizes (a
    buffer only the root needs may be declared with 0 chunks elsewhere). In place the
    same holds, and a buffer that lives inside the other one may also be declared with
    0 chunks - the public GC3 tools write every access in the buffer that holds the data.
    """
    out: list[Violation] = []
    notes: list[str] = []
    coll, n, k = algo.collective, algo.num_ranks, algo.chunks_per_loop
    if coll in ROOTED:
        if algo.root is None:
            notes.append(f"{coll}: the algorithm names no root; assuming rank 0")
        elif not 0 <= algo.root < n:
            out.append(Violation(None, None, None, "layout",
                                 f"root {algo.root} is not a rank of this {n}-rank algorithm"))
    if coll == "custom" or n < 1 or k < 1:
        return out, notes
    if coll in RANK_MULTIPLIED and k % n:
        out.append(Violation(None, None, None, "layout",
                             f"{coll} needs chunks per loop ({k}) divisible by the rank count ({n})"))
        return out, notes
    root = algo.effective_root
    for prog in algo.ranks:
        if not 0 <= prog.rank < n:
            continue
        sig = signature(coll, n, k, prog.rank, root)
        assert sig is not None
        for what, buffer, declared, expected, root_only in (
            ("input", Buffer.INPUT, prog.input_chunks, sig.input_chunks, sig.input_root_only),
            ("output", Buffer.OUTPUT, prog.output_chunks, sig.output_chunks, sig.output_root_only),
        ):
            if declared == expected or (root_only and prog.rank != root and declared == 0):
                continue
            inside = mode is Mode.INPLACE and _lives_inside(sig.alias, buffer)
            if inside and declared == 0:
                continue
            either = " (or 0: in place it lives inside the other buffer)" if inside else ""
            out.append(Violation(prog.rank, None, None, "layout",
                                 f"{mode.label} call: declares {declared} {what} chunks but {coll} on {n} ranks "
                                 f"with {k} chunks per loop has {expected}{either}"))
    return out, notes


def _lives_inside(alias: str, buffer: Buffer) -> bool:
    """Whether the IR's ``buffer`` is placed inside the other buffer by an in-place call."""
    if alias == "input_in_output":
        return buffer is Buffer.INPUT
    return buffer is Buffer.OUTPUT  # "output_in_input", or one buffer for both ("same")


@dataclass
class MemoryMap:
    """Flat slot addresses of every rank's buffers for one kind of call."""

    mode: Mode
    #: per rank id: how the call's buffers are laid out (:mod:`arborcc.ir.aliasing`)
    layouts: list[RankLayout]
    #: per rank id: {IR buffer: absolute address of its chunk 0}
    bases: list[dict[Buffer, int]]
    #: per rank id: {call buffer: absolute address of its chunk 0}
    call_bases: list[dict[Buffer, int]]
    #: per rank id: first and one-past-last address of its memory
    spans: list[tuple[int, int]]
    total: int

    def data(self, rank: int) -> tuple[int, int]:
        """First and one-past-last address of ``rank``'s data when the call starts."""
        return self._region(rank, self.layouts[rank].data)

    def result(self, rank: int) -> tuple[int, int]:
        """First and one-past-last address where ``rank``'s result must be at the end."""
        return self._region(rank, self.layouts[rank].result)

    def _region(self, rank: int, where: tuple[Buffer, int, int]) -> tuple[int, int]:
        buffer, first, count = where
        start = self.call_bases[rank][buffer] + first
        return start, start + count


def memory_map(algo: Algorithm, mode: Mode) -> MemoryMap:
    """Lay out all ranks' call buffers in one flat array (rank ids 0..n-1, unique).

    A call buffer is as large as the collective needs or as an IR buffer placed in it
    reaches, whichever is more: a wrongly declared size is a ``layout`` violation, not
    an access into the next buffer's memory.
    """
    lays = layouts(algo, mode)
    by_rank = {p.rank: p for p in algo.ranks}
    n = algo.num_ranks
    bases: list[dict[Buffer, int]] = [dict() for _ in range(n)]
    call_bases: list[dict[Buffer, int]] = [dict() for _ in range(n)]
    spans: list[tuple[int, int]] = [(0, 0)] * n
    ordered: list[RankLayout] = [None] * n  # type: ignore[list-item]
    pos = 0
    for lay in lays:
        prog = by_rank[lay.rank]
        declared = {Buffer.INPUT: prog.input_chunks, Buffer.OUTPUT: prog.output_chunks,
                    Buffer.SCRATCH: prog.scratch_chunks}
        size = {b: lay.size(b) for b in Buffer}
        for b, (where, off) in lay.placement.items():
            size[where] = max(size[where], off + max(declared[b], 0))
        start = pos
        for b in (Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH):
            call_bases[lay.rank][b] = pos
            pos += size[b]
        bases[lay.rank] = {b: call_bases[lay.rank][where] + off for b, (where, off) in lay.placement.items()}
        spans[lay.rank] = (start, pos)
        ordered[lay.rank] = lay
    return MemoryMap(mode, ordered, bases, call_bases, spans, pos)
