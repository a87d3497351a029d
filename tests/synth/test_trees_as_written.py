"""Trees a file runs as planned. A packing over every link routes hops over PCIe between
GPUs an NVLink joins, which the file (MSCCL XML names no route) sends over the NVLink.
Packings whose hops the file takes as planned replace it where their file simulates
faster: the trees whose every hop takes its pair's runtime route (which also
use the routes between GPUs no NVLink joins), and for broadcast and reduce the trees over
NVLink alone."""

import pytest

from arborcc.sim.simulate import simulate
from arborcc.synth import synthesize
from arborcc.synth.packing import pack_broadcast, pack_reduce
from arborcc.synth.route_bounds import file_bound
from arborcc.topology.allocation import induced
from arborcc.topology.machines import build_machine
from arborcc.verify import verify_algorithm
from support.execution import assert_executes

MiB = 1 << 20
AS_WRITTEN = ("over NVLink alone", "on the runtime's routes")


def blink_fragment():
    """DGX-1V GPUs 0, 1, 4, 5: two NVLink pairs per socket side, the other pairs across the CPUs."""
    return induced(build_machine("dgx1v"), ["gpu0", "gpu1", "gpu4", "gpu5"])


def on_runtime_routes(topology, trees) -> bool:
    return all(tuple(h.path) == topology.route(h.src, h.dst).path for t in trees for h in t.hops)


@pytest.mark.parametrize("machine", ["dgx1p", "dgx1v-0145"])
def test_broadcast_takes_trees_the_file_runs_as_planned_where_they_are_faster(monkeypatch, machine):
    t = blink_fragment() if machine == "dgx1v-0145" else build_machine(machine)
    r = synthesize(t, "broadcast", "trees", size=64 * MiB)
    assert any(label in n for n in r.notes for label in AS_WRITTEN), r.notes
    assert on_runtime_routes(t, r.trees)
    assert r.planned_time is None  # nothing planned that the file loses
    assert verify_algorithm(r.algorithm).ok
    assert_executes(r.algorithm, seed=2)
    monkeypatch.setattr("arborcc.synth.strategies.trees.PIPELINED_MARGIN", 0.0)  # the packing over every link
    every_link = synthesize(t, "broadcast", "trees", size=64 * MiB)
    assert not any(label in n for n in every_link.notes for label in AS_WRITTEN)
    assert not on_runtime_routes(t, every_link.trees)
    assert simulate(r.algorithm, t, 64 * MiB).time < simulate(every_link.algorithm, t, 64 * MiB).time


def test_the_fragment_broadcasts_across_the_cpus_beyond_what_nvlink_alone_carries():
    t = blink_fragment()
    r = synthesize(t, "broadcast", "trees", size=1 << 30)
    assert any("on the runtime's routes" in n for n in r.notes), r.notes
    assert any("cpu0" in h.path for tree in r.trees for h in tree.hops)  # gpu0 -> ... -> gpu5
    nvlink_only = pack_broadcast(t, "gpu0", links="nvlink")
    assert r.algbw > nvlink_only.rate * 1.2


@pytest.mark.parametrize("gpus", [None, ["gpu0", "gpu1", "gpu4", "gpu5"], ["gpu0", "gpu2", "gpu4", "gpu6"]])
@pytest.mark.parametrize("machine", ["dgx1v", "dgx1p"])
def test_routed_packings_reach_the_file_bound_on_the_runtime_routes(machine, gpus):
    """Edmonds' theorem on the pair graph: the routed broadcast (and reduce) packing is at
    the file bound, the most any file reaches."""
    t = build_machine(machine)
    t = induced(t, gpus) if gpus else t
    for pack, collective in ((pack_broadcast, "broadcast"), (pack_reduce, "reduce")):
        packing = pack(t, t.ranks[0], routed=True, minimize_trees=False)
        assert on_runtime_routes(t, packing.trees)
        assert packing.rate == pytest.approx(file_bound(t, collective).algbw, rel=1e-6)


def test_nvlink_only_machines_keep_the_packing():
    r = synthesize(build_machine("dgx1v"), "broadcast", "trees", links="nvlink", size=64 * MiB)
    assert not any(label in n for n in r.notes for label in AS_WRITTEN)


@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "allreduce"])
def test_per_root_and_allreduce_trees_take_the_runtime_routes_where_faster_and_compute(collective, monkeypatch):
    """DGX-1V GPUs 0,1,2,5: the packing over every link relays over PCIe beside NVLinks;
    the trees on the runtime's routes run as planned, faster, and compute
    the collective (verifier and the numpy executor). The all-reduce on the link split's
    trees: the same trees both ways are faster still (tests/synth/test_same_trees_allreduce.py)."""
    monkeypatch.setattr("arborcc.synth.strategies.trees.SAME_TREES_MOST_RANKS", 0)
    t = induced(build_machine("dgx1v"), ["gpu0", "gpu1", "gpu2", "gpu5"])
    r = synthesize(t, collective, "trees", size=1 << 30)
    assert any("on the runtime's routes" in n for n in r.notes), r.notes
    assert on_runtime_routes(t, r.trees) and r.planned_time is None
    assert verify_algorithm(r.algorithm).ok
    assert_executes(r.algorithm, seed=4)
    monkeypatch.setattr("arborcc.synth.strategies.trees.PIPELINED_MARGIN", 0.0)  # the packing over every link
    every_link = synthesize(t, collective, "trees", size=1 << 30)
    assert not on_runtime_routes(t, every_link.trees)
    assert r.time < every_link.time
