"""A strategy returns variants (ways of writing one schedule that only the simulator tells
apart) only where ``synthesize`` times them: above ``registry.SIMULATED_RANKS`` ranks the
request says it will not (``variants_timed``), and composed's broadcast and nccl-ring's
lanes then build their first variant alone."""

from __future__ import annotations

import pytest

from arborcc.synth.bounds import collective_bound
from arborcc.synth.registry import BY_NAME, SIMULATED_RANKS
from arborcc.synth.result import SynthesisRequest
from arborcc.synth.synthesis import synthesize
from arborcc.topology.cluster import build_cluster


@pytest.mark.parametrize("strategy,collective,nodes", [("composed", "broadcast", 2), ("nccl-ring", "allreduce", 5)])
def test_variants_are_built_only_where_they_are_timed(strategy, collective, nodes):
    topology = build_cluster("dgx-a100", nodes)
    bound = collective_bound(topology, collective, 0, "all")
    timed = BY_NAME[strategy].function(SynthesisRequest(topology, collective, bound))
    untimed = BY_NAME[strategy].function(SynthesisRequest(topology, collective, bound, variants_timed=False))
    assert len(timed.variants) == 2 and timed.algorithm is next(iter(timed.variants.values()))
    assert not untimed.variants
    assert untimed.algorithm.chunks_per_loop == timed.algorithm.chunks_per_loop  # the first variant


def test_synthesize_asks_for_variants_up_to_the_simulated_ranks(monkeypatch):
    import arborcc.synth.synthesis as synthesis

    topology = build_cluster("dgx-a100", 2)
    assert topology.num_ranks <= SIMULATED_RANKS
    timed = synthesize(topology, "broadcast", "composed", size=64 << 20)
    assert any(n.startswith("written as") for n in timed.notes)
    monkeypatch.setattr(synthesis, "SIMULATED_RANKS", topology.num_ranks - 1)
    untimed = synthesize(topology, "broadcast", "composed", size=64 << 20, timed=False)
    assert not any(n.startswith("written as") for n in untimed.notes)
    assert untimed.chunks == 56
