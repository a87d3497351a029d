"""Broadcast on switch machines (DGX-2, DGX A100, DGX H100): the root scatters its buffer
over the other GPUs and each forwards its piece to all the others - trees of depth 2
whose ports each carry the buffer once - lowered so that relays forward to all their
children at once, with a power-of-two chunk count."""

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborcc.ir.model import Op
from arborcc.sim.fidelity import efficiency_adjusted
from arborcc.sim.simulate import simulate
from arborcc.synth import synthesize
from arborcc.synth.bounds import collective_bound
from arborcc.synth.trees import check_tree, common_switch, switch_broadcast_trees
from arborcc.topology.allocation import induced, resolve_gpus
from arborcc.topology.cluster import build_cluster
from arborcc.topology.machines import build_machine
from arborcc.verify import verify_algorithm
from support.execution import assert_executes
from support.shared_work import once

GiB, MiB = 1 << 30, 1 << 20


def allocation(machine: str, gpus: str):
    t = build_machine(machine)
    return induced(t, resolve_gpus(t, gpus))


@pytest.fixture
def broadcast_at_one_gib(tmp_path_factory):
    """``synthesize(machine, "broadcast", "trees", size=GiB)`` by machine, made once in the
    session (two tests here look at DGX-2's): each call gets its own copy."""
    def made(machine: str):
        return once(tmp_path_factory, f"switch-broadcast-trees-{machine}-1GiB",
                    lambda: synthesize(build_machine(machine), "broadcast", "trees", size=GiB))
    return made


def port_loads(trees) -> Counter:
    use: Counter = Counter()
    for t in trees:
        use.update(t.link_use())
    return use


@pytest.mark.parametrize("machine,ranks", [("dgx-h100", 8), ("dgx-a100", 8), ("dgx2", 16)])
def test_switch_trees_are_one_star_per_other_rank_plus_trees_to_a_power_of_two(machine, ranks):
    t = build_machine(machine)
    trees = switch_broadcast_trees(t, t.ranks[0])
    chunks = 1 << (ranks - 2).bit_length()
    assert len(trees) == chunks
    for k, tree in enumerate(trees[:ranks - 1]):  # the stars: the root's only child relays to all
        check_tree(tree, t)
        assert tree.depth() == 2
        relay = t.ranks[k + 1]
        assert [h.dst for h in tree.hops if h.src == t.ranks[0]] == [relay]
        assert sorted(h.dst for h in tree.hops if h.src == relay) == sorted(set(t.ranks) - {t.ranks[0], relay})
    for tree in trees[ranks - 1:]:
        check_tree(tree, t)
        assert sum(1 for h in tree.hops if h.src == t.ranks[0]) == 1
    # one chunk per tree: no port carries more than the chunk count, the root's and every
    # port into a rank exactly that many: the buffer once
    loads = port_loads(trees)
    assert max(loads.values()) == chunks
    switch = common_switch(t)
    assert loads[(t.ranks[0], switch)] == chunks
    assert all(loads[(switch, g)] == chunks for g in t.ranks[1:])
    port = t.links[(t.ranks[0], switch)].bandwidth
    assert sum(tree.weight for tree in trees) == pytest.approx(port)


@pytest.mark.parametrize("machine", ["dgx-a100", "dgx-h100"])
@pytest.mark.parametrize("gpus", ["0,1", "0,1,2", "1,3,5,7", "0,2,3,4,6", "0,1,2,3,4,5", "1,2,3,4,5,6,7"])
def test_switch_trees_of_every_allocation_size_keep_every_port_at_the_chunk_count(machine, gpus):
    t = allocation(machine, gpus)
    n = t.num_ranks
    for root in (t.ranks[0], t.ranks[-1]):
        trees = switch_broadcast_trees(t, root)
        chunks = len(trees)
        assert chunks & (chunks - 1) == 0 and n - 1 <= chunks < 2 * max(1, n - 1)
        for tree in trees:
            check_tree(tree, t)
        assert max(port_loads(trees).values()) == chunks


@pytest.mark.parametrize("topology", [build_machine("dgx1v"), build_machine("dgx1p"),
                                      build_cluster("dgx-a100", 2)], ids=["dgx1v", "dgx1p", "2 x dgx-a100"])
