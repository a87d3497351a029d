"""Lowering BlueConnect / hierarchical plans (BlueConnect, SysML 2019, section 3, Fig. 4,
Algorithm 1) to verified, executable all-reduce algorithms."""

import dataclasses
import math

import pytest

from arborcc.errors import SynthesisError
from support.execution import assert_executes
from arborcc.sim.blueconnect_model import blueconnect_time
from arborcc.synth.blueconnect import HD, RING, blueconnect_plan, choose_blueconnect
from arborcc.library.halving_doubling import near_equal_transfers
from arborcc.library.staged import StagedAllReduce
from arborcc.synth.lower_blocks import MAX_COUNT
from arborcc.synth.lower_stages import (
    hierarchical_plan,
    level_times,
    lower_blueconnect,
    sequential_algbw,
    stage_pairs,
)
from arborcc.topology.allocation import induced
from arborcc.topology.cluster import build_cluster, build_hierarchy, parse_hierarchy
from arborcc.topology.model import GB
from arborcc.verify import verify_algorithm

_TOPOS: dict = {}


def topo(key):
    """Topologies are built once per session (routing them is the slow part)."""
    if key not in _TOPOS:
        kind, arg = key
        _TOPOS[key] = build_hierarchy(parse_hierarchy(arg)) if kind == "h" else build_cluster(kind, arg)
    return _TOPOS[key]


FIG1 = ("h", "3@100,2@25,2@12.5")  # BlueConnect Fig. 1 / Fig. 4: 12 GPUs, p = 3 x 2 x 2
H16 = ("h", "4@100,2@25,2@12.5")
H8 = ("h", "4@100,2@25")
DGX1 = ("dgx1v", 2)
A100 = ("dgx-a100", 2)

CASES = [
    ("fig4-eq3", FIG1, lambda t: blueconnect_plan(t)),  # ring on 3, halving-doubling on 2s
    ("fig4-ring", FIG1, lambda t: blueconnect_plan(t, algorithm=RING)),
    ("h16-hd", H16, lambda t: blueconnect_plan(t, algorithm=HD)),
    ("h16-ring", H16, lambda t: blueconnect_plan(t, algorithm=RING)),
    ("h16-outer-first", H16, lambda t: blueconnect_plan(t, [2, 2, 4], [RING, HD, HD])),
    ("h16-one-level-hd", H16, lambda t: blueconnect_plan(t, [16], [HD])),
    ("h8-[2,4]", H8, lambda t: blueconnect_plan(t, [2, 4], [HD, RING])),
    ("h8-[4,2]", H8, lambda t: blueconnect_plan(t, [4, 2], [RING, HD])),
    ("h8-[2,2,2]", H8, lambda t: blueconnect_plan(t, [2, 2, 2])),
    ("h8-[8]-ring", H8, lambda t: blueconnect_plan(t, [8], [RING])),
    ("dgx1v-hierarchical", DGX1, lambda t: hierarchical_plan(t)),
    ("dgx1v-blueconnect", DGX1, lambda t: blueconnect_plan(t)),
    ("a100-hierarchical", A100, lambda t: hierarchical_plan(t)),
    ("a100-hierarchical-hd", A100, lambda t: hierarchical_plan(t, algorithm=HD)),
    ("a100-[2,4,2]", A100, lambda t: blueconnect_plan(t, [2, 4, 2], [RING, HD, RING])),
    # the chooser splits levels into 2 x 2 x ... and reorders them: still a rank grid
    ("h16-chosen", H16, lambda t: choose_blueconnect(t, 1 << 30)),
    ("dgx1v-chosen", DGX1, lambda t: choose_blueconnect(t, 1 << 20)),
]


