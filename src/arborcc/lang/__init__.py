"""The chunk DSL of GC3 (paper sections 3 and 5.1), embedded in Python.

A program names a collective (its buffers and postcondition) and moves chunks with two
verbs::

    from arborcc.lang import Program, AllReduce, Buffer, chunk

    n = 4
    with Program("ring", AllReduce(n, n, inplace=True)) as prog:
        for i in range(n):                       # reduce-scatter around the ring
            c = chunk((i + 1) % n, Buffer.INPUT, i)
            for step in range(2, n + 1):
                c = chunk((i + step) % n, Buffer.INPUT, i).reduce(c)
        ...
    assert prog.check()
    algo = prog.compile()                        # an arborcc.ir.model.Algorithm

See ``docs/dsl.md``. The public GC3 tools' spelling (``MSCCLProgram``, ``XML()``,
``Check()``) lives in :mod:`arborcc.compat.msccl`.
"""

from arborcc.ir.model import Buffer, Protocol
from arborcc.lang.collectives import (COLLECTIVES, AllGather, AllReduce, AllToAll, AllToNext, Broadcast,
                                      Collective, Gather, Reduce, ReduceScatter, Scatter)
from arborcc.lang.directives import ThreadblockPolicy, parallelize
from arborcc.lang.program import Program, chunk, create_scratch, current_program
from arborcc.lang.ref import Ref
from arborcc.lang.values import Chunk, ReduceChunk

__all__ = [
    "Program", "chunk", "create_scratch", "current_program", "parallelize", "Ref", "Buffer",
    "Protocol", "ThreadblockPolicy", "Chunk", "ReduceChunk", "Collective", "AllReduce", "AllGather",
    "ReduceScatter", "AllToAll", "Broadcast", "Reduce", "Gather", "Scatter", "AllToNext", "COLLECTIVES",
]