def test_no_switch_trees_where_ranks_do_not_share_one_switch(topology):
    assert common_switch(topology) is None
    assert switch_broadcast_trees(topology, topology.ranks[0]) is None


@pytest.mark.parametrize("machine,root", [("dgx-a100", 0), ("dgx-h100", 5)])
def test_switch_broadcast_verifies_and_computes_the_broadcast(machine, root):
    r = synthesize(build_machine(machine), "broadcast", "trees", root=root, size=MiB)
    assert verify_algorithm(r.algorithm).ok
    chunks = r.algorithm.chunks_per_loop
    assert chunks & (chunks - 1) == 0
    assert_executes(r.algorithm, seed=root)


def test_switch_broadcast_relays_forward_to_all_children_from_their_receive():
    """No relay fuses its receive with a send: every send of a relay waits on its receive
    step alone, so all its children are served at once."""
    algo = synthesize(build_machine("dgx-h100"), "broadcast", "trees", size=GiB).algorithm
    for prog in algo.ranks[1:]:
        ops = {st.op for tb in prog.threadblocks for st in tb.steps}
        assert Op.RECV in ops and Op.SEND in ops
        assert not any(op.sends and op.receives for op in ops)


@pytest.mark.parametrize("machine", ["dgx-a100", "dgx2"])
def test_switch_broadcast_reaches_nine_tenths_of_the_adjusted_bound_at_one_gib(machine, broadcast_at_one_gib):
    t = build_machine(machine)
    r = broadcast_at_one_gib(machine)
    adjusted = collective_bound(efficiency_adjusted(t), "broadcast").algbw
    assert simulate(r.algorithm, t, GiB).algbw >= 0.9 * adjusted


def test_switch_broadcast_pipelines_a_64_mib_call_in_small_transfers(broadcast_at_one_gib):
    """At 64 MiB the chunks of the 16-chunk schedule are a full slice each and a relay
    forwards only what it has whole: the candidate of more, smaller transfers is chosen."""
    t = build_machine("dgx2")
    r = synthesize(t, "broadcast", "trees", size=64 * MiB)
    assert r.algorithm.chunks_per_loop > 16
    few = broadcast_at_one_gib("dgx2")
    assert few.algorithm.chunks_per_loop == 16
    assert simulate(r.algorithm, t, 64 * MiB).time < simulate(few.algorithm, t, 64 * MiB).time


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["dgx-a100", "dgx-h100", "dgx2"]), st.data())
def test_random_switch_allocations_broadcast_from_any_root_verifies_and_computes(machine, data):
    t = build_machine(machine)
    gpus = data.draw(st.lists(st.sampled_from(range(len(t.ranks))), min_size=2, max_size=len(t.ranks), unique=True))
    t = allocation(machine, ",".join(map(str, sorted(gpus))))
    root = data.draw(st.integers(0, t.num_ranks - 1))
    trees = switch_broadcast_trees(t, t.ranks[root])
    assert max(port_loads(trees).values()) == len(trees)
    r = synthesize(t, "broadcast", "trees", root=root, size=data.draw(st.sampled_from([MiB, 64 * MiB])))
    assert r.trees == trees and r.algorithm.chunks_per_loop % len(trees) == 0
    assert verify_algorithm(r.algorithm).ok
    assert_executes(r.algorithm, seed=root)


@pytest.mark.parametrize("machine", ["dgx2", "dgx-a100", "dgx-h100"])
def test_every_allocation_size_and_root_of_a_switch_machine_gets_switch_trees(machine):
    """The extra trees fit every rank's forwarding budget at every allocation size (DGX-2
    at 14-15 GPUs needs the least loaded parents first), so that no port carries more
    than the chunk count."""
    whole = build_machine(machine)
    for n in range(2, whole.num_ranks + 1):
        t = allocation(machine, ",".join(map(str, range(n))))
        for root in t.ranks:
            trees = switch_broadcast_trees(t, root)
            assert trees is not None, (n, root)
            assert max(port_loads(trees).values()) == len(trees)
