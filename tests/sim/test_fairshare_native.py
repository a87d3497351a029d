"""The compiled fair share (``arborcc.sim.native``, sim/csrc/fairshare.cpp) gives the
rates of the Python code it replaced, bit for bit: that code is kept here as the oracle
(progressive filling, the single-link rule, and FairShare's walk of the component a
changed link reaches), and random links and flows - ties, zero capacities, capped and
uncapped flows, sets with a history of adds and removals - must come out the same."""

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


def reference_one_link_rates(flows: list[Flow], capacity: float) -> dict[int, float]:
    """The rates when every flow crosses the same single link, as the simulator computed them."""
    if all(f.cap == math.inf for f in flows):
        share = capacity / len(flows)
        return {f.key: share for f in flows}
    rates = {}
    left, todo = capacity, sorted(flows, key=lambda f: f.cap)
    for i, f in enumerate(todo):
        share = left / (len(todo) - i)
        rate = min(f.cap, share)
        rates[f.key] = rate
        left -= rate
    return rates


def reference_settle_component(link: int, on_link: dict[int, set[int]], flows: dict[int, Flow],
                               capacity: list[float], seen: set[int]) -> list[tuple[Flow, float]]:
    """FairShare's Python walk of the component ``link`` reaches and its rebalance."""
    seen_links, seen_flows = {link}, set()
    todo = [link]
    component = []
    while todo:
        l = todo.pop()
        for k in on_link.get(l, ()):
            if k in seen_flows:
                continue
            seen_flows.add(k)
            f = flows[k]
            component.append(f)
            for m in f.links:
                if m not in seen_links:
                    seen_links.add(m)
                    todo.append(m)
    for f in component:
        seen.update(f.links)
    if not component:
        return []
    first = component[0].links
    if len(first) == 1 and all(f.links == first for f in component):
        rates = reference_one_link_rates(component, capacity[first[0]])
    else:
        rates = reference_max_min_rates(component, capacity)
    return [(f, rates[f.key]) for f in component if rates[f.key] != f.rate]


def bits(rates: list[float]) -> list[str]:
    """The rates to the bit (so 0.0 and -0.0 differ)."""
    return [r.hex() for r in rates]


capacities = st.lists(st.one_of(st.sampled_from(VALUES), st.floats(0.0, 1e11)), min_size=1, max_size=6)
caps = st.one_of(st.just(math.inf), st.sampled_from(VALUES), st.floats(0.0, 1e11))


@st.composite
def links_and_flows(draw, max_flows: int = 12):
    capacity = draw(capacities)
    n = draw(st.integers(1, max_flows))
    flows = []
    for key in draw(st.permutations(range(n))):  # keys out of order: the order is the list's
        links = draw(st.lists(st.integers(0, len(capacity) - 1), min_size=1, max_size=len(capacity), unique=True))
        flows.append(Flow(key, 1.0, tuple(links), draw(caps), 0.0))
    return capacity, flows


@settings(max_examples=300, deadline=None)
@given(links_and_flows())
def test_compiled_progressive_filling_equals_the_python_rates_bit_for_bit(case):
    capacity, flows = case
    expected = reference_max_min_rates(flows, capacity)
    assert bits(native.max_min_rates(flows, capacity)) == bits([expected[f.key] for f in flows])


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_compiled_component_settle_equals_the_python_walk_bit_for_bit(data):
    """A FairShare state built by adds and removals (so the sets' order has a history),
    current rates some of which already are the fair ones: the same flows change, in the
    same order, to the same rates, and the same links are marked seen."""
    capacity, flows = data.draw(links_and_flows(max_flows=16))
    if data.draw(st.booleans()):  # the single-link rule: every flow on one link
        flows = [Flow(f.key, 1.0, (flows[0].links[0],), f.cap, 0.0) for f in flows]
    removed = data.draw(st.sets(st.sampled_from([f.key for f in flows]), max_size=len(flows) - 1))
    on_link: dict[int, set[int]] = {}
    for f in flows:
        for l in f.links:
            on_link.setdefault(l, set()).add(f.key)
    for k in removed:
        for l in next(f for f in flows if f.key == k).links:
            on_link[l].discard(k)
    by_key = {f.key: f for f in flows if f.key not in removed}
    fair = reference_max_min_rates(list(by_key.values()), capacity)
    for f in by_key.values():
        f.rate = data.draw(st.sampled_from([0.0, fair[f.key], 1.0]))
    link = data.draw(st.integers(0, len(capacity) - 1))
    seen_before = data.draw(st.sets(st.integers(0, len(capacity) - 1), max_size=2))

    seen, expected_seen = set(seen_before), set(seen_before)
    got = native.settle_component(link, on_link, by_key, capacity, seen)
    expected = reference_settle_component(link, on_link, by_key, capacity, expected_seen)
    assert [f for f, _ in got] == [f for f, _ in expected]
    assert bits([r for _, r in got]) == bits([r for _, r in expected])
    assert seen == expected_seen


def test_the_first_link_to_tie_binds_first():
    """Links 0 and 1 tie at 1/3 per flow (to the bit); link 0, seen first, freezes flows
    0-2 at 1/3 and flow 3 gets what is left of link 1. Had link 1 gone first, flows 0 and
    1 would get (1 - 1/3) / 2, one unit in the last place more."""
    flows = [Flow(0, 1.0, (0,), math.inf, 0.0), Flow(1, 1.0, (0,), math.inf, 0.0),
             Flow(2, 1.0, (0, 1), math.inf, 0.0), Flow(3, 1.0, (1,), math.inf, 0.0)]
    capacity = [1.0, 2.0 / 3.0]
    rates = native.max_min_rates(flows, capacity)
    assert rates[:3] == [1.0 / 3.0] * 3
    assert rates[3] == max(0.0, 2.0 / 3.0 - 1.0 / 3.0)
    assert bits(rates) == bits([reference_max_min_rates(flows, capacity)[k] for k in range(4)])


def test_a_flow_that_lists_a_link_twice_is_refused():
    with pytest.raises(ValueError, match="link 0 twice"):
        native.max_min_rates([Flow(0, 1.0, (0, 0), math.inf, 0.0)], [1.0])


def test_a_link_without_a_capacity_is_refused():
    with pytest.raises(IndexError, match="link 2"):
        native.max_min_rates([Flow(0, 1.0, (0, 2), math.inf, 0.0)], [1.0, 1.0])


def test_a_cap_that_is_not_a_number_is_refused():
    with pytest.raises(ValueError, match="NaN"):
        native.max_min_rates([Flow(0, 1.0, (0,), math.nan, 0.0)], [1.0])
