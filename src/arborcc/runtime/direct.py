"""The runtime's built-in algorithms, one object per argument list.

The algorithms themselves are the library's direct algorithms
(:mod:`arborcc.library.direct`); a communicator asks for one per call, and the plan
recognises the ones it selected by identity (:meth:`arborcc.runtime.plan.Plan.staged_kind`),
so the same arguments must give the same object.
"""

from __future__ import annotations

from arborcc.ir.model import Algorithm
from arborcc.library.direct import build_direct_algorithm
from arborcc.memo import BoundedCache

#: the direct algorithms built, by argument list
_BUILT = BoundedCache("runtime.direct.algorithms", 256, purpose="direct algorithms by argument list")


def direct_algorithm(collective: str, num_ranks: int, inplace: bool, root: int = 0,
                     owner: bool = False) -> Algorithm:
    """The direct algorithm of ``collective`` on ``num_ranks`` ranks
    (:func:`arborcc.library.direct.build_direct_algorithm`): the same object for the same
    arguments while it is among the last 256 built."""
    key = (collective, num_ranks, inplace, root, owner)
    algo = _BUILT.get(key)
    if algo is None:
        algo = build_direct_algorithm(collective, num_ranks, inplace, root, owner)
        _BUILT.put(key, algo)
    return algo
