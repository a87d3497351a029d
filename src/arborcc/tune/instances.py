"""Instances: n copies of an algorithm side by side, each on 1/n of the data (GC3,
"GC3: An Optimizing Compiler for GPU Collective Communication", section 4 and 7: the
parallelization factor r). More copies mean more thread blocks and channels moving data
at once - what a GPU needs to fill fast links - at the cost of smaller transfers.

Copy i keeps every thread block (id ``t`` becomes ``t x n + i``, as GC3 numbers them),
every dependency (renumbered the same way) and every step; its channels move up by
``i x channels``. Its data is the i-th part of every block of the buffers: a block is
one rank's share for all-gather, reduce-scatter and all-to-all (so a rank's share stays
contiguous) and the whole buffer otherwise; scratch chunks move up by ``i x scratch``.
"""

from __future__ import annotations

from dataclasses import replace

from arborcc.errors import SynthesisError
from arborcc.ir.collectives import RANK_MULTIPLIED
from arborcc.ir.model import Algorithm, Buffer, Dependency, RankProgram, Step, ThreadBlock

MAX_CHANNELS = 32  #: MSCCL's limit (both dialects)
SUPPORTED = ("allreduce", "broadcast", "reduce", "allgather", "reducescatter", "alltoall")


def with_instances(algo: Algorithm, n: int) -> Algorithm:
    """``algo`` run as ``n`` side-by-side copies (module doc); ``algo`` itself for n = 1."""
    if not (isinstance(n, int) and n >= 1):
        raise SynthesisError(f"instances must be an integer >= 1, got {n!r}")
    if n == 1:
        return algo
    if algo.collective not in SUPPORTED:
        raise SynthesisError(f"instances are defined for {', '.join(SUPPORTED)}, not {algo.collective}")
    k = algo.chunks_per_loop
    block = k // algo.num_ranks if algo.collective in RANK_MULTIPLIED else k
    if block < 1 or k % block:
        raise SynthesisError(f"{algo.name}: {k} chunks do not split into blocks per rank")
    channels = algo.num_channels
    if channels * n > MAX_CHANNELS:
        raise SynthesisError(f"{algo.name} uses {channels} channels; {n} instances would need {channels * n}, "
                             f"more than MSCCL's {MAX_CHANNELS}")

    def chunk(buf: Buffer | None, c: int, count: int, i: int, scratch: int) -> int:
        if buf is None:
            return c
        if buf is Buffer.SCRATCH:
            return i * scratch + c
        q, j = divmod(c, block)
        if j + count > block:
            raise SynthesisError(f"{algo.name}: a step moves chunks {c}-{c + count - 1}, across the end of a "
                                 f"block of {block}; instances cannot split it")
        return q * block * n + i * block + j

    ranks = []
    for prog in algo.ranks:
        tbs = []
        for tb in sorted(prog.threadblocks, key=lambda t: t.id):
            for i in range(n):
                steps = []
                for s in tb.steps:
                    dep = Dependency(s.dep.tb * n + i, s.dep.step) if s.dep is not None else None
                    steps.append(Step(s.op, s.src_buf, chunk(s.src_buf, s.src_off, s.count, i, prog.scratch_chunks),
                                      s.dst_buf, chunk(s.dst_buf, s.dst_off, s.count, i, prog.scratch_chunks),
                                      s.count, dep, s.has_dep))
                tbs.append(ThreadBlock(tb.id * n + i, tb.send, tb.recv, tb.channel + channels * i, steps))
        tbs.sort(key=lambda t: t.id)
        ranks.append(RankProgram(prog.rank, prog.input_chunks * n, prog.output_chunks * n,
                                 prog.scratch_chunks * n, tbs))
    return replace(algo, name=f"{algo.name}-x{n}", chunks_per_loop=k * n, ranks=ranks)
