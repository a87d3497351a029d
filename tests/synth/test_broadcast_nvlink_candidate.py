"""Broadcast trees on NVLink + PCIe machines: a packing over every link routes hops over
PCIe between GPUs an NVLink joins, which the file (MSCCL XML names no route) sends over
the NVLink; the trees over NVLink alone replace it where their file simulates at least
10% faster."""

from arborcc.sim.simulate import simulate
from arborcc.synth import synthesize
from arborcc.topology.machines import build_machine
from arborcc.verify import verify_algorithm
from support.execution import assert_executes

MiB = 1 << 20


def test_dgx1p_broadcast_takes_the_nvlink_trees_where_their_file_is_faster(monkeypatch):
    t = build_machine("dgx1p")
    r = synthesize(t, "broadcast", "trees", size=64 * MiB)
    assert any("over NVLink alone" in n for n in r.notes), r.notes
    assert all(l.kind.value == "nvlink" for tree in r.trees for h in tree.hops for l in
               (t.links[k] for k in h.links()))
    assert verify_algorithm(r.algorithm).ok
    assert_executes(r.algorithm, seed=2)
    monkeypatch.setattr("arborcc.synth.strategies.trees.PIPELINED_MARGIN", 0.0)  # the packing over every link
    every_link = synthesize(t, "broadcast", "trees", size=64 * MiB)
    assert not any("over NVLink alone" in n for n in every_link.notes)
    assert simulate(r.algorithm, t, 64 * MiB).time <= 0.9 * simulate(every_link.algorithm, t, 64 * MiB).time


def test_nvlink_only_machines_keep_the_packing():
    r = synthesize(build_machine("dgx1v"), "broadcast", "trees", links="nvlink", size=64 * MiB)
    assert not any("over NVLink alone" in n for n in r.notes)
