"""The ``halving-doubling`` strategy: recursive halving + doubling (Thakur, Rabenseifner &
Gropp, IJHPCA 2005, https://doi.org/10.1177/1094342005051521; power-of-two ranks), from
the algorithm library (:mod:`arborcc.library.halving_doubling`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arborcc.synth.result import SynthesisRequest, SynthesisResult


def synth_halving_doubling(request: SynthesisRequest) -> SynthesisResult:
    """Recursive halving reduce-scatter + recursive doubling all-gather (Thakur,
    Rabenseifner & Gropp; BlueConnect eq. 2) in rank order, from the algorithm library."""
    from arborcc.errors import SynthesisError
    from arborcc.library.halving_doubling import hd_allreduce
    from arborcc.sim.bandwidth import steady_state_bandwidth
    from arborcc.synth.lower_emit import lowering_in_place
    from arborcc.synth.result import SynthesisResult

    topology = request.topology
    n = topology.num_ranks
    if n & (n - 1):
        raise SynthesisError(f"halving-doubling needs a power-of-two rank count, {topology.name} has {n}")
    algo = hd_allreduce(n, inplace=lowering_in_place()).algorithm
    estimate = steady_state_bandwidth(algo, topology)
    return SynthesisResult("halving-doubling", request.collective, algo, request.bound.algbw, estimate.algbw,
                           chunks=algo.chunks_per_loop, notes=["recursive halving-doubling in rank order"])
