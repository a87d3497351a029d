"""Where an algorithm's buffers live in a call: the one normalization of in-place and
out-of-place calls that every consumer (verifier, reference executor, simulator,
runtimes) applies.

An NCCL-style call passes a send buffer and a receive buffer. Out of place they are
separate memory; in place they overlap as NCCL defines it (and as the public GC3
tools assume when they write an in-place file, msccl-tools
``msccl/language/collectives.py``): all-reduce, all-to-all, broadcast and reduce use one
buffer; all-gather and gather read rank ``r``'s input from its block of the output
(``sendbuff == recvbuff + r * sendcount``); reduce-scatter and scatter leave rank
``r``'s output in its block of the input (``recvbuff == sendbuff + r * recvcount``).
Files written for an in-place call often declare the unused buffer with zero chunks;
the sizes here come from the collective's signature
(:func:`arborcc.ir.collectives.signature`), not from those declarations.

A :class:`RankLayout` says, for one rank and one mode, how many chunks the call's
send (``INPUT``) and receive (``OUTPUT``) buffers and the scratch buffer hold, and
where each of the IR's three buffers starts: ``placement[Buffer.INPUT] ==
(Buffer.OUTPUT, 8)`` reads "the IR's input buffer is chunk 8 onwards of the call's
receive buffer". It also says where the rank's data is when the call starts
(:attr:`RankLayout.data`) and where its result must be when it ends
(:attr:`RankLayout.result`). ``custom`` collectives define no aliasing: their buffers
are used as declared in both modes.

Every consumer builds on this: the verifier lays out its symbolic memory with it
(:mod:`arborcc.verify.layout`), the reference executor allocates its buffers with it
(:mod:`arborcc.ir.reference`), and the simulator and the runtimes address a
caller's buffers with it.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from arborcc.ir.collectives import has_signature, signature
from arborcc.ir.model import Algorithm, Buffer, RankProgram


class Mode(str, enum.Enum):
    """How the caller passes its buffers."""

    OUTOFPLACE = "outofplace"
    INPLACE = "inplace"

    @property
    def label(self) -> str:
        """How reports name the mode: ``in-place`` or ``out-of-place``."""
        return "in-place" if self is Mode.INPLACE else "out-of-place"


def declared_modes(algo: Algorithm) -> tuple[Mode, ...]:
    """The modes ``algo`` says it supports (``inplace`` / ``outofplace`` attributes)."""
    return tuple(m for m, on in ((Mode.OUTOFPLACE, algo.outofplace), (Mode.INPLACE, algo.inplace)) if on)


def with_modes(algo: Algorithm, modes) -> Algorithm:
    """``algo`` claiming exactly ``modes`` (a shallow copy: the ranks are shared)."""
    chosen = set(modes)
    return replace(algo, inplace=Mode.INPLACE in chosen, outofplace=Mode.OUTOFPLACE in chosen)


@dataclass(frozen=True)
class RankLayout:
    """One rank's call buffers (sizes in chunks) and where the IR's buffers sit in them."""

    rank: int
    mode: Mode
    input_chunks: int  #: chunks of the call's send buffer (0 when it lives inside the receive buffer)
    output_chunks: int  #: chunks of the call's receive buffer (0 when it lives inside the send buffer)
    scratch_chunks: int
    placement: dict[Buffer, tuple[Buffer, int]]
    sent_chunks: int = 0  #: chunks of data the rank passes (its send count), at :attr:`data`
    received_chunks: int = 0  #: chunks of result the rank gets (its receive count), at :attr:`result`
    data_defined: bool = True  #: False where the call passes no data (a non-root's broadcast input)
    result_checked: bool = True  #: False where the collective leaves the result open (a non-root's reduce)

    def locate(self, buffer: Buffer, offset: int) -> tuple[Buffer, int]:
        """The call buffer and chunk index that the IR's ``buffer[offset]`` denotes."""
        where, base = self.placement[buffer]
        return where, base + offset

    def size(self, buffer: Buffer) -> int:
        """Chunks of the call's ``buffer`` (INPUT: send, OUTPUT: receive, SCRATCH)."""
        if buffer is Buffer.INPUT:
            return self.input_chunks
        return self.output_chunks if buffer is Buffer.OUTPUT else self.scratch_chunks

    @property
    def data(self) -> tuple[Buffer, int, int]:
        """``(call buffer, first chunk, count)`` of the rank's data when the call starts."""
        where, base = self.placement[Buffer.INPUT]
        return where, base, self.sent_chunks

    @property
    def result(self) -> tuple[Buffer, int, int]:
        """``(call buffer, first chunk, count)`` where the rank's result is when the call ends."""
        where, base = self.placement[Buffer.OUTPUT]
        return where, base, self.received_chunks


def rank_layout(algo: Algorithm, program: RankProgram, mode: Mode) -> RankLayout:
    """The layout of ``program``'s rank for a call in ``mode``.

    Sizes are the collective's (its signature) where the collective is known and its
    chunk count fits it, else the sizes ``program`` declares. In place, the buffer the
    call does not pass separately has size 0 and the IR's accesses to it are redirected.
    """
    n, k, coll = algo.num_ranks, algo.chunks_per_loop, algo.collective
    sig = signature(coll, n, k, program.rank, algo.effective_root) if has_signature(coll, n, k) else None
    i_n = sig.input_chunks if sig else program.input_chunks
    o_n = sig.output_chunks if sig else program.output_chunks
    s_n = program.scratch_chunks
    counts = dict(sent_chunks=i_n, received_chunks=o_n, data_defined=sig.input_defined if sig else True,
                  result_checked=sig.output_checked if sig else True)
    identity = {Buffer.INPUT: (Buffer.INPUT, 0), Buffer.OUTPUT: (Buffer.OUTPUT, 0),
                Buffer.SCRATCH: (Buffer.SCRATCH, 0)}
    if mode is Mode.OUTOFPLACE or sig is None:
        return RankLayout(program.rank, mode, i_n, o_n, s_n, identity, **counts)
    if sig.alias == "input_in_output":
        return RankLayout(program.rank, mode, 0, o_n, s_n,
                          {**identity, Buffer.INPUT: (Buffer.OUTPUT, sig.alias_offset)}, **counts)
    if sig.alias == "output_in_input":
        return RankLayout(program.rank, mode, i_n, 0, s_n,
                          {**identity, Buffer.OUTPUT: (Buffer.INPUT, sig.alias_offset)}, **counts)
    return RankLayout(program.rank, mode, max(i_n, o_n), 0, s_n,
                      {**identity, Buffer.OUTPUT: (Buffer.INPUT, 0)}, **counts)


def layouts(algo: Algorithm, mode: Mode) -> list[RankLayout]:
    """:func:`rank_layout` of every rank, in rank order."""
    return [rank_layout(algo, p, mode) for p in sorted(algo.ranks, key=lambda p: p.rank)]
