"""The compiled progressive filling (``arborcc.sim.native``, sim/csrc/fairshare.cpp) gives
the rates of the Python code it replaced, bit for bit: that code is kept here as the
oracle, and random links and flows - ties, zero capacities, capped and uncapped flows -
must come out the same."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

import arborcc.sim.native as native
from arborcc.sim.fairshare import Flow

#: few distinct values, so that links and caps tie often
VALUES = [0.0, 0.1, 0.3, 1.0, 3.0, 12.5e9, 25e9, 100e9]


def reference_max_min_rates(flows: list[Flow], capacity: list[float]) -> dict[int, float]:
    """Progressive filling as the simulator computed it in Python."""
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


def bits(rates: list[float]) -> list[str]:
    """The rates to the bit (so 0.0 and -0.0 differ)."""
    return [r.hex() for r in rates]


capacity = st.one_of(st.sampled_from(VALUES), st.floats(0.0, 1e11))
caps = st.one_of(st.just(math.inf), st.sampled_from(VALUES), st.floats(0.0, 1e11))


@st.composite
def links_and_flows(draw, links: tuple[int, int] = (1, 6), flows: tuple[int, int] = (1, 12),
                    path: int | None = None):
    """Link capacities and flows (a number of each in the ranges given; ``path``: the most
    links a flow crosses, None for any number)."""
    capacities = draw(st.lists(capacity, min_size=links[0], max_size=links[1]))
    out = []
    for key in draw(st.permutations(range(draw(st.integers(*flows))))):  # keys out of order: the order is the list's
        crossed = draw(st.lists(st.integers(0, len(capacities) - 1), min_size=1, max_size=path or len(capacities),
                                unique=True))
        out.append(Flow(key, tuple(crossed), draw(caps)))
    return capacities, out


@settings(max_examples=300, deadline=None)
@given(links_and_flows())
def test_compiled_progressive_filling_equals_the_python_rates_bit_for_bit(case):
    capacity, flows = case
    expected = reference_max_min_rates(flows, capacity)
    assert bits(native.max_min_rates(flows, capacity)) == bits([expected[f.key] for f in flows])


@settings(max_examples=100, deadline=None)
@given(links_and_flows(links=(20, 60), flows=(20, 150), path=4))
def test_large_components_get_the_python_rates_bit_for_bit(case):
    """Components of up to 60 links and 150 flows: the compiled code looks for the
    tightest link in blocks of links, and these span several."""
    capacity, flows = case
    expected = reference_max_min_rates(flows, capacity)
    assert bits(native.max_min_rates(flows, capacity)) == bits([expected[f.key] for f in flows])


def test_the_first_link_to_tie_binds_first():
    """Links 0 and 1 tie at 1/3 per flow (to the bit); link 0, seen first, freezes flows
    0-2 at 1/3 and flow 3 gets what is left of link 1. Had link 1 gone first, flows 0 and
    1 would get (1 - 1/3) / 2, one unit in the last place more."""
    flows = [Flow(0, (0,), math.inf), Flow(1, (0,), math.inf),
             Flow(2, (0, 1), math.inf), Flow(3, (1,), math.inf)]
    capacity = [1.0, 2.0 / 3.0]
    rates = native.max_min_rates(flows, capacity)
    assert rates[:3] == [1.0 / 3.0] * 3
    assert rates[3] == max(0.0, 2.0 / 3.0 - 1.0 / 3.0)
    assert bits(rates) == bits([reference_max_min_rates(flows, capacity)[k] for k in range(4)])


def test_the_first_link_to_tie_binds_first_across_blocks_of_links():
    """The same tie with 16 links between the two (each with one flow of its own that
    binds last): the compiled search keeps each block of 16 links' tightest link, and the
    tie still goes to the link seen first, in the first block."""
    fillers = [Flow(2 + k, (1 + k,), math.inf) for k in range(16)]
    flows = [Flow(0, (0,), math.inf), Flow(1, (0,), math.inf), *fillers,
             Flow(18, (0, 17), math.inf), Flow(19, (17,), math.inf)]
    capacity = [1.0] + [100.0] * 16 + [2.0 / 3.0]
    rates = native.max_min_rates(flows, capacity)
    assert rates[:2] + rates[-2:-1] == [1.0 / 3.0] * 3
    assert rates[-1] == max(0.0, 2.0 / 3.0 - 1.0 / 3.0)
    expected = reference_max_min_rates(flows, capacity)
    assert bits(rates) == bits([expected[f.key] for f in flows])


def test_a_flow_that_lists_a_link_twice_is_refused():
    with pytest.raises(ValueError, match="link 0 twice"):
        native.max_min_rates([Flow(0, (0, 0), math.inf)], [1.0])


def test_a_link_without_a_capacity_is_refused():
    with pytest.raises(IndexError, match="link 2"):
        native.max_min_rates([Flow(0, (0, 2), math.inf)], [1.0, 1.0])


def test_a_cap_that_is_not_a_number_is_refused():
    with pytest.raises(ValueError, match="NaN"):
        native.max_min_rates([Flow(0, (0,), math.nan)], [1.0])