@pytest.mark.parametrize("label,key,make", CASES, ids=[c[0] for c in CASES])
def test_lowered_plan_verifies_and_executes(label, key, make):
    t = topo(key)
    plan = make(t)
    low = lower_blueconnect(t, plan)
    algo = low.algorithm
    assert algo.collective == "allreduce" and algo.inplace and algo.num_ranks == t.num_ranks
    assert low.chunks == algo.chunks_per_loop == t.num_ranks
    for slots in (8, 2):  # NCCL_STEPS, and the reference executor's tighter default
        report = verify_algorithm(algo, slots=slots)
        assert report.ok, report.violations[:3]
    assert_executes(algo)
    assert_executes(algo, seed=1, elems=2)
    # every transfer is one multi-count step of at most 64 chunks; only the plan's pairs talk
    pairs = {p for st in plan.stages for p in stage_pairs(st)}
    for rp in algo.ranks:
        for tb in rp.threadblocks:
            assert all(1 <= s.count <= 64 for s in tb.steps if s.op.sends or s.op.receives)
            if tb.send >= 0:
                assert (rp.rank, tb.send) in pairs
    assert 0 < low.estimate.algbw < math.inf


def test_transfers_are_aggregated_and_split_at_64():
    pieces = near_equal_transfers(MAX_COUNT)
    assert MAX_COUNT == 64
    assert pieces(10, 128) == [(10, 64), (74, 64)]
    assert pieces(0, 100) == [(0, 50), (50, 50)]
    assert pieces(5, 3) == [(5, 3)]
    # one-level halving-doubling on 16 ranks: round 1 moves 8 chunks in ONE step per rank
    t = topo(H16)
    low = lower_blueconnect(t, blueconnect_plan(t, [16], [HD]))
    counts = sorted({s.count for rp in low.algorithm.ranks for tb in rp.threadblocks for s in tb.steps
                     if s.op.sends or s.op.receives})
    assert counts == [1, 2, 4, 8]
    # and a ring of 16 moves one chunk per step: 2 x 15 transfers per rank
    ring = lower_blueconnect(t, blueconnect_plan(t, [16], [RING]))
    sends = sum(s.count for rp in ring.algorithm.ranks for tb in rp.threadblocks for s in tb.steps if s.op.sends)
    assert sends == 16 * 2 * 15


def test_figure_4_ownership():
    """Fig. 4 (12 GPUs, 3 x 2 x 2): after the in-node stage GPU 0 owns partitions
    .00-.03, GPU 1 .04-.07; after stage 2 GPU 0 owns .00-.01 and GPU 3 (the other node
    of its pair) .02-.03; after stage 3 GPU 0 owns .00 and GPU 6 (other rack) .01."""
    t = topo(FIG1)
    plan = blueconnect_plan(t, algorithm=RING)
    assert plan.factors == [3, 2, 2]
    layout = StagedAllReduce(plan.stages, t.num_ranks).layout
    owned = []
    for blocks, m in layout:
        at = {}
        for g, off in blocks:
            for pos, r in enumerate(g):
                at[r] = list(range(off + pos * m, off + (pos + 1) * m))
        owned.append(at)
    assert owned[0][0] == [0, 1, 2, 3] and owned[0][1] == [4, 5, 6, 7] and owned[0][2] == [8, 9, 10, 11]
    assert owned[1][0] == [0, 1] and owned[1][3] == [2, 3] and owned[1][1] == [4, 5]
    assert owned[2][0] == [0] and owned[2][6] == [1]
    assert sorted(c for r in range(12) for c in owned[2][r]) == list(range(12))


