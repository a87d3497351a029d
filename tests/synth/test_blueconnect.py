"""BlueConnect: decomposition along the hierarchy, stage groups, equations 1-10, chooser."""

import math

import pytest
from hypothesis import given, settings, strategies as st

from arborcc.errors import SynthesisError
from arborcc.synth.blueconnect import (
    blueconnect_plan,
    blueconnect_time,
    blueconnect_torus_time,
    broadcast_time,
    choose_blueconnect,
    halving_doubling_reduce_scatter_time,
    hierarchy_levels,
    one_level_ring_plan,
    one_level_ring_time,
    reduce_time,
    ring_all_gather_time,
    ring_or_halving_time,
    ring_reduce_scatter_time,
    two_level_plan,
    two_level_time,
)
from arborcc.topology.allocation import induced
from arborcc.topology.cluster import build_cluster, build_hierarchy, parse_hierarchy
from arborcc.topology.machines import build_machine
from arborcc.topology.model import GB, Device, DeviceKind, TopologyBuilder

A = 2e-6  # alpha, s
N = 96e6  # bytes


def assert_partition(groups, n):
    assert sorted(r for g in groups for r in g) == list(range(n))


# --------------------------------------------------------------- equations ---
def test_equations_1_to_4_by_hand():
    beta = 1 / (10 * GB)
    assert ring_reduce_scatter_time(4, 1000, A, beta) == pytest.approx(3 * A + 0.75 * 1000 / (10 * GB))
    assert ring_all_gather_time(5, 1000, A, beta) == pytest.approx(4 * A + 0.8 * 1000 / (10 * GB))
    assert halving_doubling_reduce_scatter_time(8, 1000, A, beta) == pytest.approx(3 * A + 7 / 8 * 1000 / (10 * GB))
    assert ring_or_halving_time(8, 1000, A, beta) == pytest.approx(3 * A + 7 / 8 * 1e-7)
    assert ring_or_halving_time(6, 1000, A, beta) == pytest.approx(5 * A + 5 / 6 * 1e-7)
    tc = 2 * A + 0.75 * 1e-7
    tr = 3 * A + 0.75 * 1e-7
    assert broadcast_time(4, 1000, A, beta) == pytest.approx(tc + tr)
    assert reduce_time(4, 1000, A, beta) == pytest.approx(tc + tr)
    with pytest.raises(SynthesisError):
        halving_doubling_reduce_scatter_time(6, 1000, A, beta)


def test_equations_5_to_7_by_hand():
    w = [100 * GB, 25 * GB, 12.5 * GB]
    # eq 5: 2 (P-1) {alpha + N / (P min W)}
    assert one_level_ring_time(12, N, A, w) == pytest.approx(2 * 11 * (A + N / (12 * 12.5 * GB)))
    # eq 7 with p0 = 3, P/p0 = 4 masters (power of two: halving-doubling)
    tc0 = math.log2(3) * A + 2 / 3 * N / (100 * GB)
    tr0 = 2 * A + 2 / 3 * N / (100 * GB)
    masters = 2 * A + 3 / 4 * N / (12.5 * GB)
    assert two_level_time(3, 12, N, A, 100 * GB, w) == pytest.approx(2 * tc0 + 2 * tr0 + 2 * masters)


def test_equation_9_by_hand():
    w = [100 * GB, 25 * GB, 12.5 * GB]
    s0 = 2 * A + 2 / 3 * N / (100 * GB)  # ring over p0 = 3, min{w0}
    s1 = 1 * A + 1 / 2 * (N / 3) / (25 * GB / 3)  # p1 = 2 on N/3, min{w0, w1/p0}
    s2 = 1 * A + 1 / 2 * (N / 6) / (12.5 * GB / 6)  # p2 = 2 on N/6, min{.., w2/(p0 p1)}
    assert blueconnect_time([3, 2, 2], N, A, w) == pytest.approx(2 * (s0 + s1 + s2))


def test_equation_10_by_hand():
    w = [100 * GB, 25 * GB, 12.5 * GB]
    s0 = 2 * A + 2 / 3 * N / (100 * GB)
    s1 = A + 1 / 2 * (N / 3) / (25 * GB / 3)  # min{w0, w1/p0}
    s2 = A + 1 / 2 * (N / 6) / (12.5 * GB / 3)  # min{w0, w1/p0, w2/p0}: dedicated torus links
    assert blueconnect_torus_time([3, 2, 2], N, A, w) == pytest.approx(2 * (s0 + s1 + s2))


