"""Max-min fair sharing: known allocations, the defining property, and the event loop's
rates as flows start and end."""

import math

import pytest
from hypothesis import given, settings, strategies as st

import arborcc.sim.native as native
from arborcc.sim.fairshare import Flow, max_min_rates
from arborcc.sim.program import COPY, RECV, SEND


def flows(*specs):
    return [Flow(k, links, cap) for k, (links, cap) in enumerate(specs)]


def test_shared_bottleneck_splits_evenly():
    rates = max_min_rates(flows(((0,), math.inf), ((0, 1), math.inf), ((1,), math.inf)), [1.0, 1.0])
    assert rates == {0: 0.5, 1: 0.5, 2: 0.5}


def test_spare_capacity_goes_to_the_unconstrained_flow():
    rates = max_min_rates(flows(((0,), math.inf), ((0, 1), math.inf), ((1,), math.inf)), [1.0, 3.0])
    assert rates == pytest.approx({0: 0.5, 1: 0.5, 2: 2.5})


def test_a_flow_cap_frees_capacity_for_others():
    rates = max_min_rates(flows(((0,), 0.2), ((0,), math.inf)), [1.0])
    assert rates == pytest.approx({0: 0.2, 1: 0.8})


def two_senders(free_rate: list[float], second_starts_after: float) -> list[float]:
    """The event loop's finish time of each of 4 thread blocks: 0 and 1 send 100 bytes each
    over one shared link of 10 B/s to 2 and 3 (1 computes for ``second_starts_after``
    seconds first); per connection its uncontended rate ``free_rate``."""
    prog = native.EngineProgram([[SEND], [COPY | SEND], [RECV], [RECV]], [[1]] * 4, [None] * 4,
                                [0, 1, -1, -1], [-1, -1, 0, 1], 2)
    finish, stuck, _, _ = native.run_events(prog, 1, 100.0, 1, 1, 0.0, second_starts_after / 100.0, [0.0, 0.0],
                                            free_rate, [(0,), (0,)], [10.0], False)
    assert stuck is None
    return finish


def test_rates_change_only_when_flows_start_and_end():
    # 0 alone for 5 s (50 bytes), both at 5 B/s until 0 ends at 15, then 1 alone: 20
    assert two_senders([math.inf, math.inf], 5.0) == pytest.approx([15.0, 20.0, 15.0, 20.0])


def test_a_capped_flow_leaves_the_rest_of_the_link_to_the_other():
    # 0 capped at 2 B/s, 1 takes the 8 left (done at 12.5), then 0 alone stays at its cap
    assert two_senders([2.0, 100.0], 0.0) == pytest.approx([50.0, 12.5, 50.0, 12.5])


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
