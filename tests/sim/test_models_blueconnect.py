"""BlueConnect's time model (SysML 2019, equations 1-10) checked by hand."""

import math

import pytest
from hypothesis import given, settings, strategies as st

from arborcc.errors import InputError
from arborcc.sim.blueconnect_model import (
    blueconnect_time,
    broadcast_time,
    halving_doubling_time,
    one_level_ring_time,
    reduce_time,
    ring_or_halving_time,
    ring_reduce_scatter_time,
    stage_bandwidths,
    two_level_time,
)

GB = 1e9
A = 2e-6  # alpha, s
N = 96e6  # bytes
W = [100 * GB, 25 * GB, 12.5 * GB]  # BlueConnect Fig. 1: node, rack, top bandwidths


def test_equations_1_to_4_by_hand():
    beta = 1 / (10 * GB)
    assert ring_reduce_scatter_time(4, 1000, A, beta) == pytest.approx(3 * A + 0.75 * 1000 / (10 * GB))
    assert ring_reduce_scatter_time(5, 1000, A, beta) == pytest.approx(4 * A + 0.8 * 1000 / (10 * GB))
    assert halving_doubling_time(8, 1000, A, beta) == pytest.approx(3 * A + 7 / 8 * 1000 / (10 * GB))
    assert ring_or_halving_time(8, 1000, A, beta) == pytest.approx(3 * A + 7 / 8 * 1e-7)
    assert ring_or_halving_time(6, 1000, A, beta) == pytest.approx(5 * A + 5 / 6 * 1e-7)
    tc = 2 * A + 0.75 * 1e-7
    tr = 3 * A + 0.75 * 1e-7
    assert broadcast_time(4, 1000, A, beta) == pytest.approx(tc + tr)
    assert reduce_time(4, 1000, A, beta) == pytest.approx(tc + tr)
    with pytest.raises(InputError, match="power-of-two"):
        halving_doubling_time(6, 1000, A, beta)


def test_equations_5_to_7_by_hand():
    # eq 5: 2 (P-1) {alpha + N / (P min W)}
    assert one_level_ring_time(12, N, A, W) == pytest.approx(2 * 11 * (A + N / (12 * 12.5 * GB)))
    # eq 7 with p0 = 3, P/p0 = 4 masters (power of two: halving-doubling)
    tc0 = math.log2(3) * A + 2 / 3 * N / (100 * GB)
    tr0 = 2 * A + 2 / 3 * N / (100 * GB)
    masters = 2 * A + 3 / 4 * N / (12.5 * GB)
    assert two_level_time(3, 12, N, A, 100 * GB, W) == pytest.approx(2 * tc0 + 2 * tr0 + 2 * masters)
    with pytest.raises(InputError, match="groups of 5"):
        two_level_time(5, 12, N, A, 100 * GB, W)


def test_equation_9_by_hand():
    s0 = 2 * A + 2 / 3 * N / (100 * GB)  # ring over p0 = 3, min{w0}
    s1 = 1 * A + 1 / 2 * (N / 3) / (25 * GB / 3)  # p1 = 2 on N/3, min{w0, w1/p0}
    s2 = 1 * A + 1 / 2 * (N / 6) / (12.5 * GB / 6)  # p2 = 2 on N/6, min{.., w2/(p0 p1)}
    assert stage_bandwidths([3, 2, 2], W) == pytest.approx([100 * GB, 25 * GB / 3, 12.5 * GB / 6])
    assert blueconnect_time([3, 2, 2], N, A, W) == pytest.approx(2 * (s0 + s1 + s2))


def test_equation_10_by_hand():
    s0 = 2 * A + 2 / 3 * N / (100 * GB)
    s1 = A + 1 / 2 * (N / 3) / (25 * GB / 3)  # min{w0, w1/p0}
    s2 = A + 1 / 2 * (N / 6) / (12.5 * GB / 3)  # min{w0, w1/p0, w2/p0}: dedicated torus links
    assert blueconnect_time([3, 2, 2], N, A, W, torus=True) == pytest.approx(2 * (s0 + s1 + s2))


def test_bad_inputs_name_the_model():
    with pytest.raises(InputError, match="BlueConnect model: learner count"):
        ring_reduce_scatter_time(0, 1.0, A, 1.0)
    with pytest.raises(InputError, match="data size"):
        ring_reduce_scatter_time(2, -1.0, A, 1.0)
    with pytest.raises(InputError, match="3 factors but 2 bandwidths"):
        blueconnect_time([3, 2, 2], N, A, W[:2])


@settings(max_examples=50, deadline=None)
@given(st.sampled_from([0.0, 1e3, 1e6, 1e9]), st.floats(0, 1e-5))
def test_blueconnect_beats_two_level_and_one_level_in_the_paper_model(n_bytes, alpha):
    # section 3.3: "BlueConnect offers smaller latency than the two-level scheme"
    blc = blueconnect_time([3, 2, 2], n_bytes, alpha, W)
    assert blc <= two_level_time(3, 12, n_bytes, alpha, W[0], W) * (1 + 1e-12)
    assert blc <= one_level_ring_time(12, n_bytes, alpha, W) * (1 + 1e-12)
