"""Happens-before between steps of one rank, for the race check.

What orders two steps X (thread block A) and Y (thread block B) of the same rank -
i.e. guarantees that all memory accesses of X are over before an access of Y starts:

* program order: a thread block runs its steps one after another;
* a dependency: a step waits until the step it names has finished (the runtime
  waits for the target's semaphore to reach at least that step, so the named step is
  always finished, whichever later step released it);
* a communication edge from a send S to the receive R that pops its data: S has read
  all its data before R can finish. It does *not* order S before R's own accesses
  (R may read its local source while S is still sending), so an edge S -> R is weak:
  it carries order to what comes *after* R, not to R itself.

Hence X happens before Y when there is a path X -> ... -> Y whose last edge is
program order or a dependency (any edges before it). One refinement: a write made by
a receiving step Y carries received data, so it cannot begin before the matching
send S has begun; a path X -> ... -> S ending in a strong edge therefore also orders
X before the writes of Y. Nothing else orders steps; in particular two thread blocks
that merely both talk to other ranks are unordered. This is sound: every pair called
ordered is ordered in every execution the runtime can produce.

Checking is in two stages. While the values are followed each conflicting pair is
first tried against what program order and dependencies alone order before the later
step (:meth:`HappensBefore.known`: a bitset of the rank's steps, updated once per
executed dependency; exact for rank-local order, one lookup per pair). Pairs it cannot
order become *candidates*; afterwards the compiled run answers all of them at once
(:func:`ordered_through_ranks`: ``ordered_through_ranks`` of
``verify/csrc/races.cpp``), replaying its completion order while propagating, along
every edge, vector clocks restricted to the thread blocks that appear as the earlier
side of a candidate (a path X -> Y implies X finished first in every execution, in
particular in the symbolic one, so completion order is a topological order of the
edges).
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from typing import NamedTuple

import arborcc.verify.native as native


class Candidate(NamedTuple):
    """A conflicting pair not ordered by rank-local edges; ``y_received``: y's access is
    a write carrying received data."""

    x: int
    y: int
    y_received: bool
    addr: int
    x_writes: bool
    y_writes: bool


class HappensBefore:
    """Rank-local ordering of a run, identified by global step ids (gids): the values'
    walk (:mod:`arborcc.verify.symbolic`) calls :meth:`on_dependency` when a step with
    a dependency runs."""

    def __init__(self, tb_base: list[int], tb_rank: list[int]):
        self.tb_base = tb_base
        self.tb_rank = tb_rank
        ntb = len(tb_rank)
        self.gid_tb = array("i")
        for g in range(ntb):
            self.gid_tb.extend([g] * (tb_base[g + 1] - tb_base[g]))
        # what a step knows is a bitset over the steps of its rank: gids are numbered
        # rank by rank, so bit ``gid - rank_gid0[tb]`` stands for step ``gid``
        first: dict[int, int] = {}
        for g, r in enumerate(tb_rank):
            first.setdefault(r, tb_base[g])
        self.rank_gid0 = [first[r] for r in tb_rank]
        # change points per thread block: step indices and what is known from there on
        self._cp_idx: list[list[int]] = [[] for _ in range(ntb)]
        self._cp_known: list[list[int]] = [[] for _ in range(ntb)]

    # -- happens-before over rank-local edges -----------------------------------------
    def known(self, g: int, i: int) -> int:
        """The steps of the rank that dependencies order before step ``i`` of thread block
        ``g`` (directly or through other thread blocks), as a bitset (see ``rank_gid0``).

        It is a union of prefixes of thread blocks (a step is over only after the earlier
        ones of its thread block) and changes only at steps with a dependency.
        """
        idx = self._cp_idx[g]
        if not idx:
            return 0
        pos = bisect_right(idx, i) - 1
        return self._cp_known[g][pos] if pos >= 0 else 0

    def on_dependency(self, g: int, i: int, tg: int, k: int) -> None:
        """Step ``i`` of tb ``g`` waits for step ``k`` of tb ``tg``: it knows what that step
        knows, and that step and the ones before it."""
        mine = self.known(g, i)
        steps = ((2 << k) - 1) << (self.tb_base[tg] - self.rank_gid0[tg])
        now = mine | self.known(tg, k) | steps
        if now != mine:
            self._cp_idx[g].append(i)
            self._cp_known[g].append(now)

    def ordered_locally(self, x: int, y: int) -> bool:
        """Is step ``x`` before step ``y`` by program order and dependencies alone?"""
        a = self.gid_tb[x]
        b = self.gid_tb[y]
        if a == b:
            return x < y
        return bool(self.known(b, y - self.tb_base[b]) >> (x - self.rank_gid0[a]) & 1)


class ConflictLog:
    """The conflicting access pairs of a run that rank-local order does not settle.

    They become :class:`Candidate` s for :func:`resolve_candidates`, each pair
    ``(x, y, y_received)`` once (with the first slot it was found on), at most ``limit``.
    """

    def __init__(self, hb: HappensBefore, limit: int):
        self.gid_tb = hb.gid_tb
        self._ordered_locally = hb.ordered_locally
        self.limit = limit
        self.candidates: list[Candidate] = []
        self._seen: set[tuple[int, int, bool]] = set()

    def check(self, prev: int, gid: int, addr: int, prev_writes: bool, writes: bool, received: bool) -> None:
        """Step ``prev`` accessed slot ``addr`` before step ``gid`` of another thread block
        does, one of them writing: keep the pair unless program order and dependencies
        already order it."""
        if self._ordered_locally(prev, gid):
            return
        key = (prev, gid, received)
        if key not in self._seen and len(self.candidates) < self.limit:
            self._seen.add(key)
            self.candidates.append(Candidate(prev, gid, received, addr, prev_writes, writes))


def ordered_through_ranks(program, run, candidates: list[Candidate]) -> list[bool]:
    """For each candidate of the compiled symbolic run ``run`` of ``program`` (a
    ``native.Program``): is x ordered before y's access through any path? (see module)"""
    if not candidates:
        return []
    return native.ordered_through_ranks(program, run, [c.x for c in candidates], [c.y for c in candidates],
                                        [c.y_received for c in candidates])
