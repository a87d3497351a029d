"""Hierarchical all-reduce (GC3 section 2, Figures 1-4).

N nodes of G GPUs (rank = node * G + gpu), N*G chunks. Four phases: an intra-node ring
reduce-scatter (each GPU ends with the node's sum of N chunks), an inter-node ring
reduce-scatter and all-gather among the GPUs with the same local index, and an
intra-node ring all-gather. As in GC3, the intra-node phases run on channel 0 and 2 and
the inter-node ones on channel 1. ``parallel`` runs every phase as that many instances
on 1/parallel of the data and their own channels: GC3 parallelizes the intra-node
phases only, but then each inter-node transfer carries ``parallel`` sub-chunks, and a
ring whose members first send more than one chunk deadlocks once the MSCCL runtimes cut
steps into pieces (two ranks per inter-node ring, Simple: each fills the other's FIFO
and then waits to forward; ``arborcc.verify.pieces``).

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

from arborcc.lang import AllReduce, Program, parallelize
from arborcc.library.common import positive
from arborcc.library.ring import ring_all_gather, ring_reduce_scatter
from arborcc.library.spec import Built, built


def hierarchical_allreduce(nodes: int, gpus_per_node: int, instances: int = 1, protocol: str = "Simple",
                           parallel: int = 1, topology: object = None, name: str | None = None) -> Built:
    N = positive(nodes, "nodes", "hierarchical-allreduce")
    G = positive(gpus_per_node, "gpus_per_node", "hierarchical-allreduce")
    parallel = positive(parallel, "parallel", "hierarchical-allreduce")
    name = name or f"hierarchical-allreduce-{N}x{G}-{instances}i"
    R = N * G
    with Program(name, AllReduce(R, R, inplace=True), topology, instances=instances, protocol=protocol) as prog:
        with parallelize(parallel):
            for n in range(N):  # intra-node reduce-scatter
                ring_reduce_scatter([n * G + g for g in range(G)], 0, N, ch=0)
        with parallelize(parallel):
            for g in range(G):  # inter-node reduce-scatter and all-gather
                cross = [i * G + g for i in range(N)]
                ring_reduce_scatter(cross, g * N, 1, ch=1)
                ring_all_gather(cross, g * N, 1, ch=1)
        with parallelize(parallel):
            for n in range(N):  # intra-node all-gather
                ring_all_gather([n * G + g for g in range(G)], 0, N, ch=2)
    return built(prog)