def test_blueconnect_beats_two_level_and_one_level_in_the_paper_model():
    # section 3.3: "BlueConnect offers smaller latency than the two-level scheme"
    w = [100 * GB, 25 * GB, 12.5 * GB]
    for n_bytes in (0, 1e3, 1e6, 1e9):
        blc = blueconnect_time([3, 2, 2], n_bytes, A, w)
        assert blc <= two_level_time(3, 12, n_bytes, A, w[0], w)
        assert blc <= one_level_ring_time(12, n_bytes, A, w)


# ------------------------------------------------------------- decomposition ---
def fig1():
    """BlueConnect Fig. 1/4: 4 nodes of 3 learners, 2 nodes per rack switch, 2 racks."""
    return build_hierarchy(parse_hierarchy("3@100,2@25,2@12.5"))


def test_hierarchy_levels_of_figure_1():
    levels = hierarchy_levels(fig1())
    assert [lv.factor for lv in levels] == [3, 2, 2]
    assert [lv.bandwidth for lv in levels] == pytest.approx([100 * GB, 25 * GB, 12.5 * GB])
    assert levels[0].groups == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]


def test_stage_groups_follow_figure_4():
    plan = blueconnect_plan(fig1(), alpha=A)
    assert plan.factors == [3, 2, 2]
    kinds = [s.kind for s in plan.stages]
    assert kinds == ["reducescatter"] * 3 + ["allgather"] * 3
    g = [s.groups for s in plan.stages]
    assert g[0] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]  # A0-A1-A2, B.., C.., D..
    assert g[1] == [[0, 3], [1, 4], [2, 5], [6, 9], [7, 10], [8, 11]]  # Ai-Bi, Ci-Di
    assert g[2] == [[0, 6], [1, 7], [2, 8], [3, 9], [4, 10], [5, 11]]  # Ai-Ci, Bi-Di
    assert g[3:] == g[2::-1]
    for s in plan.stages:
        assert_partition(s.groups, 12)
    assert [s.data_fraction for s in plan.stages[:3]] == pytest.approx([1, 1 / 3, 1 / 6])


def test_measured_stage_bandwidths_reproduce_equation_9():
    plan = blueconnect_plan(fig1(), alpha=A)
    assert [s.bandwidth for s in plan.stages[:3]] == pytest.approx([100 * GB, 25 * GB / 3, 12.5 * GB / 6])
    w = [100 * GB, 25 * GB, 12.5 * GB]
    assert plan.predicted_time(N) == pytest.approx(blueconnect_time([3, 2, 2], N, A, w))


def test_one_level_ring_plan_matches_equation_6():
    plan = one_level_ring_plan(fig1(), alpha=A)
    assert plan.factors == [12] and plan.stages[0].groups == [list(range(12))]
    w = [100 * GB, 25 * GB, 12.5 * GB]
    assert plan.predicted_time(N) == pytest.approx(one_level_ring_time(12, N, A, w))


def test_two_level_plan_structure():
    plan = two_level_plan(fig1(), alpha=A)
    assert plan.masters == [0, 3, 6, 9]
    assert_partition(plan.groups, 12)
    assert plan.master_algorithm == "halving-doubling"
    # masters 0<->6 and 3<->9 share the rack uplink: half of w2 each (eq. 7 ignores this)
    assert 1 / plan.master_beta == pytest.approx(12.5 * GB / 2)
    assert plan.predicted_time(N) >= two_level_time(3, 12, N, A, 100 * GB, [100 * GB, 25 * GB, 12.5 * GB])


def test_halving_doubling_stages_when_forced_and_refused_on_odd_groups():
    t = build_hierarchy(parse_hierarchy("4@100,2@25"))
    plan = blueconnect_plan(t, algorithm="halving-doubling", alpha=A)
    assert [s.algorithm for s in plan.stages] == ["halving-doubling"] * 4
    with pytest.raises(SynthesisError, match="power-of-two"):
        blueconnect_plan(fig1(), algorithm="halving-doubling")


def test_explicit_factors():
    t = build_cluster("dgx-a100", 2)
    plan = blueconnect_plan(t, factors=[8, 2])
    assert plan.stages[0].groups == [list(range(8)), list(range(8, 16))]
    assert plan.stages[1].groups == [[k, k + 8] for k in range(8)]
    with pytest.raises(SynthesisError, match="do not multiply"):
        blueconnect_plan(t, factors=[3, 5])


def test_cluster_hierarchy_is_gpus_per_node_then_nodes():
    t = build_cluster("dgx-a100", 4)
    assert [lv.factor for lv in hierarchy_levels(t)] == [8, 4]
    plan = blueconnect_plan(t)
    assert plan.factors == [8, 4]
    assert plan.stages[0].bandwidth > 10 * plan.stages[1].bandwidth  # NVSwitch vs network


