"""The ``hierarchical`` strategy: the two-level reduce-scatter / all-gather baseline (in
each node, then across nodes; :mod:`arborcc.synth.lower_stages`), traced as the library's
staged all-reduce (:mod:`arborcc.library.staged`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arborcc.synth.result import SynthesisRequest, SynthesisResult


def synth_hierarchical(request: SynthesisRequest) -> SynthesisResult:
    """The two-level baseline: reduce-scatter inside each node, reduce-scatter and
    all-gather across nodes between GPUs of equal local index, all-gather inside."""
    from arborcc.errors import SynthesisError
    from arborcc.synth.hosts import cluster_of
    from arborcc.synth.lower_stages import hierarchical_plan, lower_blueconnect
    from arborcc.synth.result import SynthesisResult

    try:  # on a cluster of equal hosts, its host-local routes and rails (fast at any size)
        path = cluster_of(request.topology).path
    except SynthesisError:
        path = None
    lowered = lower_blueconnect(request.topology, hierarchical_plan(request.topology, path=path),
                                "hierarchical-allreduce", path=path)
    return SynthesisResult.from_lowered("hierarchical", request, lowered,
                                        ["reduce-scatter in each node, then across nodes, all-gather back"])
