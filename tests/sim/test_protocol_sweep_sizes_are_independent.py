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


def test_a_time_to_beat_leaves_the_fastest_protocol_or_says_none_beats_it():
    """``beat``: the same fastest protocol and time where it is faster than the time to
    beat; where it is not, None or (when every protocol was simulated) the same answer."""
    from arborcc.sim import protocol_choice

    topology = build_cluster("dgx-a100", 2)
    algo = synthesize(topology, "allgather", "nccl-ring", timed=False).algorithm
    for size in (MIB, 64 * MIB):
        [free] = protocol_sweep(algo, topology, [size])
        [faster] = protocol_sweep(algo, topology, [size], beat=free.time * 1.01)
        assert (faster.protocol, faster.time) == (free.protocol, free.time)
        for beat in (free.time, free.time / 2):
            [slower] = protocol_sweep(algo, topology, [size], beat=beat)
            assert slower is None or (slower.protocol, slower.time) == (free.protocol, free.time)
    seconds_per_byte = protocol_choice.link_load_seconds_per_byte(algo, topology)
    simulated = []
    real = protocol_choice.simulate
    try:  # below every protocol's least time: nothing is simulated
        protocol_choice.simulate = lambda *a, **k: simulated.append(a) or real(*a, **k)
        assert protocol_sweep(algo, topology, [64 * MIB], beat=64 * MIB * seconds_per_byte) == [None]
    finally:
        protocol_choice.simulate = real
    assert simulated == []
