"""Buffer layout: do the declared chunk counts fit the collective, and where each
chunk lives in memory for an in-place or an out-of-place call.

The symbolic execution addresses one flat array of chunk slots for all ranks; a
:class:`MemoryMap` gives each rank's input, output and scratch base in it. In-place
aliasing follows NCCL's in-place convention (:mod:`arborcc.ir.aliasing`).
"""

from __future__ import annotations

from dataclasses import dataclass

from arborcc.ir.collectives import RANK_MULTIPLIED, ROOTED, Signature, signature
from arborcc.ir.model import Algorithm, Buffer
from arborcc.ir.report import Violation


def check_layout(algo: Algorithm) -> tuple[list[Violation], list[str]]:
    """Declared buffer sizes against the collective's signature (``layout`` violations)."""
    out: list[Violation] = []
    notes: list[str] = []
    coll, n, k = algo.collective, algo.num_ranks, algo.chunks_per_loop
    if not algo.inplace and not algo.outofplace:
        out.append(Violation(None, None, None, "layout",
                             "neither in-place nor out-of-place: no call can select this algorithm"))
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
        for what, declared, expected, root_only in (
            ("input", prog.input_chunks, sig.input_chunks, sig.input_root_only),
            ("output", prog.output_chunks, sig.output_chunks, sig.output_root_only),
        ):
            if declared == expected or (root_only and prog.rank != root and declared == 0):
                continue
            out.append(Violation(prog.rank, None, None, "layout",
                                 f"declares {declared} {what} chunks but {coll} on {n} ranks with "
                                 f"{k} chunks per loop has {expected}"))
    return out, notes


@dataclass
class MemoryMap:
    """Flat slot addresses of every rank's buffers for one kind of call."""

    inplace: bool
    #: per rank id: {Buffer: absolute address of its chunk 0}
    bases: list[dict[Buffer, int]]
    #: per rank id: first and one-past-last address of its memory
    spans: list[tuple[int, int]]
    total: int
    signatures: list[Signature | None]


def memory_map(algo: Algorithm, inplace: bool) -> MemoryMap:
    """Lay out all ranks' buffers in one flat array (assumes rank ids 0..n-1, unique)."""
    n, k, coll = algo.num_ranks, algo.chunks_per_loop, algo.collective
    root = algo.effective_root
    usable_sigs = coll != "custom" and n >= 1 and k >= 1 and not (coll in RANK_MULTIPLIED and k % n)
    bases: list[dict[Buffer, int]] = [dict() for _ in range(n)]
    spans: list[tuple[int, int]] = [(0, 0)] * n
    sigs: list[Signature | None] = [None] * n
    pos = 0
    for prog in sorted(algo.ranks, key=lambda p: p.rank):
        r = prog.rank
        sig = signature(coll, n, k, r, root) if usable_sigs else None
        sigs[r] = sig
        i_n, o_n, s_n = prog.input_chunks, prog.output_chunks, prog.scratch_chunks
        start = pos
        alias = (sig.alias, sig.alias_offset) if sig is not None else ("same", 0)
        if inplace and alias[0] == "same":
            in_base = out_base = start
            region = max(i_n, o_n)
        elif inplace and alias[0] == "input_in_output" and alias[1] + i_n <= o_n:
            out_base, in_base, region = start, start + alias[1], o_n
        elif inplace and alias[0] == "output_in_input" and alias[1] + o_n <= i_n:
            in_base, out_base, region = start, start + alias[1], i_n
        else:
            in_base, out_base, region = start, start + i_n, i_n + o_n
        bases[r] = {Buffer.INPUT: in_base, Buffer.OUTPUT: out_base, Buffer.SCRATCH: start + region}
        pos = start + region + s_n
        spans[r] = (start, pos)
    return MemoryMap(inplace, bases, spans, pos, sigs)

