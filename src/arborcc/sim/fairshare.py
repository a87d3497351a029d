"""Max-min fair sharing of directed links among concurrent flows: the rule the
simulator's event loop applies whenever flows start or end (sim/csrc/engine.cpp, over
the compiled progressive filling of sim/csrc/fairshare.cpp), callable on its own.

Every flow crosses a set of links and may have its own rate cap (the thread block's
bandwidth); max-min fairness gives each flow the largest rate such that no flow can
go faster without slowing one that is no faster (progressive filling, Bertsekas &
Gallager, *Data Networks*, 2nd ed., 1992, section 6.5.2). The event loop recomputes
only the component of flows that share a link, directly or through other flows, with
the one that changed, once per instant however many flows started and ended in it.
"""

from __future__ import annotations

import arborcc.sim.native as native


class Flow:
    """One flow: its key, the links it crosses and its own rate cap."""

    __slots__ = ("key", "links", "cap")

    def __init__(self, key: int, links: tuple[int, ...], cap: float):
        self.key = key
        self.links = links
        self.cap = cap


def max_min_rates(flows: list[Flow], capacity: list[float]) -> dict[int, float]:
    """Progressive filling over ``flows`` (keyed by ``Flow.key``, no link twice in a flow)
    on links of the given capacities: repeatedly find the tightest constraint - a link's
    capacity left split evenly among its unfrozen flows, or a flow's own cap - and freeze
    the flows it binds (compiled: ``arborcc.sim.native.max_min_rates``)."""
    return dict(zip([f.key for f in flows], native.max_min_rates(flows, capacity)))
