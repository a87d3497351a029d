"""Gather and scatter by single-sink flow: the bound against independent computations
(networkx max-flow with a super source, brute-force cuts), the flow's paths, and the
emitted algorithms (optimal in the bandwidth model, verified, run on numpy)."""

from __future__ import annotations

import itertools
from collections import Counter

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_bounds import dgx1, nx_graph, ring, small_topologies, split_by_nvlink, star

from arborcc.errors import SynthesisError
from support.execution import assert_executes
from arborcc.synth.bounds import gather_bound, scatter_bound
from arborcc.synth.gather import gather_flow, synth_gather
from arborcc.topology.allocation import induced, resolve_gpus
from arborcc.topology.cluster import build_cluster
from arborcc.topology.machines import build_machine
from arborcc.topology.model import GB, Device, DeviceKind, LinkKind, TopologyBuilder
from arborcc.verify import check_algorithm

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def super_source_flow(g: nx.DiGraph, root: str, sources, x: float) -> float:
    """maxflow from a super source feeding ``x`` into every source, to ``root``."""
    h = g.copy()
    for v in sources:
        h.add_edge("_s", v, capacity=x)
    return nx.maximum_flow_value(h, "_s", root)


def brute_gather(g: nx.DiGraph, root: str, ranks) -> float:
    """min over vertex sets A without the root, holding a rank, of cap(out A) / |A n ranks|."""
    nodes = [v for v in g.nodes if v != root]
    best = float("inf")
    for k in range(1, len(nodes) + 1):
        for A in map(set, itertools.combinations(nodes, k)):
            inside = len(A & set(ranks))
            if inside:
                out = sum(d["capacity"] for u, v, d in g.edges(data=True) if u in A and v not in A)
                best = min(best, out / inside)
    return best


# --- the bound ------------------------------------------------------------------------

@SETTINGS
@given(small_topologies(symmetric=False), st.data())
def test_bound_is_the_largest_feasible_super_source_flow(t, data):
    root = data.draw(st.sampled_from(t.ranks))
    sources = [v for v in t.ranks if v != root]
    for collective, g in (("gather", nx_graph(t)), ("scatter", nx_graph(t).reverse(copy=True))):
        b = gather_bound(t, root) if collective == "gather" else scatter_bound(t, root)
        x = b.rate
        assert b.algbw == pytest.approx(t.num_ranks * x)
        assert x == pytest.approx(brute_gather(g, root, t.ranks), rel=1e-9)
        assert super_source_flow(g, root, sources, x) == pytest.approx(len(sources) * x, rel=1e-6)
        assert super_source_flow(g, root, sources, x * 1.001) < len(sources) * x * 1.001 * (1 - 1e-6)
        # the reported cut is tight and excludes the root
        assert root not in b.cut and b.cut_capacity / b.cut_ranks == pytest.approx(x)


@SETTINGS
@given(small_topologies(symmetric=False), st.data())
def test_flow_paths_carry_every_block_within_the_links(t, data):
    root = data.draw(st.sampled_from(t.ranks))
    collective = data.draw(st.sampled_from(["gather", "scatter"]))
    flow = gather_flow(t, collective, root)
    load, per_rank = Counter(), Counter()
    for p in flow.paths:
        ends = (t.ranks[p.rank], root) if collective == "gather" else (root, t.ranks[p.rank])
        assert (p.devices[0], p.devices[-1]) == ends and len(set(p.devices)) == len(p.devices)
        per_rank[p.rank] += p.rate
        for link in zip(p.devices, p.devices[1:]):
            load[link] += p.rate
    assert set(per_rank) == set(range(t.num_ranks)) - {flow.root}
    assert all(r == pytest.approx(flow.bound.rate, rel=1e-6) for r in per_rank.values())
    assert all(v <= t.links[l].bandwidth * (1 + 1e-6) for l, v in load.items())