def test_structural_levels_follow_pcie_switches_sockets_hosts():
    # DGX-1V: the 2-lane NVLinks alone already join all eight GPUs, so bandwidth
    # clustering sees one level of 8; the PCIe tree (switch, socket, host) is 2 x 2 x 2
    t = build_machine("dgx1v")
    assert [lv.factor for lv in hierarchy_levels(t)] == [8]
    levels = hierarchy_levels(t, structural=True)
    assert [lv.factor for lv in levels] == [2, 2, 2]
    assert levels[0].groups == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert levels[1].groups == [[0, 1, 2, 3], [4, 5, 6, 7]]
    plan = blueconnect_plan(t, structural=True)
    assert plan.factors == [2, 2, 2]
    assert plan.stages[1].groups == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert plan.stages[2].groups == [[0, 4], [1, 5], [2, 6], [3, 7]]
    # two clusters of DGX-1V: PCIe switch, socket, host, then the two nodes
    c = build_cluster("dgx1v", 2)
    assert [lv.factor for lv in hierarchy_levels(c, structural=True)] == [2, 2, 2, 2]
    assert [lv.factor for lv in hierarchy_levels(c)] == [8, 2]


def test_unfactorable_hierarchy_degenerates_to_one_level():
    # section 3.4: no feasible eq. (8) -> a one-level scheme. Allocation 1,4,5,6 has an
    # NVLink triangle 1-5-6 plus GPU4: groups of unequal size are not a level.
    m = build_machine("dgx1v")
    t = induced(m, ["gpu1", "gpu4", "gpu5", "gpu6"])
    assert [lv.factor for lv in hierarchy_levels(t)] == [4]


def test_unreachable_gpus_raise():
    b = TopologyBuilder("split")
    for i in range(2):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, 0, i))
    with pytest.raises(SynthesisError, match="cannot reach"):
        blueconnect_plan(b.build())
    with pytest.raises(SynthesisError, match="cannot reach"):
        one_level_ring_plan(b.build())


def test_chooser_splits_a_flat_level_to_cut_latency():
    # one NVSwitch box: a single level of 8; splitting it (2 x 2 x 2 stages) keeps the
    # volume and cuts the latency terms, so small messages prefer it
    t = build_machine("dgx-a100")
    best = choose_blueconnect(t, 1024, alpha=A)
    assert math.prod(best.factors) == 8 and len(best.factors) > 1
    assert best.predicted_time(1024) < one_level_ring_plan(t, alpha=A).predicted_time(1024)


# ------------------------------------------------------------------ properties ---
hierarchies = st.lists(st.tuples(st.integers(1, 3), st.sampled_from([12.5, 25.0, 50.0, 100.0])),
                       min_size=1, max_size=3)


@settings(max_examples=30, deadline=None)
@given(hierarchies, st.sampled_from([0.0, 1e3, 1e6, 1e9]), st.sampled_from([None, 1e-6]))
def test_plans_partition_ranks_and_chooser_beats_one_level_ring(levels, n_bytes, alpha):
    t = build_hierarchy(levels)
    n = t.num_ranks
    plan = blueconnect_plan(t, alpha=alpha)
    assert math.prod(plan.factors) == n
    for s in plan.stages:
        assert_partition(s.groups, n)
        assert all(len(g) == s.factor for g in s.groups)
        assert s.beta >= 0 and s.alpha >= 0
    best = choose_blueconnect(t, n_bytes, alpha=alpha)
    best.validate(n)
    assert math.prod(best.factors) == n
    ring = one_level_ring_plan(t, alpha=alpha).predicted_time(n_bytes)
    assert best.predicted_time(n_bytes) <= ring * (1 + 1e-12)
    assert best.predicted_time(n_bytes) <= plan.predicted_time(n_bytes) * (1 + 1e-12)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4))
def test_explicit_factor_plans_partition(factors):
    n = math.prod(factors)
    t = build_hierarchy([(n, 50.0)])
    plan = blueconnect_plan(t, factors=factors)
    assert math.prod(plan.factors) == n
    for i, s in enumerate(plan.stages):
        assert_partition(s.groups, n)
    # two ranks share a stage-i group iff their mixed-radix digits differ only in digit i
    real = [f for f in factors if f > 1]
    for i, f in enumerate(real):
        stride = math.prod(real[:i])
        for g in plan.stages[i].groups:
            base = {r - ((r // stride) % f) * stride for r in g}
            assert len(base) == 1
