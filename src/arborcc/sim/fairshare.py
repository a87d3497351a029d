"""Max-min fair sharing of directed links among concurrent flows, kept up to date as
flows start and end.

Every flow crosses a set of links and may have its own rate cap (the thread block's
bandwidth); max-min fairness gives each flow the largest rate such that no flow can
go faster without slowing one that is no faster (progressive filling, Bertsekas &
Gallager, *Data Networks*, 2nd ed., 1992, section 6.5.2).

Only a start or an end changes rates, and only for the flows that share a link with
the changed one, directly or through other flows: :class:`FairShare` recomputes those
components alone, once per instant however many flows started and ended in it, so a change costs time in the size of its component, not in the
number of flows in the system. Remaining bytes are advanced lazily (each flow keeps
the time its rate was last set).

The component walk and its rates run in compiled code (``arborcc.sim.native``,
csrc/fairshare.cpp): the same walk order, comparisons and floating-point operations as
the Python they replaced (kept as the oracle of tests/sim/test_fairshare_native.py), so
every simulated time is the same to the bit.
"""

from __future__ import annotations

import math

import arborcc.sim.native as native


class Flow:
    """One active transfer: bytes left at ``since``, the rate since then, its links."""

    __slots__ = ("key", "remaining", "rate", "since", "links", "cap", "due")

    def __init__(self, key: int, nbytes: float, links: tuple[int, ...], cap: float, now: float):
        self.key = key
        self.remaining = nbytes
        self.rate = 0.0
        self.since = now
        self.links = links
        self.cap = cap
        self.due: float | None = None  #: the time of the finish event its user has queued (the engine)

    def finish_time(self) -> float:
        return self.since + self.remaining / self.rate if self.rate > 0 else math.inf


def max_min_rates(flows: list[Flow], capacity: list[float]) -> dict[int, float]:
    """Progressive filling over ``flows`` (keyed by ``Flow.key``, no link twice in a flow)
    on links of the given capacities: repeatedly find the tightest constraint - a link's
    capacity left split evenly among its unfrozen flows, or a flow's own cap - and freeze
    the flows it binds (compiled: ``arborcc.sim.native.max_min_rates``)."""
    return dict(zip([f.key for f in flows], native.max_min_rates(flows, capacity)))


class FairShare:
    """The active flows on the links whose sharing can bind (see module doc).

    :meth:`start` and :meth:`end` record changes; :meth:`settle` recomputes the rates
    they affect and returns the flows whose rate changed, so their expected finish
    can be rescheduled.
    """

    def __init__(self, capacity: list[float], log: list | None = None):
        self.capacity = capacity
        self.flows: dict[int, Flow] = {}
        self.on_link: dict[int, set[int]] = {}
        self.log = log  #: if a list: (key, start, end, rate) of every finished rate period
        self.dirty: set[int] = set()  #: links whose flows changed since the last settle
        self.wide: dict[int, int] = {}  #: per link, its flows that cross other links too
        self.caps: set[float] = set()  #: the caps of every flow so far (the engine gives all one)
        self.common: float | None = None  #: the one cap of every flow so far, None if they differ

    def _close(self, f: Flow, now: float) -> None:
        if self.log is not None and f.rate > 0 and now > f.since:
            self.log.append((f.key, f.since, now, f.rate))

    def settle(self, now: float) -> list[Flow]:
        """Recompute the rates of every component touched since the last call; the
        flows whose rate changed (new flows included) are returned, so their expected
        finish can be rescheduled. Starts and ends at one
        instant are settled together, which saves the churn of a flow ending and its
        successor on the same connection starting at once."""
        dirty = self.dirty
        if not dirty:
            return []
        changed: list[Flow] = []
        seen: set[int] | None = None  #: the links of the components settled so far
        flows_by_key, on_link, wide, capacity, common = self.flows, self.on_link, self.wide, self.capacity, self.common
        for l in sorted(dirty) if len(dirty) > 1 else dirty:
            if seen is not None and l in seen:
                continue
            on = on_link.get(l)
            if not on:
                continue
            if not wide.get(l):  # every flow here crosses this link only
                flows = [flows_by_key[k] for k in on]
                share = capacity[l] / len(flows)
                # an even split, or every flow at its cap when all caps are equal and below
                # the split (the engine gives every flow the thread block's cap)
                if common is not None:
                    rate: float | None = share if common >= share else common
                else:
                    low = min([f.cap for f in flows])
                    rate = share if low >= share else low if all(f.cap == low for f in flows) else None
                if rate is not None:
                    for f in flows:
                        if f.rate != rate:
                            if self.log is not None:
                                self._close(f, now)
                            left = f.remaining - f.rate * (now - f.since)  # _set, inline
                            f.remaining = left if left > 0.0 else 0.0
                            f.since = now
                            f.rate = rate
                            changed.append(f)
                    continue
            if seen is None:
                seen = set()
            # the component of flows l reaches, its links into seen, its rates (compiled)
            for f, rate in native.settle_component(l, on_link, flows_by_key, capacity, seen):
                self._set(f, rate, now)
                changed.append(f)
        self.dirty.clear()
        return changed

    def _set(self, f: Flow, rate: float, now: float) -> None:
        if self.log is not None:
            self._close(f, now)
        f.remaining = max(0.0, f.remaining - f.rate * (now - f.since))
        f.since = now
        f.rate = rate

    def start(self, now: float, key: int, nbytes: float, links: tuple[int, ...], cap: float) -> None:
        """A flow of ``nbytes`` over ``links`` starts (its rate is set by :meth:`settle`)."""
        self.flows[key] = Flow(key, nbytes, links, cap, now)
        if cap not in self.caps:
            self.caps.add(cap)
            self.common = cap if len(self.caps) == 1 else None
        on_link = self.on_link
        if len(links) == 1:
            l = links[0]
            on = on_link.get(l)
            if on is None:
                on_link[l] = {key}
            else:
                on.add(key)
            self.dirty.add(l)
            return
        for l in links:
            on_link.setdefault(l, set()).add(key)
            self.wide[l] = self.wide.get(l, 0) + 1
        self.dirty.update(links)

    def end(self, now: float, key: int) -> None:
        """Flow ``key`` has delivered its last byte."""
        f = self.flows.pop(key)
        if self.log is not None:
            self._close(f, now)
        links = f.links
        if len(links) == 1:
            l = links[0]
            self.on_link[l].discard(key)
            self.dirty.add(l)
            return
        for l in links:
            self.on_link[l].discard(key)
            self.wide[l] -= 1
        self.dirty.update(links)

    def current(self, key: int) -> Flow | None:
        return self.flows.get(key)
