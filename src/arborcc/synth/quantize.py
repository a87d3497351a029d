"""Turning fractional tree weights into whole chunks (issue: lowering, Blink section 4.1).

A packing gives each tree a rate; a program can only give each tree whole chunks of
the buffer. With ``C`` chunks per shard and ``c_t`` of them on tree ``t``, tree t
carries the fraction ``c_t / C`` of its shard, every link ``e`` carries
``sum_t (c_t / C) x share_t x uses_t(e)`` bytes per byte of S, and the rate is the
inverse of the worst ``load / bandwidth``. We look for the fewest chunks ``C`` whose
apportionment keeps the rate within ``tolerance`` of the target - few chunks mean few,
large transfers (Blink section 2.2). For each ``C`` we try largest remainders (Hamilton)
and a greedy rounding that gives each leftover chunk to the tree that raises the worst
link utilisation least, and keep the better.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

import arborcc.synth.native as native
from arborcc.errors import SynthesisError


#: how far below the packing's rate chunk rounding may go (the issue asks for 1%)
TOLERANCE = 0.005
#: chunk counts a tree algorithm may use: powers of two, since MSCCL runs an algorithm
#: only on buffers whose element count is a multiple of its chunks per loop
CHUNK_COUNTS = tuple(2 ** k for k in range(11))


@dataclass(frozen=True)
class Apportionment:
    """``counts[t]`` chunks out of ``chunks`` per shard for tree t; ``rate`` in B/s of S."""

    chunks: int
    counts: tuple[int, ...]
    rate: float


def largest_remainder(weights: Sequence[float], total: int) -> list[int]:
    """Integers summing to ``total`` proportional to ``weights`` (Hamilton's method)."""
    s = float(sum(weights))
    if s <= 0:
        raise SynthesisError("cannot apportion chunks to trees of zero total weight")
    exact = [w * total / s for w in weights]
    counts = [math.floor(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts


def _rate(counts, chunks: int, per_chunk: np.ndarray) -> float:
    """The rate with ``counts[t]`` chunks on tree t (``per_chunk``: see :func:`apportion`)."""
    worst = float((np.asarray(counts, dtype=float) @ per_chunk).max(initial=0.0)) / chunks
    return 1.0 / worst if worst > 0 else math.inf


def _greedy_counts(groups, weights, chunks: int, per_chunk: np.ndarray, members: np.ndarray,
                   starts: np.ndarray) -> list[int]:
    """Round every tree's ideal share down, then hand out the remaining chunks one at a
    time to the tree whose extra chunk raises the worst link utilisation least (ties:
    the heavier tree, then the earlier one; in compiled code, ``arborcc.synth.native``,
    csrc/rounding.cpp). ``members``, ``starts``: the groups laid end to end."""
    counts = [0] * len(weights)
    leftover = []
    for group in groups:
        total = float(sum(weights[t] for t in group))
        for t in group:
            counts[t] = math.floor(chunks * weights[t] / total)
        leftover.append(chunks - sum(counts[t] for t in group))
    step = per_chunk / chunks  # utilisation one more chunk of tree t adds to each link
    greedy = np.array(counts, dtype=np.int64)
    util = greedy.astype(float) @ step
    native.hand_out_chunks(members, starts, leftover, np.asarray(weights, dtype=float), step, greedy, util)
    return greedy.tolist()


def apportion(groups: Sequence[Sequence[int]], weights: Sequence[float], share: Sequence[float],
              uses: Sequence[Mapping[tuple[str, str], int]], capacity: Mapping[tuple[str, str], float],
              target_rate: float, tolerance: float = 0.01,
              candidates: Sequence[int] = tuple(range(1, 65))) -> Apportionment:
    """Fewest chunks per shard keeping ``rate >= (1 - tolerance) x target_rate``.

    ``groups``: tree indices per shard (one group for broadcast/reduce, one per root for
    all-gather/reduce-scatter); ``share[t]``: the fraction of S tree t's shard is;
    ``uses[t]``: how often tree t uses each link; ``weights``: the packing's rates.
    ``candidates``: the chunk counts allowed, tried in increasing order (MSCCL runs an
    algorithm only on buffers whose element count is a multiple of its chunks per loop,
    so callers pass powers of two). Returns the best candidate when none reaches the
    target.
    """
    links = sorted({l for u in uses for l in u})
    col = {l: i for i, l in enumerate(links)}
    # per_chunk[t, l]: utilisation of link l if tree t carried all of its shard
    per_chunk = np.zeros((len(weights), len(links)))
    entries = [(t, col[l], share[t] * k / capacity[l]) for t, u in enumerate(uses) for l, k in u.items()]
    if entries:
        rows, cols, values = zip(*entries)
        per_chunk[rows, cols] = values
    group_weights = [[weights[t] for t in group] for group in groups]
    members = np.array([t for group in groups for t in group], dtype=np.int64)
    starts = np.cumsum([0] + [len(group) for group in groups])
    best: Apportionment | None = None
    for chunks in sorted(candidates):
        counts = [0] * len(weights)
        for group, group_weight in zip(groups, group_weights):
            for t, c in zip(group, largest_remainder(group_weight, chunks)):
                counts[t] = c
        rate = _rate(counts, chunks, per_chunk)
        if rate < (1 - tolerance) * target_rate:
            greedy = _greedy_counts(groups, weights, chunks, per_chunk, members, starts)
            greedy_rate = _rate(greedy, chunks, per_chunk)
            if greedy_rate > rate:
                counts, rate = greedy, greedy_rate
        if best is None or rate > best.rate * (1 + 1e-12):
            best = Apportionment(chunks, tuple(counts), rate)
        if rate >= (1 - tolerance) * target_rate:
            return Apportionment(chunks, tuple(counts), rate)
    assert best is not None
    return best
