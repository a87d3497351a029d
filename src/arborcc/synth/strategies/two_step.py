"""The ``two-step`` all-to-all strategy: GC3 section 7.3, gather on the GPU of the
destination's index, one aggregated transfer per rail peer (:mod:`arborcc.synth.alltoall`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arborcc.synth.result import SynthesisRequest, SynthesisResult


def synth_two_step(request: SynthesisRequest) -> SynthesisResult:
    """GC3's two-step all-to-all on a cluster of equal hosts (:mod:`arborcc.synth.alltoall`)."""
    from arborcc.synth.alltoall import check_consecutive_hosts, check_thread_blocks, lower_two_step
    from arborcc.synth.hosts import cluster_of
    from arborcc.synth.result import SynthesisResult

    cluster = cluster_of(request.topology)
    check_consecutive_hosts(cluster, "two-step")
    check_thread_blocks("two-step", 2 * (cluster.per_host - 1) + 2 * (cluster.num_hosts - 1) + 1, request.dialect)
    return SynthesisResult.from_lowered("two-step", request, lower_two_step(cluster, "two-step-alltoall"), [])
