"""Max-min fair sharing of directed links among concurrent flows, kept up to date as
flows start and end.

Every flow crosses a set of links and may have its own rate cap (the thread block's
bandwidth); max-min fairness gives each flow the largest rate such that no flow can
go faster without slowing one that is no faster (progressive filling, Bertsekas &
Gallager, *Data Networks*, 2nd ed., 1992, section 6.5.2).

Only a start or an end changes rates, and only for the flows that share a link with
the changed one, directly or through other flows: :class:`FairShare` recomputes that
component alone, so a change costs time in the size of its component, not in the
number of flows in the system. Remaining bytes are advanced lazily (each flow keeps
the time its rate was last set).
"""

from __future__ import annotations

import math


class Flow:
    """One active transfer: bytes left at ``since``, the rate since then, its links."""

    __slots__ = ("key", "remaining", "rate", "since", "links", "cap", "version")

    def __init__(self, key: int, nbytes: float, links: tuple[int, ...], cap: float, now: float):
        self.key = key
        self.remaining = nbytes
        self.rate = 0.0
        self.since = now
        self.links = links
        self.cap = cap
        self.version = 0

    def finish_time(self) -> float:
        return self.since + self.remaining / self.rate if self.rate > 0 else math.inf


def max_min_rates(flows: list[Flow], capacity: list[float]) -> dict[int, float]:
    """Progressive filling over ``flows`` (keyed by ``Flow.key``) on links of the given
    capacities: repeatedly find the tightest constraint - a link's capacity left split
    evenly among its unfrozen flows, or a flow's own cap - and freeze the flows it binds."""
    left: dict[int, float] = {}
    users: dict[int, list[Flow]] = {}
    for f in flows:
        for l in f.links:
            if l not in users:
                users[l] = []
                left[l] = capacity[l]
            users[l].append(f)
    count = {l: len(u) for l, u in users.items()}
    rates: dict[int, float] = {}
    open_flows = sorted(flows, key=lambda f: f.cap)
    while open_flows:
        share, tight = math.inf, None
        for l, k in count.items():
            if k:
                s = left[l] / k
                if s < share:
                    share, tight = s, l
        capped = open_flows[0].cap
        if capped <= share:
            frozen = [f for f in open_flows if f.cap <= capped]
            level = capped
        else:
            frozen = [f for f in users[tight] if f.key not in rates]  # type: ignore[index]
            level = share
        for f in frozen:
            rates[f.key] = level
            for l in f.links:
                left[l] = max(0.0, left[l] - level)
                count[l] -= 1
        done = {f.key for f in frozen}
        open_flows = [f for f in open_flows if f.key not in done]
    return rates


class FairShare:
    """The active flows on the links whose sharing can bind (see module doc).

    :meth:`start` and :meth:`end` return the flows whose rate changed, with their new
    expected finish times; their ``version`` is bumped so stale finish events can be
    recognised and dropped.
    """

    def __init__(self, capacity: list[float], log: list | None = None):
        self.capacity = capacity
        self.flows: dict[int, Flow] = {}
        self.on_link: dict[int, set[int]] = {}
        self.log = log  #: if a list: (key, start, end, rate) of every finished rate period

    def _close(self, f: Flow, now: float) -> None:
        if self.log is not None and f.rate > 0 and now > f.since:
            self.log.append((f.key, f.since, now, f.rate))

    def _component(self, links: tuple[int, ...]) -> list[Flow]:
        seen_links, seen_flows = set(links), set()
        todo = list(links)
        out = []
        while todo:
            l = todo.pop()
            for k in self.on_link.get(l, ()):
                if k in seen_flows:
                    continue
                seen_flows.add(k)
                f = self.flows[k]
                out.append(f)
                for m in f.links:
                    if m not in seen_links:
                        seen_links.add(m)
                        todo.append(m)
        return out

    def _rebalance(self, now: float, links: tuple[int, ...]) -> list[Flow]:
        component = self._component(links)
        if not component:
            return []
        rates = max_min_rates(component, self.capacity)
        changed = []
        for f in component:
            new = rates[f.key]
            if new != f.rate:
                self._close(f, now)
                f.remaining = max(0.0, f.remaining - f.rate * (now - f.since))
                f.since = now
                f.rate = new
                f.version += 1
                changed.append(f)
        return changed

    def start(self, now: float, key: int, nbytes: float, links: tuple[int, ...], cap: float) -> list[Flow]:
        f = Flow(key, nbytes, links, cap, now)
        self.flows[key] = f
        for l in links:
            self.on_link.setdefault(l, set()).add(key)
        return self._rebalance(now, links)

    def end(self, now: float, key: int) -> list[Flow]:
        f = self.flows.pop(key)
        self._close(f, now)
        for l in f.links:
            self.on_link[l].discard(key)
        return self._rebalance(now, f.links)

    def current(self, key: int) -> Flow | None:
        return self.flows.get(key)
