"""``msccl.language.collectives``: the collectives, with the public tools' constructor
``Collective(num_ranks, chunk_factor, inplace)``. A user collective subclasses
:class:`Collective` and defines ``init_buffers()`` and ``check(prog)``."""

from arborcc.lang.collectives import (
                                      AllGather,
                                      AllReduce,
                                      AllToAll,
                                      AllToNext,
                                      Broadcast,
                                      Collective,
                                      Gather,
                                      Reduce,
                                      ReduceScatter,
                                      Scatter,
)
from arborcc.lang.values import Chunk, ReduceChunk

_arborcc_compat = True

__all__ = ["Collective", "AllReduce", "AllGather", "ReduceScatter", "AllToAll", "Broadcast", "Reduce",
           "Gather", "Scatter", "AllToNext", "Chunk", "ReduceChunk"]
