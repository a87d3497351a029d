"""Shallower trees of one root (``arborcc.synth.trees.shallower``): a rank's hops in two
trees of the same weight change places where that lowers the deepest tree's depth (then
the depths summed), so every link carries what it carried and the packing keeps its rate;
the tree lowerings then fill and drain their pipelines through fewer hops."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings

from arborcc.synth.packing import pack_broadcast, pack_reduce
from arborcc.synth.trees import Hop, Tree, check_packing, shallower
from arborcc.topology.machines import build_machine
from support.topologies import nvlink_pcie_box


def loads(trees) -> Counter:
    load = Counter()
    for t in trees:
        for link, uses in t.link_use().items():
            load[link] += uses * t.weight
    return load


def depths(trees) -> tuple[int, int]:
    return max(t.depth() for t in trees), sum(t.depth() for t in trees)


def chain(root: str, order: list[str], weight: float) -> Tree:
    """The path root -> order[0] -> order[1] -> ..., one hop per pair."""
    hops, prev = [], root
    for v in order:
        hops.append(Hop(prev, v, (prev, v)))
        prev = v
    return Tree(root, tuple(hops), weight)


def test_two_chains_become_two_shallow_trees_on_the_same_links():
    """a -> b -> c -> d and a -> c -> b -> d: exchanging d's hops gives both depth 2."""
    one, two = chain("a", ["b", "c", "d"], 1.0), chain("a", ["c", "b", "d"], 1.0)
    out = shallower([one, two])
    assert depths([one, two]) == (3, 6) and depths(out) == (2, 4)
    assert out[0].parent()["d"] == "b" and out[1].parent()["d"] == "c"
    assert loads(out) == loads([one, two]) and [t.weight for t in out] == [1.0, 1.0]


def test_trees_of_other_weights_keep_their_hops():
    one, two = chain("a", ["b", "c", "d"], 1.0), chain("a", ["c", "b", "d"], 2.0)
    assert shallower([one, two]) == [one, two]


def test_the_dgx1v_broadcast_from_gpu0_is_at_most_four_hops_deep():
    """The six NVLink trees column generation meets first hold a chain of six hops;
    the packing returns them at depth 4 at most, each still one lane wide."""
    dgx = build_machine("dgx1v")
    packing = pack_broadcast(dgx, "gpu0", links="nvlink")
    check_packing(packing, dgx, "nvlink")
    assert packing.rate == 150e9 and len(packing.trees) == 6
    assert max(t.depth() for t in packing.trees) <= 4


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nvlink_pcie_box(3, 6))
def test_exchanges_keep_every_link_load_and_never_deepen(t):
    """On random NVLink + PCIe boxes, the trees the packings find before the exchanges
    (broadcast on the runtime routes, reduce over every link) against after them."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("arborcc.synth.packing.shallower", list)
        packings = [pack_broadcast(t, 0, routed=True), pack_reduce(t, 0, minimize_trees=False)]
    for packing in packings:
        after = shallower(packing.trees)
        check_packing(replace(packing, trees=tuple(after)), t)
        assert [x.weight for x in after] == [x.weight for x in packing.trees]
        # trees whose weights agree to 7 digits count as equal
        assert loads(after) == pytest.approx(loads(packing.trees), rel=1e-6)
        assert depths(after) <= depths(packing.trees)
