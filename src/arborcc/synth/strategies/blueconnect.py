"""The ``blueconnect`` strategy: BlueConnect (Cho et al., SysML 2019) section 3, Algorithm 1:
stages along the hierarchy (:mod:`arborcc.synth.blueconnect`, :mod:`arborcc.synth.lower_stages`), traced as
the library's staged all-reduce (:mod:`arborcc.library.staged`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arborcc.synth.result import SynthesisRequest, SynthesisResult


def synth_blueconnect(request: SynthesisRequest) -> SynthesisResult:
    """BlueConnect (Cho et al., SysML 2019, section 3): the rank count factored along the
    hierarchy, reduce-scatter stages up and all-gather stages down (Algorithm 1), ring or
    halving-doubling per stage as its model (eqs. 1-10) prefers for large messages."""
    from arborcc.synth.blueconnect import RING, choose_blueconnect
    from arborcc.synth.lower_stages import describe, hierarchical_plan, lower_blueconnect
    from arborcc.synth.result import SynthesisResult
    from arborcc.verify.pieces import deadlock_free

    topology = request.topology
    # the full factor search costs seconds per hundred ranks; beyond that follow the hosts
    plan = (choose_blueconnect(topology, 1 << 30) if topology.num_ranks <= 128
            else hierarchical_plan(topology, algorithm=None, name="blueconnect"))
    lowered = lower_blueconnect(topology, plan, "blueconnect-allreduce")
    notes = [describe(plan)]
    if lowered.pieces_fallback or not deadlock_free(lowered.algorithm):
        # partners of halving-doubling exchanging long steps can fill each other's FIFOs
        # once the runtimes cut steps into pieces (on 128 x 8 A100); rings move one chunk at a time
        rings = hierarchical_plan(topology, algorithm=RING, name="blueconnect")
        notes = [describe(rings), f"{describe(plan)} would deadlock with steps cut into the runtimes' pieces: "
                                  "ring stages instead"]
        lowered = lower_blueconnect(topology, rings, "blueconnect-allreduce")
    return SynthesisResult.from_lowered("blueconnect", request, lowered, notes)
