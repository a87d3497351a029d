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

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from arborcc.lazy import lazy_exports

#: public name -> module that defines it (imported on first use)
EXPORTS = {
    "Program": "arborcc.lang.program",
    "chunk": "arborcc.lang.program",
    "create_scratch": "arborcc.lang.program",
    "current_program": "arborcc.lang.program",
    "parallelize": "arborcc.lang.program",
    "Ref": "arborcc.lang.ref",
    "Buffer": "arborcc.ir.model",
    "Protocol": "arborcc.ir.model",
    "ThreadblockPolicy": "arborcc.lang.directives",
    "Chunk": "arborcc.lang.values",
    "ReduceChunk": "arborcc.lang.values",
    "Collective": "arborcc.lang.collectives",
    "AllReduce": "arborcc.lang.collectives",
    "AllGather": "arborcc.lang.collectives",
    "ReduceScatter": "arborcc.lang.collectives",
    "AllToAll": "arborcc.lang.collectives",
    "Broadcast": "arborcc.lang.collectives",
    "Reduce": "arborcc.lang.collectives",
    "Gather": "arborcc.lang.collectives",
    "Scatter": "arborcc.lang.collectives",
    "AllToNext": "arborcc.lang.collectives",
}
__getattr__, __dir__ = lazy_exports(__name__, EXPORTS)
__all__ = list(EXPORTS)