def test_known_values():
    # every block but the root's enters the root through its links
    assert gather_bound(star(8, 300.0), 0).algbw_gbps == pytest.approx(300.0 * 8 / 7)
    assert scatter_bound(dgx1(), "gpu3", links="nvlink").algbw_gbps == pytest.approx(150.0 * 8 / 7)
    # a line: gpu2's block crosses gpu1, so gpu1's out-link carries two blocks
    b = TopologyBuilder("line")
    for i in range(3):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, 0, i))
    b.connect("gpu0", "gpu1", LinkKind.NVLINK, 10 * GB)
    b.connect("gpu1", "gpu2", LinkKind.NVLINK, 10 * GB)
    line = b.build()
    assert gather_bound(line, 0).rate_gbps == pytest.approx(5.0)
    assert gather_bound(line, 1).rate_gbps == pytest.approx(10.0)


def test_gpus_outside_the_job_do_not_forward():
    job = ring(4, 10.0).with_ranks(["gpu0", "gpu2", "gpu3"])  # gpu1 belongs to another job
    flow = gather_flow(job, "gather", "gpu0")
    assert all("gpu1" not in p.devices for p in flow.paths)
    assert flow.bound.rate_gbps == pytest.approx(5.0)  # both blocks enter gpu0 from gpu3


# --- the emitted algorithms -------------------------------------------------------------

def _check(t, collective, root, links="all"):
    lowered, notes, paths = synth_gather(t, collective, root, links)
    bound = (gather_bound if collective == "gather" else scatter_bound)(t, root, links).algbw
    ratio = lowered.estimate.algbw / bound
    assert 0.99 <= ratio <= 1 + 1e-9, notes
    assert paths >= t.num_ranks - 1 and lowered.algorithm.collective == collective
    assert lowered.algorithm.root == root
    check_algorithm(lowered.algorithm, "executor")
    assert_executes(lowered.algorithm, seed=root)
    return lowered, notes


@pytest.mark.parametrize("collective", ["gather", "scatter"])
@pytest.mark.parametrize("machine, gpus, root, links", [
    ("dgx1v", None, 0, "all"), ("dgx1v", None, 5, "nvlink"), ("dgx1v", "1,4,5,6", 2, "all"),
    ("dgx1p", None, 3, "nvlink"), ("dgx-a100", None, 7, "all"), ("dgx2", None, 4, "all"),
])
def test_emitted_algorithm_reaches_the_bound_and_computes_the_collective(machine, gpus, root, links, collective):
    t = build_machine(machine)
    _check(induced(t, resolve_gpus(t, gpus)) if gpus else t, collective, root, links)


def test_cluster_gather_uses_the_network_and_reaches_the_bound():
    t = build_cluster("dgx-a100", 2)
    lowered, notes = _check(t, "gather", 15)
    assert any(t.links[l].kind is LinkKind.NETWORK for l in lowered.estimate.loads)
    assert "chunks per rank" in notes[0]


def test_blocks_store_and_forward_through_other_gpus():
    # NVLink gpu4=gpu0-gpu1 (2 lanes, 1 lane), no gpu4-gpu1 link: with the root on gpu4,
    # rank 2's block crosses rank 1, which keeps it in scratch on the way
    t = build_machine("dgx1v")
    t = induced(t, resolve_gpus(t, "4,0,1"))
    for collective in ("gather", "scatter"):
        lowered, notes = _check(t, collective, 0, "nvlink")
        assert lowered.estimate.algbw == pytest.approx(75 * GB)
        assert [r.scratch_chunks > 0 for r in lowered.algorithm.ranks] == [False, True, False]
        assert "(1 through other GPUs)" in notes[0]


# --- bad input ----------------------------------------------------------------------------

def test_bad_input_is_a_synthesis_error():
    t = build_machine("dgx1v")
    with pytest.raises(SynthesisError, match="root rank 8 does not exist"):
        synth_gather(t, "gather", 8)
    with pytest.raises(SynthesisError, match="not a rank"):
        gather_bound(t, "cpu0")
    with pytest.raises(SynthesisError, match="builds gather or scatter, not 'reduce'"):
        synth_gather(t, "reduce", 0)
    split = split_by_nvlink()
    with pytest.raises(SynthesisError, match="gpu2 cannot reach gpu0 over nvlink links"):
        synth_gather(split, "gather", 0, "nvlink")
    with pytest.raises(SynthesisError, match="gpu2 cannot be reached from gpu1 over nvlink"):
        scatter_bound(split, 1, "nvlink")
    assert gather_bound(split, 0).rate_gbps == pytest.approx(12.0)
