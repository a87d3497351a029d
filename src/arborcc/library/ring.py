"""Ring algorithms (GC3 section 7.1.1, Figure 3b).

A ring all-reduce with R ranks divides the buffer into R chunks; chunk j travels the
ring twice starting after rank j: the first pass reduces (a reduce-scatter), the second
copies the result to every rank (an all-gather). GC3 spreads one logical ring over
several channels by giving chunk j channel ``j % channels``; instances replicate it.
The compiler fuses each hop into ``rrs`` / ``rrcs`` / ``rcs`` instructions.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

from typing import Sequence

from arborcc.ir.model import Buffer
from arborcc.lang import AllGather, AllReduce, Program, ReduceScatter, chunk, current_program
from arborcc.library.common import channels_ok, positive
from arborcc.library.spec import Built, built

IN, OUT = Buffer.INPUT, Buffer.OUTPUT


def ring_reduce_scatter(ranks: Sequence[int], offset: int, count: int, ch: int | None = None,
                        buffer: Buffer = IN, split: int = 1) -> None:
    """DSL helper (GC3 Figure 3b): ring reduce-scatter of ``len(ranks)`` blocks of ``count``
    chunks at ``offset`` of ``buffer`` (the input unless said); block i starts at
    ``ranks[i + 1]``, is reduced by every member in ring order and ends reduced on ``ranks[i]``.

    Block i runs on channel ``ch + i % split`` (``split`` channels from ``ch``: a long
    ring spread over several thread blocks per member); ``ch=None``: one channel, the
    compiler's pick. The blocks go round one chunk at a time, every block's first chunk
    first: the MSCCL runtimes cut a step into one piece per chunk on large buffers and a
    Simple FIFO holds two pieces, so a ring whose members first send more than one chunk
    each fills every FIFO and deadlocks (``arborcc.verify.pieces``)."""
    n = len(ranks)
    for j in range(count):
        for i in range(n):
            index = offset + i * count + j
            block_ch = -1 if ch is None else ch + i % split
            c = chunk(ranks[(i + 1) % n], buffer, index)
            for step in range(1, n):
                c = chunk(ranks[(step + i + 1) % n], buffer, index).reduce(c, ch=block_ch)


def ring_all_gather(ranks: Sequence[int], offset: int, count: int, ch: int | None = None,
                    buffer: Buffer = IN, split: int = 1) -> None:
    """DSL helper (GC3 Figure 3b): ring all-gather of the blocks ``ring_reduce_scatter`` left
    in ``buffer``: block i leaves ``ranks[i]`` and goes once round, on channel
    ``ch + i % split``, one chunk at a time as there."""
    n = len(ranks)
    for j in range(count):
        for i in range(n):
            index = offset + i * count + j
            block_ch = -1 if ch is None else ch + i % split
            c = chunk(ranks[i], buffer, index)
            for step in range(1, n):
                c = c.copy(ranks[(step + i) % n], buffer, index, ch=block_ch)


def ring_allreduce_trip(ring: Sequence[int], start: int, index: int, ch: int, dst: Buffer = IN,
                        into_output: bool = False) -> None:
    """DSL helper (GC3 Figure 3b): chunk ``index`` of a ring all-reduce around ``ring`` (rank
    indices in ring order): reduced from ``ring[start + 1]`` around to ``ring[start]``
    (the reduce-scatter's trip), then copied around once more into ``dst`` of every other
    rank (the all-gather's), every hop on channel ``ch``. ``into_output``: the rank that
    completes the sum first copies its own input into its output there (out of place).

    Each hop is what ``own = chunk(r, IN, index); c = own.reduce(c, ch=ch)`` and then
    ``c = c.copy(next, dst, index, ch=ch)`` trace, traced in bulk
    (:meth:`~arborcc.lang.Program.trace_reduces`, ``trace_copies``): a 1024-rank ring
    is two million of them."""
    n = len(ring)
    at = [ring[(start + step) % n] for step in range(n + 1)]  # at[step]: the rank ``step`` hops on
    prog = current_program()
    last = n if into_output else n + 1  # the sum that lands in the output is traced apart
    prog.trace_reduces([(at[step - 1], IN, index, at[step], IN, index, 1, ch) for step in range(2, last)])
    held = IN  # where the completed sum lies on ring[start]
    if into_output and n >= 2:
        prog.trace_copies([(at[n], IN, index, at[n], OUT, index, 1, -1)])
        prog.trace_reduces([(at[n - 1], IN, index, at[n], OUT, index, 1, ch)])
        held = OUT
    prog.trace_copies([(at[step - 1], held if step == 1 else dst, index, at[step], dst, index, 1, ch)
                       for step in range(1, n)])


def ring_allreduce(ranks: int, channels: int = 1, instances: int = 1, protocol: str = "Simple",
                   inplace: bool = True, topology: object = None, name: str | None = None) -> Built:
    """Ring all-reduce over ranks 0..R-1 (in that ring order)."""
    R = positive(ranks, "ranks", "ring-allreduce")
    channels = channels_ok(channels, "ring-allreduce")
    name = name or f"ring-allreduce-{R}r-{channels}ch-{instances}i"
    with Program(name, AllReduce(R, R, inplace), topology, instances=instances, protocol=protocol) as prog:
        if R == 1 and not inplace:
            chunk(0, IN, 0).copy(0, OUT, 0)
        for j in range(R if R > 1 else 0):
            ch = j % channels if channels > 1 else -1  # one channel: let the compiler pick it
            # chunk j starts after rank j, ends reduced on rank j, then goes around once more
            ring_allreduce_trip(range(R), j, j, ch, OUT, into_output=not inplace)
    return built(prog)


def ring_allgather(ranks: int, channels: int = 1, instances: int = 1, protocol: str = "Simple",
                   inplace: bool = False, topology: object = None, name: str | None = None) -> Built:
    """Ring all-gather: rank j's input goes around the ring into block j of every output."""
    R = positive(ranks, "ranks", "ring-allgather")
    channels = channels_ok(channels, "ring-allgather")
    name = name or f"ring-allgather-{R}r-{channels}ch-{instances}i"
    with Program(name, AllGather(R, 1, inplace), topology, instances=instances, protocol=protocol) as prog:
        for j in range(R):
            ch = j % channels if channels > 1 else -1
            c = chunk(j, IN, 0)
            c.copy(j, OUT, j)  # own block (a no-op when in-place: the input is that block)
            for step in range(1, R):
                c = c.copy((j + step) % R, OUT, j, ch=ch)
    return built(prog)


def ring_reducescatter(ranks: int, channels: int = 1, instances: int = 1, protocol: str = "Simple",
                       inplace: bool = False, topology: object = None, name: str | None = None) -> Built:
    """Ring reduce-scatter: block j is reduced around the ring and ends on rank j."""
    R = positive(ranks, "ranks", "ring-reducescatter")
    channels = channels_ok(channels, "ring-reducescatter")
    name = name or f"ring-reducescatter-{R}r-{channels}ch-{instances}i"
    with Program(name, ReduceScatter(R, 1, inplace), topology, instances=instances, protocol=protocol) as prog:
        if R == 1 and not inplace:
            chunk(0, IN, 0).copy(0, OUT, 0)
        for j in range(R if R > 1 else 0):
            ch = j % channels if channels > 1 else -1
            c = chunk((j + 1) % R, IN, j)
            for step in range(2, R + 1):
                r = (j + step) % R
                own = chunk(r, IN, j)
                if step == R and not inplace:
                    own = own.copy(r, OUT, 0)
                c = own.reduce(c, ch=ch)
    return built(prog)
