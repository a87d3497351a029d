"""The ``three-phase`` strategy: Blink's multi-server all-reduce (MLSys 2020, section 3.5;
:mod:`arborcc.synth.three_phase`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arborcc.synth.result import SynthesisRequest, SynthesisResult


def synth_three_phase(request: SynthesisRequest) -> SynthesisResult:
    """Blink's multi-server all-reduce (section 3.5, Figure 10): per-server trees reduce
    each partition into a local root, the roots all-reduce it across servers over
    one-hop trees, and each root broadcasts it back over the server's trees."""
    from arborcc.synth.result import SynthesisResult
    from arborcc.synth.three_phase import synth_three_phase as three_phase

    tp = three_phase(request.topology, request.links)
    return SynthesisResult.from_lowered("three-phase", request, tp.lowered, tp.notes, tp.trees, tp.counts)
