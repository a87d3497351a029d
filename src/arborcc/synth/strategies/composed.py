"""The ``composed`` strategy: on clusters of equal hosts, per-host one-hop trees composed
with balanced rail schedules across the hosts (:mod:`arborcc.synth.composed`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arborcc.synth.result import SynthesisRequest, SynthesisResult


def synth_composed(request: SynthesisRequest) -> SynthesisResult:
    """Clusters of equal hosts: per-host one-hop trees composed with balanced rail
    schedules across the hosts (:mod:`arborcc.synth.composed`); optimal when the
    inter-host cut is the bottleneck, a few hundred steps per rank on 1024 GPUs."""
    from arborcc.synth import composed as C
    from arborcc.synth.hosts import cluster_of
    from arborcc.synth.lower_search import within_limits
    from arborcc.synth.result import SynthesisResult

    cluster = cluster_of(request.topology)
    collective, root, name = request.collective, request.root, f"composed-{request.collective}"
    lower, args = {
        "allreduce": (C.lower_composed_allreduce, (cluster, name)),
        "allgather": (C.lower_composed_allgather, (cluster, name)),
        "reducescatter": (C.lower_composed_reducescatter, (cluster, name)),
        "broadcast": (C.lower_composed_broadcast, (cluster, root, name)),
        "reduce": (C.lower_composed_reduce, (cluster, root, name)),
        "gather": (C.lower_composed_gather, (cluster, root, name)),
        "scatter": (C.lower_composed_scatter, (cluster, root, name)),
    }[collective]
    lowered = within_limits(lower, *args, dialect=request.dialect) if request.dialect else lower(*args)
    return SynthesisResult.from_lowered("composed", request, lowered, [])
