"""The search for a version of a lowering within the runtimes' limits.

A lowering (:mod:`.lower_emit`, and those of :mod:`.gather`, :mod:`.composed`,
:mod:`.three_phase`) is built in versions - pipelining rounds, fused or not, the trees
spread over more channels - and the first version within the dialect's limits and free
of deadlock is kept (:func:`within_limits`), with as many more rounds as its longest
thread block leaves room for (:func:`more_rounds`).
"""

from __future__ import annotations

import math
from functools import partial

from arborcc.synth.lower_emit import Lowered
from arborcc.synth.lower_memo import SEARCHED, one_search, search_key

#: transfers per tree block the tree lowerings try, most first (:func:`~.lower_blocks.transfer_blocks`):
#: 8 rounds keep a tree of depth d at about 8 / (8 + d) of its rate (Blink section 4.2)
PIPELINE_ROUNDS = (8, 4, 2, 1)


def within_limits(lower, *args, dialect: str = "executor", takes_rounds: bool = False,
                  takes_fuse: bool = False, timed_at: int | None = None) -> Lowered:
    """Lower with the compiler's channel choice; if that breaks ``dialect``'s runtime
    limits (steps per thread block, thread blocks per rank), spread the trees over 2, 4,
    ... 32 channels and keep the first version within the limits. ``lower(*args,
    spread=...)`` builds a version; ``takes_rounds``: it also takes ``rounds`` (the tree
    lowerings), and is tried with :data:`PIPELINE_ROUNDS` rounds per tree block, most
    first; ``takes_fuse``: it also takes ``fuse``, and is tried fused and then unfused:
    the first with a version within the limits wins. A version that would deadlock
    (:func:`arborcc.verify.pieces.deadlock_free`: instruction fusion can chain trees
    into a cycle of full FIFOs, and long steps deadlock once the runtime cuts them
    into pieces), or that the compiler only kept free of deadlock by falling back
    (:attr:`~.lower_emit.Lowered.pieces_fallback`), counts as not fitting. When none fits, the version closest to the
    limits is returned with a note saying so (the verifier reports the violations,
    and ``--dialect legacy`` has no such limits). The version returned carries the
    search's verdict on ``dialect``'s limits (:attr:`~.lower_emit.Lowered.limits`),
    which the strategy cascade reads instead of checking again.

    ``timed_at`` (bytes; the tree lowerings, which take ``copies_rule``): where the
    version found cut the trees into copies and other rules of
    :func:`~.lower_channels.balanced_copies` cut them differently (evened out, or one
    copy per tree), the search runs again with each, and the version whose file the
    simulator times fastest at that size is kept (DGX-1V GPUs 0,1,2,5,6,7, the
    all-reduce on the same trees at 1 GiB: 25,009 us with the most copies, 22,562
    evened out; GPUs 0,1,2,4, the broadcast: 21,471 with the most, 24,342 evened out;
    the 8-GPU broadcast: 9,368 with the most, 8,963 in one copy each).

    Each version is a lowering and a compile, so versions that cannot fit are not
    built: spreading stops once a rank has more thread blocks than allowed at a spread
    of 2 or more (spreading further only adds thread blocks; the per-tree channels of
    spread 0 may use more than spread 2) or two more spreads in a row brought it no
    closer; a spread that would have to cut the largest thread block by more than half per
    doubling of channels is skipped (on every DGX-1, DGX A100 and H100 topology and
    DGX-1V allocation tried, no doubling cut it by more while over the limit); and
    the unfused version is not built when the fused one fused nothing (they are the
    same program)."""
    with one_search():
        found = _searched(lower, args, dialect, takes_rounds, takes_fuse)
        if timed_at is None or not found.other_copies:
            return found
        others = [_searched(partial(lower, copies_rule=rule), args, dialect, takes_rounds, takes_fuse)
                  for rule in found.other_copies]
    return min((found, *others), key=lambda v: _time_as_written(v, args[0], timed_at))


def _searched(lower, args, dialect: str, takes_rounds: bool, takes_fuse: bool) -> Lowered:
    """:func:`_search_versions`, once per search inside
    :func:`~.lower_memo.remembering_searches` (a sweep over sizes); each caller gets its
    own :class:`~.lower_emit.Lowered` (its notes are added to)."""
    from dataclasses import replace

    keyed = search_key(lower, args, (dialect, takes_rounds, takes_fuse)) if SEARCHED.table is not None else None
    found = None if keyed is None else SEARCHED.get_for_each(*keyed)
    if found is None:
        found = _search_versions(lower, args, dialect, takes_rounds, takes_fuse)
        if keyed is not None:
            SEARCHED.put_for_each(keyed[0], found, keyed[1])
    return replace(found, notes=list(found.notes))


def _time_as_written(lowered: Lowered, topology, size: int) -> float:
    """The simulated time of ``lowered``'s file at ``size`` (a version over the limits:
    infinite, after every version within them)."""
    from arborcc.sim.protocol_choice import time_as_written

    fits = lowered.limits is not None and lowered.limits[1]
    return time_as_written(lowered.algorithm, topology, size) if fits else math.inf


#: the share of the dialect's steps per thread block :func:`more_rounds` aims at (the
#: steps grow a little faster than the rounds where chunk ranges split unevenly)
ROUNDS_HEADROOM = 0.9
#: the most rounds :func:`more_rounds` tries, and how many times it raises them
MAX_ROUNDS, ROUND_RAISES = 64, 2


