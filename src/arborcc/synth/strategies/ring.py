"""The ``ring`` strategy: one ring in rank order (Patarasuk & Yuan, "Bandwidth optimal
all-reduce algorithms for clusters of workstations", JPDC 2009,
https://doi.org/10.1016/j.jpdc.2008.09.002)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arborcc.synth.result import SynthesisRequest, SynthesisResult


def synth_ring(request: SynthesisRequest) -> SynthesisResult:
    """One ring in rank order (Patarasuk & Yuan's bandwidth-optimal ring all-reduce)."""
    from arborcc.synth.lower_emit import lower_ring_allreduce
    from arborcc.synth.result import SynthesisResult

    n = request.topology.num_ranks
    lowered = lower_ring_allreduce(request.topology, [list(range(n))], None, "ring-allreduce")
    return SynthesisResult.from_lowered("ring", request, lowered, ["one ring in rank order"])
