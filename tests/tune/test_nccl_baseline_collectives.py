"""The NCCL baseline covers every collective NCCL runs, with NCCL's own choices."""

import math

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from arborcc.errors import SynthesisError
from arborcc.topology.machines import build_machine
from arborcc.tune.compare import compare
from arborcc.tune.nccl import COLLECTIVES, NcclBaseline


@pytest.fixture(scope="module")
def dgx_h100():
    return NcclBaseline(build_machine("dgx-h100"))


@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "reduce", "broadcast", "allreduce"])
def test_compare_has_an_nccl_line_for_every_nccl_collective(collective):
    cmp = compare(build_machine("dgx1v"), collective, [1 << 10, 1 << 24], strategies=["trees"])
    assert {"nccl", "nccl-model"} <= set(cmp.names())
    for name in ("nccl", "nccl-model"):
        assert all(math.isfinite(b) and b > 0 for b in cmp.busbw(name))
    assert not any(s.startswith("nccl:") for s in cmp.skipped)


def test_compare_says_why_a_collective_has_no_nccl_line():
    cmp = compare(build_machine("dgx1v"), "alltoall", [1 << 20])
    assert any(s.startswith("nccl:") and "alltoall" in s for s in cmp.skipped)


@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "reduce", "broadcast"])
def test_nvls_is_all_reduce_only(dgx_h100, collective):
    assert ("nvls", "Simple") in dgx_h100.options("allreduce")
    assert all(a == "ring" for a, _ in dgx_h100.options(collective))
    assert dgx_h100.call(1 << 30, collective).algorithm == "ring"


def test_protocol_follows_nccls_model_small_ll_large_simple(dgx_h100):
    assert dgx_h100.call(1 << 10, "allgather").protocol == "LL"
    assert dgx_h100.call(1 << 30, "allgather").protocol == "Simple"


def test_small_calls_use_fewer_channels(dgx_h100):
    assert dgx_h100.call(1 << 10, "reducescatter").channels < dgx_h100.call(1 << 30, "reducescatter").channels


def test_the_baseline_refuses_a_collective_nccl_does_not_run(dgx_h100):
    with pytest.raises(SynthesisError, match="not gather"):
        dgx_h100.call(1 << 20, "gather")
    assert "gather" not in COLLECTIVES


def small_cluster():
    from arborcc.topology.allocation import induced
    from arborcc.topology.cluster import build_cluster

    t = build_cluster("dgx-a100", 2)
    return induced(t, ["n0.gpu0", "n0.gpu1", "n0.gpu2", "n1.gpu0", "n1.gpu1", "n1.gpu2"])


def test_nccl_tree_allreduce_is_verified_and_matches_numpy():
    import numpy as np

    from arborcc.ir.reference import make_inputs, reference, run
    from arborcc.verify import verify_algorithm

    base = NcclBaseline(small_cluster())
    algo, routes = base.tree_algorithm(2 * len(base.schedule.rings))
    report = verify_algorithm(algo, "legacy")
    assert report.ok, report.violations[:3]
    inputs = make_inputs(algo, elems=2, seed=3)
    for out, want in zip(run(algo, inputs), reference(algo, inputs)):
        np.testing.assert_allclose(out, want, rtol=1e-5)
    assert routes


def test_nccl_trees_pair_both_node_trees_on_each_channels_nic():
    from arborcc.tune.nccl import nccl_trees

    t = small_cluster()
    base = NcclBaseline(t)
    trees = nccl_trees(t, base.schedule)
    assert len(trees) == 2 * len(base.schedule.rings)
    for a, b in zip(trees[::2], trees[1::2]):
        nics = {d for tree in (a, b) for h in tree.hops for d in h.path if "nic" in d}
        assert len(nics) == 2  # one NIC per node: the channel's, for both trees


def test_across_nodes_the_model_picks_the_tree_for_small_all_reduce_and_the_ring_for_large():
    from arborcc.topology.cluster import build_cluster

    base = NcclBaseline(build_cluster("dgx-h100", 2))
    small, large = base.call(1 << 16, "allreduce"), base.call(1 << 27, "allreduce")
    assert (small.algorithm, large.algorithm) == ("tree", "ring")
    assert ("tree", "LL") not in base.options("allgather")


def test_a_single_node_has_no_tree():
    base = NcclBaseline(build_machine("dgx1v"))
    assert all(a == "ring" for a, _ in base.options("allreduce"))
    with pytest.raises(SynthesisError, match="tree"):
        base.simulate_option(1 << 20, "allreduce", "tree", "LL")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpus=st.lists(st.integers(0, 7), min_size=2, max_size=8, unique=True),
       collective=st.sampled_from(COLLECTIVES), size=st.integers(1, 1 << 34), root=st.integers(0, 7))
def test_random_allocations_collectives_and_sizes_give_a_sane_nccl_call(gpus, collective, size, root):
    from arborcc.topology.allocation import induced

    t = build_machine("dgx1v")
    t = induced(t, [t.ranks[g] for g in gpus])
    base = NcclBaseline(t)
    call = base.call(size, collective, root % len(gpus))
    busbw = call.result.busbw
    assert math.isfinite(call.result.time) and call.result.time > 0
    # no faster than the rings' links allow at nominal rates
    assert 0 < busbw <= base.schedule.bus_bandwidth * (1 + 1e-9)
    assert (call.algorithm, call.protocol) in base.options(collective)


def test_the_tree_baseline_is_built_within_arborccs_own_program_budget(monkeypatch):
    """NCCL's tree is a program arborcc builds itself, so the user's default operations limit
    does not bind it (16 trees over 128 x 8 GPUs trace 250,001 operations, one over the
    default). The default is lowered here until the 2-node tree is over it."""
    import dataclasses

    from arborcc.errors import ProgramError
    from arborcc.limits import LIMITS
    from arborcc.synth.lower_emit import lower_allreduce_trees
    from arborcc.topology.cluster import build_cluster
    from arborcc.tune.nccl import TREE_CHUNKS, nccl_trees

    baseline = NcclBaseline(build_cluster("dgx-a100", 2))
    monkeypatch.setitem(LIMITS, "operations", dataclasses.replace(LIMITS["operations"], default=100))
    trees = nccl_trees(baseline.topology, baseline.schedule)[:2]
    with pytest.raises(ProgramError, match="operations"):  # the lowered default binds a program of the user's
        lower_allreduce_trees(baseline.topology, trees, [TREE_CHUNKS] * 2, "user-tree", rounds=TREE_CHUNKS)
    algo, _ = baseline.tree_algorithm(2)
    assert algo.num_ranks == 16
