"""The ``direct`` all-to-all strategy: all pairs, every block straight to its destination
(:mod:`arborcc.synth.alltoall`; the library's direct all-to-all,
:func:`arborcc.library.direct.trace_direct_alltoall`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arborcc.synth.result import SynthesisRequest, SynthesisResult


def synth_direct(request: SynthesisRequest) -> SynthesisResult:
    """All-to-all with every block sent straight to its destination."""
    from arborcc.synth.alltoall import check_thread_blocks, lower_direct
    from arborcc.synth.result import SynthesisResult

    n = request.topology.num_ranks
    check_thread_blocks("direct", 2 * (n - 1) + 1, request.dialect)
    lowered = lower_direct(request.topology, "direct-alltoall")
    return SynthesisResult.from_lowered("direct", request, lowered, [])
