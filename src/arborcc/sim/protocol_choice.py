"""The fastest protocol for an algorithm at each size, with few simulations.

``protocol_sweep`` simulates an algorithm over sizes with one protocol, or with ``auto``
with the fastest protocol (LL, LL128, Simple) per size - what ``arborcc compare``,
``tune`` and ``synth`` (the protocol its file is written with) choose by. Pruning:

* sizes are taken in increasing order, and a protocol whose time at a smaller size
  already exceeds :data:`FLOOR_PRUNE` times the best time found at this size is not
  simulated at this size (a call does not get faster with more bytes; the margin covers
  the small dips where one more pipelined iteration starts); the last size's winner is
  simulated first;
* the least time per byte the algorithm's link loads allow at full wire efficiency
  (``least_seconds_per_byte``, by default worked out here:
  :func:`arborcc.sim.bandwidth.attainable_algbw` of its loads on the routes it runs, at
  the profile's link efficiencies): a protocol whose least time at a size (that time
  over its wire efficiency: LL moves half a payload byte per wire byte) is already no
  less than the best time found there is not simulated, since no simulation beats its
  link loads. The protocols go in the order of that least time plus their base latency.

Each rule skips only a protocol that cannot be the fastest at that size, so the
protocol and time at a size do not depend on which other sizes are swept with it:
``compare`` over 1M-1G and ``synth --size`` agree. (A rule that dropped a protocol for
larger sizes once it was slower than one with more bandwidth assumed time = latency +
size / bandwidth; a pipelined chain breaks it: NCCL's ring broadcast on 2 x 8 A100 is
fastest with Simple at 1 MiB and with LL at 16 MiB, 353 us against Simple's 639.)
"""

from __future__ import annotations

from typing import Sequence

from arborcc.ir.model import Algorithm
from arborcc.sim.fidelity import Fidelity
from arborcc.sim.protocols import PROTOCOL_MODELS, protocol_name
from arborcc.sim.simulate import SimResult, simulate
from arborcc.topology.model import Topology

FLOOR_PRUNE = 1.5
#: protocols from the least bandwidth to the most
BY_BANDWIDTH = ("LL", "LL128", "Simple")


def protocol_sweep(algo: Algorithm, topology: Topology, sizes: Sequence[int], protocol: str = "auto",
                   fidelity: Fidelity | None = None, routes: dict | None = None, instances: int = 1,
                   least_seconds_per_byte: float | None = None,
                   protocols: Sequence[str] = BY_BANDWIDTH, beat: float | None = None) -> list[SimResult | None]:
    """The simulated call at every size with ``protocol``, or with ``auto`` the fastest
    of ``protocols`` per size (pruned as the module doc says). ``beat`` (``auto`` only):
    a time another algorithm already takes - a protocol whose link loads alone take no
    less is not simulated either, and a size where none of the others is faster gets
    None (the fastest protocol there may be one not simulated)."""
    if protocol != "auto":
        proto = protocol_name(protocol)
        return [simulate(algo, topology, s, proto, fidelity, instances, routes) for s in sizes]

    def least(p: str, s: int) -> float:
        """No call of ``s`` bytes with ``p`` is faster (0 when the link loads are unknown)."""
        return (s * least_seconds_per_byte / PROTOCOL_MODELS[p].wire_efficiency
                if least_seconds_per_byte else 0.0)

    if least_seconds_per_byte is None:
        least_seconds_per_byte = link_load_seconds_per_byte(algo, topology, fidelity, routes)
    alive = [p for p in BY_BANDWIDTH if p in {protocol_name(q) for q in protocols}]
    best_at: dict[int, SimResult] = {}
    last: dict[str, float] = {}  # each protocol's time at the largest size it was simulated at
    winner = None
    for s in sorted(sizes):
        got: dict[str, SimResult] = {}
        unbeaten = False  # a protocol was left out for ``beat``
        order = sorted(alive, key=lambda p: (p != winner, least(p, s) + PROTOCOL_MODELS[p].base_latency))
        for p in order:
            if got:
                best = min(r.time for r in got.values())
                if p in last and last[p] > FLOOR_PRUNE * best:
                    continue  # slower at a smaller size than the best here by the margin
                if least(p, s) >= best:
                    continue  # its link loads alone take longer than the best here
            if beat is not None and least(p, s) >= beat:
                unbeaten = True
                continue  # ... or than the time to beat
            got[p] = simulate(algo, topology, s, p, fidelity, instances, routes)
            last[p] = got[p].time
        fastest = min((got[p] for p in alive if p in got), key=lambda r: r.time, default=None)
        best_at[s] = None if unbeaten and (fastest is None or fastest.time >= beat) else fastest
        winner = fastest.protocol if fastest else winner
    return [best_at[s] for s in sizes]


def link_load_seconds_per_byte(algo: Algorithm, topology: Topology, fidelity: Fidelity | None = None,
                               routes: dict | None = None) -> float | None:
    """The least seconds per byte of a call of ``algo`` that its link loads allow at the
    profile's link efficiencies (None: not known - a program whose switch reduces, whose
    loads the steady-state model does not count)."""
    from arborcc.errors import ArborccError
    from arborcc.sim.bandwidth import attainable_algbw, steady_state_bandwidth
    from arborcc.sim.fidelity import fidelity_for

    if algo.switch_traffic is not None:
        return None
    try:
        estimate = steady_state_bandwidth(algo, topology, routes)
    except ArborccError:
        return None
    algbw = attainable_algbw(estimate, topology, (fidelity or fidelity_for(topology)).efficiency)
    return 1 / algbw if 0 < algbw < float("inf") else None


def time_as_written(algo: Algorithm, topology: Topology, size: int) -> float:
    """Seconds ``algo``'s file takes at ``size`` bytes as it runs: no routes (a file names
    none), its fastest protocol there - the time synth reports and ``arborcc simulate``
    gives (a protocol whose link loads alone take longer than the fastest simulated is not
    simulated: LL at 1 GiB took 8 s of the 9 s a DGX-1V candidate's sweep took)."""
    return protocol_sweep(algo, topology, [size], protocols=BY_BANDWIDTH)[0].time
