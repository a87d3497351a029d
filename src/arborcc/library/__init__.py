"""Algorithms written in the DSL, each a function returning ``Built(algorithm, program)``.

``LIBRARY`` (:mod:`.catalog`) maps a name (as used by ``arborcc compile NAME``) to a
:class:`~arborcc.library.spec.LibrarySpec` describing its parameters::

    from arborcc.library import LIBRARY
    algo, prog = LIBRARY["ring-allreduce"](ranks=8, channels=2)

The functions themselves live one family per module (:mod:`.ring`, :mod:`.allpairs`,
:mod:`.halving_doubling`, :mod:`.hierarchical`, :mod:`.alltoall`, :mod:`.alltonext`).
The staged (BlueConnect/hierarchical) all-reduce the synthesizer's ``blueconnect`` and
``hierarchical`` strategies trace lives in :mod:`.staged`, on :mod:`.ring`'s and
:mod:`.halving_doubling`'s helpers.

The runtime's built-in algorithms live here too, as functions returning an ``Algorithm``
(not in ``LIBRARY``: they take no named parameters and are not compiled by name):
:mod:`.direct`, the direct algorithm of every collective (the synthesizer's ``direct``
all-to-all traces its all-to-all). So do NCCL's ring kernels
(:mod:`.nccl_ring`), which the NCCL baseline and the ``nccl-ring`` strategy run.
"""

from arborcc.lazy import lazy_exports

#: public name -> module that defines it (imported on first use)
EXPORTS = {
    "LIBRARY": "arborcc.library.catalog",
    "LibrarySpec": "arborcc.library.spec",
    "Param": "arborcc.library.spec",
    "Built": "arborcc.library.spec",
    "ring_allreduce": "arborcc.library.ring",
    "ring_allgather": "arborcc.library.ring",
    "ring_reducescatter": "arborcc.library.ring",
    "ring_reduce_scatter": "arborcc.library.ring",
    "ring_all_gather": "arborcc.library.ring",
    "allpairs_allreduce": "arborcc.library.allpairs",
    "hd_allreduce": "arborcc.library.halving_doubling",
    "hierarchical_allreduce": "arborcc.library.hierarchical",
    "twostep_alltoall": "arborcc.library.alltoall",
}
__getattr__, __dir__ = lazy_exports(__name__, EXPORTS)
__all__ = list(EXPORTS)
