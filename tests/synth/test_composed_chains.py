"""The composed broadcast and reduce (rail chains through the hosts) move one chunk per
step between GPUs, so a host forwards a chunk while the next arrives; every number of
rounds (chunks per piece) verifies and computes what numpy computes, and its busiest
thread block holds the steps :func:`piece_rounds_most` counts on."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborcc.ir.limits import runtime_caps
from arborcc.synth import synthesize
from arborcc.synth.composed import lower_composed_broadcast, lower_composed_reduce, piece_rounds_most
from arborcc.synth.hosts import cluster_of
from arborcc.topology.cluster import build_cluster
from arborcc.verify import verify_algorithm
from support.execution import assert_executes

LOWER = {"broadcast": lower_composed_broadcast, "reduce": lower_composed_reduce}


def longest_threadblock(algorithm) -> int:
    return max(len(tb.steps) for r in algorithm.ranks for tb in r.threadblocks)


def largest_transfer(algorithm) -> int:
    """The most chunks one step sends to another GPU."""
    return max(s.count for r in algorithm.ranks for tb in r.threadblocks for s in tb.steps if s.op.sends)


@pytest.mark.parametrize("collective", ["broadcast", "reduce"])
@pytest.mark.parametrize("hosts,rounds,root", [(2, 1, 0), (3, 2, 5), (2, 3, 9)])
def test_every_round_count_verifies_and_executes(collective, hosts, rounds, root):
    cluster = cluster_of(build_cluster("dgx-a100", hosts))
    algorithm = LOWER[collective](cluster, root, f"composed-{collective}", rounds=rounds).algorithm
    assert algorithm.chunks_per_loop == rounds * (cluster.per_host - 1) * cluster.per_host
    assert verify_algorithm(algorithm).ok
    assert largest_transfer(algorithm) == 1  # a relay forwards chunk by chunk
    assert_executes(algorithm, seed=rounds)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["broadcast", "reduce"]), st.integers(2, 3), st.integers(1, 9), st.integers(0, 15))
def test_the_busiest_threadblock_holds_rounds_times_the_host_gpus(collective, hosts, rounds, root):
    cluster = cluster_of(build_cluster("dgx-a100", hosts))
    algorithm = LOWER[collective](cluster, root, f"composed-{collective}", rounds=rounds).algorithm
    assert longest_threadblock(algorithm) == rounds * cluster.per_host


def test_the_most_rounds_fill_the_runtime_and_no_more():
    cluster = cluster_of(build_cluster("dgx-a100", 2))
    limit = runtime_caps("executor").steps_per_threadblock
    most = piece_rounds_most(cluster, limit)
    assert most * cluster.per_host <= limit < (most + 1) * cluster.per_host


@pytest.mark.parametrize("collective", ["broadcast", "reduce"])
def test_synthesis_writes_the_faster_piece_size_and_says_so(collective):
    t = build_cluster("dgx-a100", 2)
    r = synthesize(t, collective, "composed", root=3, size=64 << 20)
    note = next(n for n in r.notes if n.startswith("written as"))
    assert "56 chunks" in note and "448 chunks" in note
    assert r.chunks == r.algorithm.chunks_per_loop and f"written as {r.chunks} chunks" in note
    assert r.report.ok
