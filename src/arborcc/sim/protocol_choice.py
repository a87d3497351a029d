"""The fastest protocol for an algorithm at each size, with few simulations.

``protocol_sweep`` simulates an algorithm over sizes with one protocol, or with ``auto``
with the fastest protocol (LL, LL128, Simple) per size - what ``arborcc compare``,
``tune`` and ``synth`` (the protocol its file is written with) choose by. Pruning:

* sizes are taken in increasing order, and a protocol that is more than :data:`PRUNE`
  times slower at some size than a protocol with more bandwidth (LL < LL128 < Simple)
  is not tried at larger sizes: with time = latency + size / bandwidth the faster one's
  lead only grows with size;
* the other way round, a protocol whose time at a smaller size already exceeds
  :data:`FLOOR_PRUNE` times the best time found at this size is not simulated at this
  size (a call does not get faster with more bytes; the margin covers the small dips
  where one more pipelined iteration starts); the last size's winner is simulated first;
* given ``least_seconds_per_byte`` (the least time per byte the algorithm's link loads
  allow at full wire efficiency, :func:`arborcc.sim.bandwidth.attainable_algbw`), a
  protocol whose least time at a size (that time over its wire efficiency: LL moves half
  a payload byte per wire byte) is already no less than the best time found there is
  not simulated: no simulation beats its link loads. At one size (``synth``) the
  protocols go in the order of that least time plus their base latency.

On the 8-GPU DGX-1V sweep of every strategy (8 B - 1 GiB) the first two rules choose
the same protocol at every size as simulating all three, with about 30% fewer
simulations.
"""

from __future__ import annotations

from typing import Sequence

from arborcc.ir.model import Algorithm
from arborcc.sim.fidelity import Fidelity
from arborcc.sim.protocols import PROTOCOL_MODELS, protocol_name
from arborcc.sim.simulate import SimResult, simulate
from arborcc.topology.model import Topology

PRUNE = 1.05
FLOOR_PRUNE = 1.5
#: protocols from the least bandwidth to the most
BY_BANDWIDTH = ("LL", "LL128", "Simple")


def protocol_sweep(algo: Algorithm, topology: Topology, sizes: Sequence[int], protocol: str = "auto",
                   fidelity: Fidelity | None = None, routes: dict | None = None, instances: int = 1,
                   least_seconds_per_byte: float | None = None,
                   protocols: Sequence[str] = BY_BANDWIDTH) -> list[SimResult]:
    """The simulated call at every size with ``protocol``, or with ``auto`` the fastest
    of ``protocols`` per size (pruned as the module doc says)."""
    if protocol != "auto":
        proto = protocol_name(protocol)
        return [simulate(algo, topology, s, proto, fidelity, instances, routes) for s in sizes]

    def least(p: str, s: int) -> float:
        """No call of ``s`` bytes with ``p`` is faster (0 when the link loads are unknown)."""
        return (s * least_seconds_per_byte / PROTOCOL_MODELS[p].wire_efficiency
                if least_seconds_per_byte else 0.0)

    alive = [p for p in BY_BANDWIDTH if p in {protocol_name(q) for q in protocols}]
    best_at: dict[int, SimResult] = {}
    last: dict[str, float] = {}  # each protocol's time at the largest size it was simulated at
    winner = None
    for s in sorted(sizes):
        got: dict[str, SimResult] = {}
        order = sorted(alive, key=lambda p: (p != winner, least(p, s) + PROTOCOL_MODELS[p].base_latency))
        for p in order:
            if got:
                best = min(r.time for r in got.values())
                if p in last and last[p] > FLOOR_PRUNE * best:
                    continue  # slower at a smaller size than the best here by the margin
                if least(p, s) >= best:
                    continue  # its link loads alone take longer than the best here
            got[p] = simulate(algo, topology, s, p, fidelity, instances, routes)
            last[p] = got[p].time
        results = [got[p] for p in alive if p in got]
        best_at[s] = min(results, key=lambda r: r.time)
        winner = best_at[s].protocol
        slower = {r.protocol for i, r in enumerate(results) if any(r.time > PRUNE * q.time for q in results[i + 1:])}
        alive = [p for p in alive if p not in slower]
    return [best_at[s] for s in sizes]


def time_as_written(algo: Algorithm, topology: Topology, size: int) -> float:
    """Seconds ``algo``'s file takes at ``size`` bytes as it runs: no routes (a file names
    none), its fastest protocol there - the time synth reports and ``arborcc simulate``
    gives. A protocol whose link loads alone take longer than the fastest simulated is not
    simulated (as ``auto`` ranks: the least is the same; LL at 1 GiB took 8 s of the 9 s a
    DGX-1V candidate's sweep took)."""
    from arborcc.sim.bandwidth import attainable_algbw, steady_state_bandwidth
    from arborcc.sim.fidelity import fidelity_for

    algbw = attainable_algbw(steady_state_bandwidth(algo, topology), topology, fidelity_for(topology).efficiency)
    return protocol_sweep(algo, topology, [size], protocols=BY_BANDWIDTH, least_seconds_per_byte=1 / algbw)[0].time