def test_level_times_are_equation_9_terms_on_a_hierarchy():
    """On build_hierarchy the emitted traffic of level i (RS + AG) takes exactly eq. 9's
    term 2 Tr/c(p_i, N / prod p_j, 0, min_j w_j / prod p_k) on its busiest link, so their
    sum is T_blc at alpha = 0 (tolerance: float rounding only, 1e-9).

    The steady-state estimate (Lowered.estimate) lets the levels of different tiles
    overlap, so its time per byte is the busiest link's *total*, between the largest
    level term and the sum. Here that is the rack uplink sw1.x -> sw2.0: only level 2
    crosses it, 8 ranks x (1/2)(N/8) per phase, N in all, at 12.5 GB/s -> 12.5 GB/s
    (T_blc's sequential figure is 1 / 0.135 ns = 7.41 GB/s)."""
    t = topo(H16)
    bws = [100 * GB, 25 * GB, 12.5 * GB]
    for alg in (RING, HD):
        plan = blueconnect_plan(t, algorithm=alg)
        assert plan.factors == [4, 2, 2]
        low = lower_blueconnect(t, plan)
        levels = level_times(low, plan, t)
        for i, st in enumerate(plan.stages[:3]):  # eq. 1 / eq. 2 bandwidth term, RS + AG
            assert levels[i] == pytest.approx(2 * (st.factor - 1) / st.factor * st.data_fraction * st.beta,
                                              rel=1e-9)
        # by hand: 2*(3/4)/100 + 2*(1/2)(1/4)/(25/4) + 2*(1/2)(1/8)/(12.5/8)  (ns per byte)
        assert [x * 1e9 for x in levels] == pytest.approx([0.015, 0.04, 0.08], rel=1e-9)
        assert sum(levels) == pytest.approx(blueconnect_time([4, 2, 2], 1.0, 0.0, bws), rel=1e-9)
        assert sequential_algbw(low, plan, t) == pytest.approx(1 / blueconnect_time([4, 2, 2], 1.0, 0.0, bws))
        steady = 1 / low.estimate.algbw
        assert max(levels) * (1 - 1e-9) <= steady <= sum(levels) * (1 + 1e-9)
        assert low.estimate.algbw_gbps == pytest.approx(12.5, rel=1e-9)
        assert low.estimate.bottleneck[0].startswith("sw1.")


def test_figure_1_model_with_ring_on_three():
    """Fig. 1's 3 x 2 x 2 with eq. 3's choice (ring on 3, halving-doubling on 2):
    level terms 2(2/3)/100, 2(1/2)(1/3)/(25/3), 2(1/2)(1/6)/(12.5/6) ns per byte."""
    t = topo(FIG1)
    plan = blueconnect_plan(t)
    low = lower_blueconnect(t, plan)
    want = [2 * (2 / 3) / 100, 2 * 0.5 * (1 / 3) / (25 / 3), 2 * 0.5 * (1 / 6) / (12.5 / 6)]
    assert [x * 1e9 for x in level_times(low, plan, t)] == pytest.approx(want, rel=1e-9)
    assert sum(want) * 1e-9 == pytest.approx(
        blueconnect_time([3, 2, 2], 1.0, 0.0, [100 * GB, 25 * GB, 12.5 * GB]), rel=1e-9)


def test_hierarchical_plan_groups():
    t = topo(A100)
    plan = hierarchical_plan(t)
    assert plan.factors == [8, 2] and plan.name == "hierarchical"
    assert [s.algorithm for s in plan.stages] == [RING] * 4
    assert plan.stages[0].groups == [list(range(8)), list(range(8, 16))]
    assert plan.stages[1].groups == [[i, i + 8] for i in range(8)]
    assert [s.kind for s in plan.stages] == ["reducescatter", "reducescatter", "allgather", "allgather"]
    # the same decomposition as blueconnect_plan over explicit factors
    ref = blueconnect_plan(t, factors=[8, 2], algorithm=RING)
    assert [s.groups for s in plan.stages] == [s.groups for s in ref.stages]
    assert [s.beta for s in plan.stages] == pytest.approx([s.beta for s in ref.stages])
    # eq. 3 picks halving-doubling on the power-of-two levels
    assert [s.algorithm for s in hierarchical_plan(t, algorithm=None).stages] == [HD] * 4
    # one node: a single stage pair
    one = hierarchical_plan(topo(("h", "4@100")))
    assert one.factors == [4] and len(one.stages) == 2


def test_hierarchical_plan_needs_equal_nodes():
    t = topo(A100)
    uneven = induced(t, list(t.ranks[:8]) + list(t.ranks[8:12]))
    with pytest.raises(SynthesisError, match="different numbers of GPUs"):
        hierarchical_plan(uneven)


