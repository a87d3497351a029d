"""Chunk rounding (:mod:`arborcc.synth.quantize`): largest remainders, the greedy
hand-out against the statement it implements (ties included), and apportion's choice
of the fewest chunks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import arborcc.synth.native as native
from arborcc.errors import SynthesisError
from arborcc.synth.quantize import apportion, largest_remainder


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0.01, 100.0), min_size=1, max_size=8), st.integers(1, 300))
def test_largest_remainder_sums_and_stays_within_one_of_the_quota(weights, total):
    counts = largest_remainder(weights, total)
    assert sum(counts) == total
    s = sum(weights)
    for w, c in zip(weights, counts):
        assert abs(c - w * total / s) < 1


def test_largest_remainder_rejects_zero_weight():
    with pytest.raises(SynthesisError):
        largest_remainder([0.0, 0.0], 4)


def _hand_out_reference(groups, weights, leftover, step, counts, util):
    """The greedy step as stated: for each leftover chunk, the least (utilisation after
    the extra chunk over the links the tree uses, -weight, position in the group)."""
    for group, left in zip(groups, leftover):
        for _ in range(left):
            after = [max([0.0] + [util[l] + step[t, l] for l in range(step.shape[1]) if step[t, l] > 0])
                     for t in group]
            pick = min(zip(after, [-weights[t] for t in group], range(len(group))))[2]
            t = group[pick]
            counts[t] += 1
            util += step[t]


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 4), st.integers(1, 6), st.integers(0, 6), st.integers(0, 2**32 - 1))
def test_native_hand_out_matches_the_greedy_statement(num_groups, links, most_left, seed):
    # small integers make many ties in utilisation and weight: the winner must be the
    # one the statement picks
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 5, num_groups)
    groups = np.split(np.arange(sizes.sum()), np.cumsum(sizes)[:-1])
    trees = int(sizes.sum())
    weights = rng.integers(1, 3, trees).astype(float)
    step = rng.integers(0, 3, (trees, links)).astype(float) / 4
    leftover = rng.integers(0, most_left + 1, num_groups).tolist()
    counts, util = rng.integers(0, 3, trees), rng.integers(0, 3, links).astype(float) / 4
    want_counts, want_util = counts.copy(), util.copy()
    _hand_out_reference([g.tolist() for g in groups], weights, leftover, step, want_counts, want_util)
    starts = np.cumsum([0] + sizes.tolist())
    native.hand_out_chunks(np.concatenate(groups), starts, leftover, weights, step, counts, util)
    assert counts.tolist() == want_counts.tolist()
    assert np.array_equal(util, want_util)


def test_native_hand_out_rejects_inconsistent_groups():
    step = np.ones((2, 1))
    with pytest.raises(ValueError):
        native.hand_out_chunks([0, 1], [0, 1], [1], np.ones(2), step, np.zeros(2, dtype=np.int64), np.zeros(1))
    with pytest.raises(ValueError):
        native.hand_out_chunks([0, 5], [0, 2], [1], np.ones(2), step, np.zeros(2, dtype=np.int64), np.zeros(1))


def _two_links():
    # two trees sharing one shard: tree 0 on link a, tree 1 on link b (b half as fast)
    uses = [{("x", "a"): 1}, {("x", "b"): 1}]
    capacity = {("x", "a"): 2.0, ("x", "b"): 1.0}
    return [[0, 1]], [2.0, 1.0], [1.0, 1.0], uses, capacity


def test_apportion_takes_the_fewest_chunks_within_tolerance():
    groups, weights, share, uses, capacity = _two_links()
    # no power of two reaches 99% of rate 3 (1 or 2 chunks: rate 2; 4 or 8: 8/3): the
    # first count at the best rate is kept
    a = apportion(groups, weights, share, uses, capacity, 3.0, tolerance=0.01, candidates=(1, 2, 4, 8))
    assert (a.chunks, a.counts) == (4, (3, 1)) and a.rate == pytest.approx(8 / 3)
    exact = apportion(groups, weights, share, uses, capacity, 3.0, tolerance=0.0, candidates=(3,))
    assert exact.counts == (2, 1) and exact.rate == pytest.approx(3.0)
    assert apportion(groups, weights, share, uses, capacity, 3.0, tolerance=0.01, candidates=(3, 6)).chunks == 3


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([1, 2, 4, 8, 16, 32]))
def test_apportion_counts_fill_every_group(seed, chunks):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 4, rng.integers(1, 4))
    groups = np.split(np.arange(sizes.sum()), np.cumsum(sizes)[:-1])
    trees = int(sizes.sum())
    links = [("n", str(i)) for i in range(4)]
    uses = [{l: int(k) for l, k in zip(links, rng.integers(0, 3, 4)) if k} or {links[0]: 1} for _ in range(trees)]
    a = apportion([g.tolist() for g in groups], rng.random(trees) + 0.1, [1.0 / len(groups)] * trees, uses,
                  {l: 1.0 for l in links}, 1e12, tolerance=0.0, candidates=(chunks,))
    assert a.chunks == chunks
    for g in groups:
        assert sum(a.counts[t] for t in g) == chunks
