"""Two-step all-to-all (GC3 section 7.3, Figure 8).

N nodes of G GPUs. A chunk from GPU (m, i) to GPU (n, g) on another node first goes,
inside node m, to GPU (m, g) - the one with the destination's local index - into
scratch; GPU (m, g) then sends the G chunks it gathered for (n, g) in one aggregated
transfer across the network. Chunks between GPUs of one node go directly. Fewer, larger
inter-node messages: the network's per-message overhead is paid N*G times less.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

from arborcc.ir.model import Buffer
from arborcc.lang import AllToAll, Program, chunk
from arborcc.library.common import positive
from arborcc.library.spec import Built, built

IN, OUT, SCRATCH = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH


def twostep_alltoall(nodes: int, gpus_per_node: int, instances: int = 1, protocol: str = "Simple",
                     topology: object = None, name: str | None = None) -> Built:
    N = positive(nodes, "nodes", "twostep-alltoall")
    G = positive(gpus_per_node, "gpus_per_node", "twostep-alltoall")
    name = name or f"twostep-alltoall-{N}x{G}-{instances}i"

    def rank(node: int, gpu: int) -> int:
        return node * G + gpu

    with Program(name, AllToAll(N * G, 1, inplace=False), topology, instances=instances,
                 protocol=protocol) as prog:
        for n in range(N):
            for g in range(G):
                for m in range(N):
                    for i in range(G):
                        c = chunk(rank(m, i), IN, rank(n, g))
                        if n == m:
                            c.copy(rank(n, g), OUT, rank(m, i))
                        else:  # gather on the GPU of node m with the destination's index
                            c.copy(rank(m, g), SCRATCH, n * G + i)
                    if n != m:  # one aggregated transfer across the network
                        chunk(rank(m, g), SCRATCH, n * G, G).copy(rank(n, g), OUT, m * G)
    return built(prog)
