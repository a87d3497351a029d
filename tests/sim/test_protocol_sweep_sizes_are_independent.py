"""The fastest protocol at a size does not depend on the other sizes swept with it:
``compare`` over 1M-1G, ``compare`` at one size and ``synth --size`` report one time for
one file at one size (``sim.protocol_choice`` skips only protocols that cannot win)."""

from arborcc.sim.protocol_choice import protocol_sweep
from arborcc.synth.synthesis import synthesize
from arborcc.topology.cluster import build_cluster

MIB = 1 << 20


def test_a_sweep_over_sizes_picks_at_each_size_what_that_size_alone_picks():
    # NCCL's ring broadcast on 2 x 8 A100 is fastest with Simple at 1 MiB and with LL
    # above: a protocol slower than one with more bandwidth at a small size can win later
    topology = build_cluster("dgx-a100", 2)
    algo = synthesize(topology, "broadcast", "nccl-ring", timed=False).algorithm
    sizes = [MIB, 4 * MIB, 16 * MIB, 64 * MIB]
    swept = protocol_sweep(algo, topology, sizes)
    alone = [protocol_sweep(algo, topology, [s])[0] for s in sizes]
    assert [(r.protocol, r.time) for r in swept] == [(r.protocol, r.time) for r in alone]
    assert len({r.protocol for r in swept}) > 1  # the case the test is about: the winner changes with size