def more_rounds(lower, args, fitting: Lowered, rounds: int, spread: int, fuse, dialect: str) -> tuple[Lowered, int]:
    """``fitting`` (a version with ``rounds`` rounds within ``dialect``'s limits) with
    as many more rounds as its longest thread block leaves room for: the steps per
    thread block grow about in proportion to the rounds, so ``rounds x limit / steps``
    (with :data:`ROUNDS_HEADROOM`) is tried at the same spread and fusion, up to
    :data:`ROUND_RAISES` times; the last version within the limits and free of deadlock
    is returned with its rounds.

    Rounds are the pipelining depth: a relay whose receive and send are on different
    thread blocks, a root that broadcasts what it reduced and a rank that reduces
    several children's data into one slot wait for a whole step of the step they
    depend on, so every tree level holds a round back; with k rounds that costs about
    1/k of a tree's block per level. The fixed 8 rounds left most of the runtimes'
    64 steps per thread block unused (16 on DGX-1V GPUs 1,4,5,6, simulated 57.8 GB/s
    busbw at 1 GiB; 59 steps with 64 rounds, 61.3 GB/s)."""
    from arborcc.ir.limits import check_dialect_limits, dialect_limits
    from arborcc.verify.pieces import deadlock_free

    limit = dialect_limits(dialect).max_steps_per_threadblock
    extra = {"fuse": fuse} if fuse is not None else {}
    for _ in range(ROUND_RAISES):
        steps = max((len(tb.steps) for r in fitting.algorithm.ranks for tb in r.threadblocks), default=0)
        more = min(MAX_ROUNDS, int(rounds * limit * ROUNDS_HEADROOM / max(1, steps)))
        if more <= rounds:
            break
        lowered = lower(*args, spread=spread, rounds=more, **extra)
        longest = max((len(tb.steps) for r in lowered.algorithm.ranks for tb in r.threadblocks), default=0)
        if longest <= steps:
            break  # no tree block has more chunks than it already had transfers
        if (check_dialect_limits(lowered.algorithm, dialect) or lowered.pieces_fallback
                or not deadlock_free(lowered.algorithm)):
            break
        lowered.limits = (dialect, True)
        fitting, rounds = lowered, more
    return fitting, rounds


def _search_versions(lower, args, dialect: str, takes_rounds: bool, takes_fuse: bool) -> Lowered:
    """:func:`within_limits`' search over the versions."""
    from arborcc.ir.limits import check_dialect_limits, dialect_limits
    from arborcc.verify.pieces import deadlock_free

    lim = dialect_limits(dialect)

    def overflow(algo) -> tuple[float, float]:
        steps = max((len(tb.steps) for r in algo.ranks for tb in r.threadblocks), default=0)
        tbs = max((len(r.threadblocks) for r in algo.ranks), default=0)
        return steps / lim.max_steps_per_threadblock, tbs / lim.max_threadblocks_per_rank

    best, best_over = None, None
    variants = [(rounds, fuse) for rounds in (PIPELINE_ROUNDS if takes_rounds else (None,))
                for fuse in ((True, False) if takes_fuse else (None,))]
    fused_nothing: set[int | None] = set()  # rounds whose fused versions fused no step
    for rounds, fuse in variants:
        if fuse is False and rounds in fused_nothing:
            continue
        extra = {k: v for k, v in (("rounds", rounds), ("fuse", fuse)) if v is not None}
        stale, variant_best, skip, fused = 0, None, 0, False
        for spread in (0, 2, 4, 8, 16, 32):
            if skip:
                skip -= 1
                continue
            lowered = lower(*args, spread=spread, **extra)
            lowered.limits = (dialect, not check_dialect_limits(lowered.algorithm, dialect))
            if lowered.limits[1] and not lowered.pieces_fallback and deadlock_free(lowered.algorithm):
                if rounds:
                    lowered, rounds = more_rounds(lower, args, lowered, rounds, spread, fuse, dialect)
                if spread:
                    lowered.notes.append(f"trees spread over {spread} channels to meet the {dialect} runtime's "
                                         "limits without deadlock")
                if rounds and rounds > 1:
                    lowered.notes.append(f"every tree's block in {rounds} pipelined transfers per hop")
                if fuse is False:
                    lowered.notes.append("relays not fused: the fused chains would deadlock")
                return lowered
            fused = fused or lowered.pieces_unfused > 0 or any(
                st.op.sends and st.op.receives for r in lowered.algorithm.ranks
                for tb in r.threadblocks for st in tb.steps)  # rcs, rrs, rrcs
            steps_over, tbs_over = overflow(lowered.algorithm)
            over = max(steps_over, tbs_over)
            stale = stale + 1 if variant_best is not None and over > 0.9 * variant_best else 0
            variant_best = over if variant_best is None else min(variant_best, over)
            if best is None or over < best_over:
                best, best_over = lowered, over
            if stale == 2 or (spread and tbs_over > 1):
                break  # two more spreads did not help, or more spread only adds thread blocks
            while steps_over / 2 ** (skip + 1) > 1:
                skip += 1
        if fuse is True and not fused:
            fused_nothing.add(rounds)
    best.notes.append(f"exceeds the {dialect} runtime's limits even spread over channels "
                      f"({best_over:.2f}x the largest allowed thread block or rank)")
    return best
