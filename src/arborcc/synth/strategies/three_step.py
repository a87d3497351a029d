"""The ``three-step`` all-to-all strategy: GC3's three-step, host pairs spread over the
GPUs, gather, one transfer per host pair, scatter (:mod:`arborcc.synth.alltoall`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arborcc.synth.result import SynthesisRequest, SynthesisResult


def synth_three_step(request: SynthesisRequest) -> SynthesisResult:
    """GC3's three-step all-to-all on a cluster of equal hosts (:mod:`arborcc.synth.alltoall`)."""
    from arborcc.synth.alltoall import check_consecutive_hosts, lower_three_step
    from arborcc.synth.hosts import cluster_of
    from arborcc.synth.result import SynthesisResult

    cluster = cluster_of(request.topology)
    check_consecutive_hosts(cluster, "three-step")
    lowered = lower_three_step(cluster, "three-step-alltoall", request.dialect)
    return SynthesisResult.from_lowered("three-step", request, lowered, [])