def test_hierarchical_vs_blueconnect_on_three_levels():
    """On 4@100,2@25,2@12.5 the hierarchical baseline (factors 4 x 4) runs its
    cross-node ring over 4 nodes: every rank sends (3/4)(N/4) per phase to the next
    node; the ring hop node 1 -> node 2 leaves rack 0, so its 4 rings put
    2 x 4 x 3N/16 = 1.5 N on the 12.5 GB/s rack uplink: 8.33 GB/s, against
    BlueConnect's 12.5 GB/s (previous test)."""
    t = topo(H16)
    h = lower_blueconnect(t, hierarchical_plan(t))
    b = lower_blueconnect(t, blueconnect_plan(t))
    assert hierarchical_plan(t).factors == [4, 4]
    assert b.estimate.algbw >= h.estimate.algbw
    assert h.estimate.algbw_gbps == pytest.approx(8 + 1 / 3, rel=1e-9)


# ----------------------------------------------------------- invalid plans ---
def _with_stage(plan, i, **kw):
    stages = list(plan.stages)
    stages[i] = dataclasses.replace(stages[i], **kw)
    return dataclasses.replace(plan, stages=stages)


def test_groups_not_partitioning_is_rejected():
    t = topo(H8)
    plan = blueconnect_plan(t, [4, 2], [RING, RING])
    bad = [[0, 1, 2, 3], [4, 5, 6, 0]]  # rank 0 twice, rank 7 missing
    with pytest.raises(SynthesisError, match="partition"):
        lower_blueconnect(t, _with_stage(_with_stage(plan, 0, groups=bad), 3, groups=bad))


def test_halving_doubling_on_three_is_rejected():
    t = topo(FIG1)
    plan = blueconnect_plan(t, algorithm=RING)
    with pytest.raises(SynthesisError, match="halving-doubling"):
        lower_blueconnect(t, _with_stage(plan, 0, algorithm=HD))
    with pytest.raises(SynthesisError, match="halving-doubling"):
        lower_blueconnect(t, _with_stage(plan, 5, algorithm=HD))  # its all-gather
    with pytest.raises(SynthesisError, match="power-of-two"):
        blueconnect_plan(t, [3, 4], [HD, RING])


def test_groups_off_the_rank_grid_are_rejected():
    """Stage-1 groups must join ranks that own the same block after stage 0 (same
    position in their node): pairing position 0 with position 1 is not a decomposition."""
    t = topo(H8)
    plan = blueconnect_plan(t, [4, 2], [RING, RING])
    skew = [[0, 5], [1, 4], [2, 6], [3, 7]]
    with pytest.raises(SynthesisError, match="different blocks"):
        lower_blueconnect(t, _with_stage(_with_stage(plan, 1, groups=skew), 2, groups=skew))


def test_factors_must_multiply_to_ranks_and_match_the_algorithms():
    with pytest.raises(SynthesisError, match="multiply"):
        blueconnect_plan(topo(H8), [3, 2])
    with pytest.raises(SynthesisError, match="2 factors but 3 algorithms"):
        blueconnect_plan(topo(H8), [4, 2], [RING, RING, HD])
    with pytest.raises(SynthesisError, match="power-of-two"):
        blueconnect_plan(topo(FIG1), [3, 4], [HD, RING])


def test_long_rings_spread_over_channels_to_meet_the_executor_limits():
    from arborcc.ir.limits import check_dialect_limits

    t = build_hierarchy(parse_hierarchy("2@100,64@25"))  # the cross-group rings have 64 members
    lowered = lower_blueconnect(t, hierarchical_plan(t))
    algo = lowered.algorithm
    assert not check_dialect_limits(algo, "executor")
    assert max(len(tb.steps) for r in algo.ranks for tb in r.threadblocks) <= 64
    # stage 0's 2-member rings move 2 x 64 one-chunk pieces (3 channels reserved, its 2
    # sub-blocks use 2), stage 1's 64-member rings 64 pieces (2 channels); then the mirror
    assert len({tb.channel for r in algo.ranks for tb in r.threadblocks}) == 8  # 2 + 2 + 2 + 2
    assert verify_algorithm(algo, "executor").ok
    assert_executes(algo, elems=algo.chunks_per_loop)
