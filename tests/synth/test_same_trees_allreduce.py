"""All-reduce through one root on the same trees (Blink section 3.3): each chunk reduced up
an in-tree and broadcast back down it, so a tree uses each of its links in both
directions. The packing shares every link's capacity between a tree's two directions
(``pack_reduce(both_ways=True)``): an undirected spanning-tree packing, whose optimum
Nash-Williams and Tutte give; the trees strategy writes it where its file simulates
faster than the trees of a link split."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings

from arborcc.errors import SynthesisError
from arborcc.sim.protocol_choice import time_as_written
from arborcc.synth import synthesize
from arborcc.synth.packing import pack_reduce
from arborcc.topology.allocation import induced
from arborcc.topology.machines import build_machine
from arborcc.topology.model import GB, Device, DeviceKind, Link, LinkKind, TopologyBuilder
from arborcc.verify import verify_algorithm
from support.execution import assert_executes
from support.topologies import nvlink_pcie_box, nvlink_pcie_box_topology

GiB = 1 << 30


def both_ways_loads(packing) -> Counter:
    """Bytes/s each directed link carries: every tree's use of it, and its reverse's."""
    load = Counter()
    for tree in packing.trees:
        for link, uses in (tree.link_use() + tree.reversed().link_use()).items():
            load[link] += uses * tree.weight
    return load


def within_capacity(topology, packing) -> bool:
    return all(load <= topology.links[link].bandwidth * (1 + 1e-6) for link, load in both_ways_loads(packing).items())


@pytest.mark.parametrize("n, one_way, both_ways", [
    (3, 50, 37.5),  # a triangle of 25 GB/s lanes: 3 links over 2 parts of the singletons' partition
    (4, 75, 50),    # the complete graph on 4: 6 links over 3 parts
])
def test_an_equal_lane_clique_packs_its_spanning_tree_number(n, one_way, both_ways):
    """Every pair on one NVLink lane (their runtime route): reducing into a rank, its n - 1
    lanes in bound it; used both ways, the fractional spanning-tree packing of the
    clique, n (n - 1) / 2 lanes over n - 1 (Nash-Williams-Tutte, the partition into
    singletons), bounds it, and the packing reaches both."""
    t = nvlink_pcie_box_topology(n, {(i, j): 1 for i in range(n) for j in range(i + 1, n)})
    assert pack_reduce(t, 0, routed=True, minimize_trees=False).rate == pytest.approx(one_way * GB, rel=1e-6)
    p = pack_reduce(t, 0, routed=True, minimize_trees=False, both_ways=True)
    assert p.rate == pytest.approx(both_ways * GB, rel=1e-6)
    assert within_capacity(t, p)
    assert all(tr.inward and tr.root == "gpu0" for tr in p.trees)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nvlink_pcie_box(3, 5))
def test_trees_used_both_ways_fit_the_links_and_never_beat_the_reduce(t):
    one_way = pack_reduce(t, 0, routed=True, minimize_trees=False)
    p = pack_reduce(t, 0, routed=True, minimize_trees=False, both_ways=True)
    assert within_capacity(t, p)
    assert 0 < p.rate <= one_way.rate * (1 + 1e-6)
    ranks = set(t.ranks)
    for tree in p.trees:
        assert {h.src for h in tree.hops} == ranks - {"gpu0"}
        assert all(tuple(h.path) == t.route(h.src, h.dst).path for h in tree.hops)


def test_a_link_without_its_reverse_is_refused():
    b = TopologyBuilder("one-way")
    for i in range(3):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, 0, i))
    for s, d in [(0, 1), (1, 0), (1, 2), (2, 1), (2, 0)]:
        b.add_link(Link(f"gpu{s}", f"gpu{d}", LinkKind.NVLINK, 25 * GB))
    t = b.build()
    assert pack_reduce(t, 0, minimize_trees=False).rate > 0
    with pytest.raises(SynthesisError, match="gpu2 -> gpu0 has no reverse link"):
        pack_reduce(t, 0, minimize_trees=False, both_ways=True)


def test_dgx1v_fragment_allreduce_is_written_on_the_same_trees(monkeypatch):
    """DGX-1V GPUs 0,1,2,5,6,7: the split's reduce and broadcast trees (60 GB/s planned)
    as written lose a third of their rate at 1 GiB; the same trees both ways (60 GB/s
    too) run faster (by a quarter when this was written)."""
    t = induced(build_machine("dgx1v"), ["gpu0", "gpu1", "gpu2", "gpu5", "gpu6", "gpu7"])
    r = synthesize(t, "allreduce", "trees", size=GiB)
    assert any("on the same" in n and "each used both ways" in n for n in r.notes), r.notes
    assert all(tuple(h.path) == t.route(h.src, h.dst).path for tree in r.trees for h in tree.hops)
    assert verify_algorithm(r.algorithm).ok
    assert_executes(r.algorithm, seed=3)
    monkeypatch.setattr("arborcc.synth.strategies.trees.SAME_TREES_MOST_RANKS", 0)
    split = synthesize(t, "allreduce", "trees", size=GiB)
    assert not any("on the same" in n for n in split.notes)
    assert r.time == pytest.approx(time_as_written(r.algorithm, t, GiB), rel=1e-9)
    assert r.time < time_as_written(split.algorithm, t, GiB)
