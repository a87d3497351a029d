"""The ``composed`` strategy: on clusters of equal hosts, per-host one-hop trees composed
with balanced rail schedules across the hosts (:mod:`arborcc.synth.composed`)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arborcc.synth.result import SynthesisRequest, SynthesisResult


def synth_composed(request: SynthesisRequest) -> SynthesisResult:
    """Clusters of equal hosts: per-host one-hop trees composed with balanced rail
    schedules across the hosts (:mod:`arborcc.synth.composed`); optimal when the
    inter-host cut is the bottleneck, a few hundred steps per rank on 1024 GPUs.

    Broadcast and reduce come in two variants (:attr:`SynthesisResult.variants`), which
    ``synthesize`` times at the request's size: pieces of G - 1 chunks, and pieces of as
    many chunks as the runtime's steps per thread block allow (only the first where
    variants are not timed, :attr:`SynthesisRequest.variants_timed`). Smaller chunks hold each
    host of a chain back less at sizes where they are smaller than the runtime's slice;
    every step costs a little latency (16 x DGX H100 broadcast, each with its fastest
    protocol: 56 chunks take 122.2 us at 1 MiB and 448 take 130.4; at 64 MiB 501.3 and
    354.2 us)."""
    from arborcc.ir.limits import runtime_caps
    from arborcc.synth import composed as C
    from arborcc.synth.hosts import cluster_of
    from arborcc.synth.lower_search import within_limits
    from arborcc.synth.result import SynthesisResult

    cluster = cluster_of(request.topology)
    collective, root, name = request.collective, request.root, f"composed-{request.collective}"

    def lowered(lower, *args, **kwargs):
        if request.dialect:
            return within_limits(partial(lower, **kwargs), *args, dialect=request.dialect)
        return lower(*args, **kwargs)

    if collective in ("broadcast", "reduce"):
        lower = C.lower_composed_broadcast if collective == "broadcast" else C.lower_composed_reduce
        most = C.piece_rounds_most(cluster, runtime_caps(request.dialect).steps_per_threadblock)
        variants = {}
        for rounds in sorted({1, most if request.variants_timed else 1}):
            low = lowered(lower, cluster, root, name, rounds=rounds)
            variants[f"{low.chunks} chunks"] = low
        first = next(iter(variants.values()))
        result = SynthesisResult.from_lowered("composed", request, first, [])
        if len(variants) > 1:
            result.variants = {label: low.algorithm for label, low in variants.items()}
        return result
    lower, args = {
        "allreduce": (C.lower_composed_allreduce, (cluster, name)),
        "allgather": (C.lower_composed_allgather, (cluster, name)),
        "reducescatter": (C.lower_composed_reducescatter, (cluster, name)),
        "gather": (C.lower_composed_gather, (cluster, root, name)),
        "scatter": (C.lower_composed_scatter, (cluster, root, name)),
    }[collective]
    return SynthesisResult.from_lowered("composed", request, lowered(lower, *args), [])
