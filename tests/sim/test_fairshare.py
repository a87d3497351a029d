"""Max-min fair sharing: known allocations and the defining property."""

import math

import pytest
from hypothesis import given, settings, strategies as st

from arborcc.sim.fairshare import FairShare, Flow, max_min_rates


def flows(*specs):
    return [Flow(k, 1.0, links, cap, 0.0) for k, (links, cap) in enumerate(specs)]


def test_shared_bottleneck_splits_evenly():
    rates = max_min_rates(flows(((0,), math.inf), ((0, 1), math.inf), ((1,), math.inf)), [1.0, 1.0])
    assert rates == {0: 0.5, 1: 0.5, 2: 0.5}


def test_spare_capacity_goes_to_the_unconstrained_flow():
    rates = max_min_rates(flows(((0,), math.inf), ((0, 1), math.inf), ((1,), math.inf)), [1.0, 3.0])
    assert rates == pytest.approx({0: 0.5, 1: 0.5, 2: 2.5})


def test_a_flow_cap_frees_capacity_for_others():
    rates = max_min_rates(flows(((0,), 0.2), ((0,), math.inf)), [1.0])
    assert rates == pytest.approx({0: 0.2, 1: 0.8})


def test_rates_change_only_when_flows_start_and_end():
    fs = FairShare([10.0])
    fs.start(0.0, 1, 100.0, (0,), math.inf)
    changed = fs.settle(0.0)
    assert [f.key for f in changed] == [1] and changed[0].finish_time() == pytest.approx(10.0)
    fs.start(5.0, 2, 100.0, (0,), math.inf)  # flow 1 has 50 bytes left
    changed = fs.settle(5.0)
    assert {f.key: f.finish_time() for f in changed} == pytest.approx({1: 15.0, 2: 25.0})
    fs.end(15.0, 1)  # flow 2 has 50 left, now alone
    changed = fs.settle(15.0)
    assert {f.key: f.finish_time() for f in changed} == pytest.approx({2: 20.0})


def test_an_end_and_a_start_at_one_instant_leave_the_others_alone():
    fs = FairShare([10.0])
    fs.start(0.0, 1, 100.0, (0,), math.inf)
    fs.start(0.0, 2, 100.0, (0,), math.inf)
    fs.settle(0.0)
    fs.end(20.0, 1)
    fs.start(20.0, 3, 100.0, (0,), math.inf)
    assert [f.key for f in fs.settle(20.0)] == [3]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_max_min_property(data):
    """Feasible, and every flow is held back by its own cap or by a saturated link on
    which no flow gets more than it does."""
    nlinks = data.draw(st.integers(1, 4))
    cap = data.draw(st.lists(st.floats(0.5, 10.0), min_size=nlinks, max_size=nlinks))
    nflows = data.draw(st.integers(1, 6))
    specs = []
    for _ in range(nflows):
        links = tuple(sorted(data.draw(st.sets(st.integers(0, nlinks - 1), min_size=1, max_size=nlinks))))
        specs.append((links, data.draw(st.one_of(st.just(math.inf), st.floats(0.1, 10.0)))))
    fl = flows(*specs)
    rates = max_min_rates(fl, cap)
    load = [0.0] * nlinks
    for f in fl:
        for l in f.links:
            load[l] += rates[f.key]
    assert all(load[l] <= cap[l] * (1 + 1e-9) for l in range(nlinks))
    for f in fl:
        r = rates[f.key]
        if r >= f.cap * (1 - 1e-9):
            continue
        assert any(load[l] >= cap[l] * (1 - 1e-9) and all(rates[g.key] <= r * (1 + 1e-9) for g in fl if l in g.links)
                   for l in f.links)
