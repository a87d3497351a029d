"""BlueConnect: decomposition along the hierarchy, stage groups, the chooser (the time
model itself is tested in tests/sim/test_models_blueconnect.py)."""

import math

import pytest
from hypothesis import given, settings, strategies as st

from arborcc.errors import SynthesisError
from arborcc.sim.blueconnect_model import blueconnect_time, one_level_ring_time
from arborcc.synth.blueconnect import blueconnect_plan, choose_blueconnect, hierarchy_levels, one_level_ring_plan
from arborcc.topology.allocation import induced
from arborcc.topology.cluster import build_cluster, build_hierarchy, parse_hierarchy
from arborcc.topology.machines import build_machine
from arborcc.topology.model import GB, Device, DeviceKind, TopologyBuilder

A = 2e-6  # alpha, s
N = 96e6  # bytes


def assert_partition(groups, n):
    assert sorted(r for g in groups for r in g) == list(range(n))


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
