"""AllToNext (GC3 section 7.4): rank i's buffer goes to rank i+1.

A user-defined collective (:class:`~arborcc.lang.collectives.AllToNext`). Inside a node
the buffer is copied directly. Across a node boundary - GPU (n, G-1) to GPU (n+1, 0) -
one network link would carry everything, so the buffer is split into G parts: part k is
first scattered to GPU (n, k), crosses to GPU (n+1, k) over that GPU's own link, and is
gathered on GPU (n+1, 0). Named scratch regions (``x<n>``) hold the parts in transit.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

from arborcc.ir.model import Buffer
from arborcc.lang import AllToNext, Program, chunk
from arborcc.library.common import positive
from arborcc.library.spec import Built, built

IN, OUT = Buffer.INPUT, Buffer.OUTPUT


def alltonext(nodes: int, gpus_per_node: int, instances: int = 1, protocol: str = "Simple",
              topology: object = None, name: str | None = None) -> Built:
    N = positive(nodes, "nodes", "alltonext")
    G = positive(gpus_per_node, "gpus_per_node", "alltonext")
    R = N * G
    name = name or f"alltonext-{N}x{G}-{instances}i"

    def rank(node: int, gpu: int) -> int:
        return node * G + gpu

    with Program(name, AllToNext(R, G), topology, instances=instances, protocol=protocol) as prog:
        for n in range(N):
            for g in range(G):
                r = rank(n, g)
                if r == R - 1:
                    continue  # the last rank sends nothing
                if g < G - 1:  # next rank on the same node: one direct copy
                    chunk(r, IN, 0, G).copy(r + 1, OUT, 0)
                    continue
                region = f"x{n}"
                for k in range(G):  # across nodes: split over the node's G links
                    c = chunk(r, IN, k)
                    if k != g:
                        c = c.copy(rank(n, k), region, 0)
                    c = c.copy(rank(n + 1, k), region, 0)
                    c.copy(rank(n + 1, 0), OUT, k)
    return built(prog)
