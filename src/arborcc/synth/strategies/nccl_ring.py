"""The ``nccl-ring`` strategy: the rings NCCL's search builds (:mod:`arborcc.synth.nccl_rings`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arborcc.synth.result import SynthesisRequest, SynthesisResult


def synth_nccl_ring(request: SynthesisRequest) -> SynthesisResult:
    """The rings NCCL would build (NVLink-only when possible), as MSCCL channels."""
    from arborcc.synth.lower_emit import lower_ring_allreduce
    from arborcc.synth.nccl_rings import nccl_rings
    from arborcc.synth.result import SynthesisResult
    from arborcc.synth.strategies.nccl_notes import NOTED_PROTOCOL, nccl_prediction

    rings = nccl_rings(request.topology)
    lowered = lower_ring_allreduce(request.topology, rings.rings, rings.hops or None, "nccl-ring-allreduce")
    notes = [f"{len(rings.rings)} rings over {rings.link_kind.value}"]
    if request.size is not None:
        notes.append(nccl_prediction(rings.nccl_estimate(request.collective, NOTED_PROTOCOL, request.size),
                                     request.size))
    return SynthesisResult.from_lowered("nccl-ring", request, lowered, notes)
