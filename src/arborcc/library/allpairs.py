"""All-pairs all-reduce (GC3 section 7.1.2).

Two communication steps: every rank receives chunk r from every other rank into scratch
and reduces them (rank r owns chunk r), then sends the sum to every other rank. Same
volume as a ring, but 2 steps instead of 2R-2: the latency-bound choice for small sizes.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

from arborcc.ir.model import Buffer
from arborcc.lang import AllReduce, Program, chunk
from arborcc.library.common import positive
from arborcc.library.spec import Built, built

IN, OUT, SCRATCH = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH


def allpairs_allreduce(ranks: int, instances: int = 1, protocol: str = "Simple", inplace: bool = True,
                       topology: object = None, name: str | None = None) -> Built:
    R = positive(ranks, "ranks", "allpairs-allreduce")
    name = name or f"allpairs-allreduce-{R}r-{instances}i"
    with Program(name, AllReduce(R, R, inplace), topology, instances=instances, protocol=protocol) as prog:
        # step 1: rank r gathers everyone's chunk r into its scratch (slot p holds rank p's)
        for r in range(R):
            for p in range(R):
                if p != r:
                    chunk(p, IN, r).copy(r, SCRATCH, p)
        # local sums, then step 2: rank r sends the sum of chunk r to every other rank
        for r in range(R):
            acc = chunk(r, IN, r)
            if not inplace:
                acc = acc.copy(r, OUT, r)
            for p in range(R):
                if p != r:
                    acc = acc.reduce(chunk(r, SCRATCH, p))
            for p in range(R):
                if p != r:
                    acc.copy(p, OUT, r)
    return built(prog)
