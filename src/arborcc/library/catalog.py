"""The library's algorithms by name (``arborcc compile NAME``), as plain data.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

from arborcc.library.spec import (
    CHANNELS,
    GPUS_PER_NODE,
    INPLACE,
    INSTANCES,
    NODES,
    OUTOFPLACE,
    PROTOCOL,
    RANKS,
    LibrarySpec,
    Param,
)

LIBRARY: dict[str, LibrarySpec] = {
    spec.name: spec
    for spec in (
        LibrarySpec("ring-allreduce", "allreduce",
                    "ring reduce-scatter then all-gather; a logical ring spread over channels (GC3 7.1.1)",
                    "arborcc.library.ring:ring_allreduce", (RANKS, CHANNELS, INSTANCES, PROTOCOL, INPLACE)),
        LibrarySpec("allpairs-allreduce", "allreduce",
                    "every rank reduces its chunk from all others, then sends it to all (GC3 7.1.2)",
                    "arborcc.library.allpairs:allpairs_allreduce", (RANKS, INSTANCES, PROTOCOL, INPLACE)),
        LibrarySpec("hd-allreduce", "allreduce",
                    "recursive halving reduce-scatter + recursive doubling all-gather (power-of-two ranks)",
                    "arborcc.library.halving_doubling:hd_allreduce", (RANKS, INSTANCES, PROTOCOL, INPLACE)),
        LibrarySpec("hierarchical-allreduce", "allreduce",
                    "intra-node reduce-scatter, inter-node all-reduce, intra-node all-gather (GC3 2)",
                    "arborcc.library.hierarchical:hierarchical_allreduce",
                    (NODES, GPUS_PER_NODE, INSTANCES, PROTOCOL,
                     Param("parallel", int, 1, "parallelize factor of the intra-node phases"))),
        LibrarySpec("ring-allgather", "allgather", "ring all-gather", "arborcc.library.ring:ring_allgather",
                    (RANKS, CHANNELS, INSTANCES, PROTOCOL, OUTOFPLACE)),
        LibrarySpec("ring-reducescatter", "reducescatter", "ring reduce-scatter",
                    "arborcc.library.ring:ring_reducescatter", (RANKS, CHANNELS, INSTANCES, PROTOCOL, OUTOFPLACE)),
        LibrarySpec("twostep-alltoall", "alltoall",
                    "intra-node gather, then one aggregated inter-node transfer per peer (GC3 7.3)",
                    "arborcc.library.alltoall:twostep_alltoall", (NODES, GPUS_PER_NODE, INSTANCES, PROTOCOL)),
        LibrarySpec("alltonext", "custom",
                    "rank i's buffer to rank i+1, node boundaries split over all GPUs' links (GC3 7.4)",
                    "arborcc.library.alltonext:alltonext", (NODES, GPUS_PER_NODE, INSTANCES, PROTOCOL)),
    )
}
