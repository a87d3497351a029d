"""Physical buffer layout: where each logical chunk of a program lives in the IR buffers.

Three things make IR offsets differ from the indices a program uses:

* named scratch regions are laid out one after another in the one scratch buffer
  (the main scratch region first), per rank;
* :func:`~arborcc.lang.program.parallelize` regions split a chunk into parts moved
  independently (GC3 section 5.1): every logical chunk becomes ``L`` sub-chunks, ``L``
  the least common multiple of the parallelization factors used;
* ``instances=n`` replicates the program on 1/n of the data (GC3 section 5.1): each
  sub-chunk becomes n physical chunks. Inside a *replication block* (see
  :meth:`~arborcc.lang.collectives.Collective.replication_block`) the n copies lie one
  after another; blocks follow each other. Block 1 is the public GC3 tools' interleaved
  layout; scratch is one block (copies one after another).

An operation moving a range that crosses a block boundary of a replicated buffer is not
contiguous in every copy, so it is split into pieces at those boundaries (aggregation
is kept wherever the layout allows it).

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

from dataclasses import dataclass
from math import lcm
from operator import itemgetter

from arborcc.ir.model import Buffer
from arborcc.lang import trace as T
from arborcc.lang.buffers import INPUT, OUTPUT

#: IR buffer numbers used inside the compiler (index into IR_BUFFERS)
IB_INPUT, IB_OUTPUT, IB_SCRATCH = 0, 1, 2
IR_BUFFERS = (Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH)


@dataclass
class Layout:
    """Sizes and offsets of one compiled program (logical -> physical chunks)."""

    sub: int  #: L: sub-chunks per logical chunk (parallelize)
    instances: int  #: n
    input_block: int  #: replication block of the input buffer, in sub-chunks
    output_block: int
    region_offset: list[list[int]]  #: per rank, per buffer code >= 2: offset in scratch (logical)
    scratch_size: list[int]  #: per rank: logical scratch chunks (all regions)
    input_size: list[int]  #: per rank, logical
    output_size: list[int]
    loop_size: int = 0  #: logical chunks per loop (0: the larger buffer)

    def phys(self, ib: int, rank: int, code: int, t: int) -> int:
        """Physical offset (instance 0) of sub-chunk ``t`` of buffer ``code`` of ``rank``."""
        if ib == IB_SCRATCH:
            return self.region_offset[rank][code] * self.sub + t
        block = self.input_block if ib == IB_INPUT else self.output_block
        if self.instances == 1:
            return t
        return (t // block) * block * self.instances + t % block

    def shift(self, ib: int, rank: int, instance: int) -> int:
        """How far instance ``instance``'s copy of a chunk lies from instance 0's."""
        if ib == IB_SCRATCH:
            return instance * self.scratch_size[rank] * self.sub
        return instance * (self.input_block if ib == IB_INPUT else self.output_block)

    def ir_sizes(self, rank: int) -> tuple[int, int, int]:
        k = self.sub * self.instances
        return self.input_size[rank] * k, self.output_size[rank] * k, self.scratch_size[rank] * k

    @property
    def chunks_per_loop(self) -> int:
        k = self.sub * self.instances
        return (self.loop_size or max(max(self.input_size), max(self.output_size))) * k


def _block(collective, buffer, size: int, replication: str) -> int:
    """Replication block of a buffer in logical chunks (must divide its size)."""
    if replication == "batched" or size == 0:
        return max(size, 1)
    b = collective.replication_block(buffer)
    if not isinstance(b, int) or b < 1 or size % b:
        return 1
    return b


def plan_layout(prog) -> Layout:
    """The layout of ``prog`` (a traced :class:`~arborcc.lang.program.Program`)."""
    ops = prog.ops
    sub = 1
    for p in set(map(itemgetter(T.LANES), ops)):
        sub = lcm(sub, p)
    n = prog.instances
    col = prog.collective
    in_sizes, out_sizes = list(prog.input_sizes), list(prog.output_sizes)
    # every rank has the same declared sizes in all built-in collectives; a custom one may
    # differ per rank: the block is computed from rank 0 and must divide every rank's size
    ib = _block(col, INPUT, in_sizes[0], prog.replication)
    ob = _block(col, OUTPUT, out_sizes[0], prog.replication)
    if any(s % ib for s in in_sizes):
        ib = 1
    if any(s % ob for s in out_sizes):
        ob = 1
    region_offset, scratch_size = [], []
    for r in range(prog.num_ranks):
        offs, total = [0, 0], 0
        for code in range(2, len(prog.buffer_names)):
            offs.append(total)
            total += prog.buffer_size(r, code)
        region_offset.append(offs)
        scratch_size.append(total)
    # MSCCL counts a gather's / scatter's chunks per loop in one rank's block (its
    # sizeMultiplier is 1), not in the root's n-block buffer
    loop = {"gather": in_sizes[0], "scatter": out_sizes[0]}.get(col.name, 0)
    return Layout(sub, n, ib * sub, ob * sub, region_offset, scratch_size, in_sizes, out_sizes, loop)


def ir_buffer(code: int) -> int:
    return code if code < 2 else IB_SCRATCH


def op_pieces(op: tuple, layout: Layout):
    """The physical pieces of a traced operation (instance 0), one per (lane, contiguous run).

    Yields ``(src_ib, src_off, dst_ib, dst_off, count, lane)``.
    """
    L, n = layout.sub, layout.instances
    lanes, s = op[T.LANES], op[T.COUNT]
    sr, sc, dr, dc = op[T.SRC_RANK], op[T.SRC_BUF], op[T.DST_RANK], op[T.DST_BUF]
    sib, dib = ir_buffer(sc), ir_buffer(dc)
    m = s * L // lanes  # sub-chunks per lane
    for q in range(lanes):
        ts = op[T.SRC_IDX] * L + q * m
        td = op[T.DST_IDX] * L + q * m
        cuts = {0, m}
        if n > 1:
            for ibuf, t0 in ((sib, ts), (dib, td)):
                if ibuf == IB_SCRATCH:
                    continue
                block = layout.input_block if ibuf == IB_INPUT else layout.output_block
                first = (t0 // block + 1) * block - t0  # distance to the next boundary
                cuts.update(range(first, m, block))
        edges = sorted(cuts)
        for a, b in zip(edges, edges[1:]):
            yield (sib, layout.phys(sib, sr, sc, ts + a), dib, layout.phys(dib, dr, dc, td + a), b - a, q)
