"""Algorithms written in the DSL, each a function returning ``Built(algorithm, program)``.

``LIBRARY`` maps a name (as used by ``arborcc compile NAME``) to a :class:`LibrarySpec`
describing its parameters::

    from arborcc.library import LIBRARY
    algo, prog = LIBRARY["ring-allreduce"](ranks=8, channels=2)
"""

from __future__ import annotations

from arborcc.library.allpairs import allpairs_allreduce
from arborcc.library.alltonext import alltonext
from arborcc.library.alltoall import twostep_alltoall
from arborcc.library.halving_doubling import hd_allreduce
from arborcc.library.hierarchical import hierarchical_allreduce
from arborcc.library.ring import (ring_all_gather, ring_allgather, ring_allreduce, ring_reduce_scatter,
                                  ring_reducescatter)
from arborcc.library.spec import (CHANNELS, GPUS_PER_NODE, INPLACE, INSTANCES, NODES, OUTOFPLACE, PROTOCOL,
                                  RANKS, Built, LibrarySpec, Param)

LIBRARY: dict[str, LibrarySpec] = {
    spec.name: spec
    for spec in (
        LibrarySpec("ring-allreduce", "allreduce",
                    "ring reduce-scatter then all-gather; a logical ring spread over channels (GC3 7.1.1)",
                    ring_allreduce, (RANKS, CHANNELS, INSTANCES, PROTOCOL, INPLACE)),
        LibrarySpec("allpairs-allreduce", "allreduce",
                    "every rank reduces its chunk from all others, then sends it to all (GC3 7.1.2)",
                    allpairs_allreduce, (RANKS, INSTANCES, PROTOCOL, INPLACE)),
        LibrarySpec("hd-allreduce", "allreduce",
                    "recursive halving reduce-scatter + recursive doubling all-gather (power-of-two ranks)",
                    hd_allreduce, (RANKS, INSTANCES, PROTOCOL, INPLACE)),
        LibrarySpec("hierarchical-allreduce", "allreduce",
                    "intra-node reduce-scatter, inter-node all-reduce, intra-node all-gather (GC3 2)",
                    hierarchical_allreduce,
                    (NODES, GPUS_PER_NODE, INSTANCES, PROTOCOL,
                     Param("parallel", int, 1, "parallelize factor of the intra-node phases"))),
        LibrarySpec("ring-allgather", "allgather", "ring all-gather", ring_allgather,
                    (RANKS, CHANNELS, INSTANCES, PROTOCOL, OUTOFPLACE)),
        LibrarySpec("ring-reducescatter", "reducescatter", "ring reduce-scatter", ring_reducescatter,
                    (RANKS, CHANNELS, INSTANCES, PROTOCOL, OUTOFPLACE)),
        LibrarySpec("twostep-alltoall", "alltoall",
                    "intra-node gather, then one aggregated inter-node transfer per peer (GC3 7.3)",
                    twostep_alltoall, (NODES, GPUS_PER_NODE, INSTANCES, PROTOCOL)),
        LibrarySpec("alltonext", "custom",
                    "rank i's buffer to rank i+1, node boundaries split over all GPUs' links (GC3 7.4)",
                    alltonext, (NODES, GPUS_PER_NODE, INSTANCES, PROTOCOL)),
    )
}

__all__ = [
    "LIBRARY", "LibrarySpec", "Param", "Built", "ring_allreduce", "ring_allgather", "ring_reducescatter",
    "allpairs_allreduce", "hd_allreduce", "hierarchical_allreduce", "twostep_alltoall", "alltonext",
    "ring_reduce_scatter", "ring_all_gather",
]
