"""Simulate an algorithm on a topology for a message size: the public entry points.

::

    from arborcc.sim.simulate import simulate, predict_time
    r = simulate(algo, topology, 64 << 20)            # a SimResult
    r.time, r.algbw, r.busbw, r.link_utilization, r.critical_path
    predict_time(algo, topology, 1 << 20, "LL")       # seconds, what synth's auto asks

``size`` is the nccl-tests size S: the buffer of an all-reduce, broadcast or reduce;
the total (per-rank count x ranks) of an all-gather, reduce-scatter or all-to-all;
the root's whole buffer of a gather or scatter. The protocol defaults to the one the
algorithm declares; the machine parameters to the topology's fidelity profile
(:mod:`arborcc.sim.fidelity`). ``instances`` runs n copies of the algorithm side by
side on 1/n of the data each (GC3's instances): identical copies sharing links
max-min fairly each get 1/n of every link, so one copy on links of 1/n the capacity is
the same simulation, exactly, at the cost of one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

from arborcc.errors import InputError
from arborcc.ir.collectives import busbw_factor
from arborcc.ir.model import Algorithm
from arborcc.sim import engine
from arborcc.sim.critical_path import CriticalPath, critical_path
from arborcc.sim.fidelity import Fidelity, fidelity_for
from arborcc.sim.program import CompiledAlgorithm, compile_algorithm
from arborcc.sim.protocols import PROTOCOL_MODELS, ProtocolModel, protocol_name
from arborcc.topology.model import GB, Topology

Routes = Mapping[tuple[int, int, int], tuple[str, ...]]
#: collectives whose nccl-tests size is the root's whole buffer, n blocks of one rank's
_ROOT_HOLDS_ALL = ("gather", "scatter")
#: calls of up to this many bytes are simulated as without a bound on the engine's work;
#: larger ones need more iterations than the same call at this size and are
#: extrapolated from at most ``engine.MAX_PROBED_STEPS`` steps x iterations when their
#: period estimates do not settle (``SimResult.uncertainty``)
WHOLE_UP_TO_BYTES = 1 << 30
#: ... except for programs of more ranks than this, whose calls are bounded at every
#: size: a 1024-rank all-reduce of 700,000 steps whose estimates did not settle at 64 MiB
#: was simulated whole, 1,024 iterations, and had not finished after 13 minutes on 2 cores
WHOLE_UP_TO_RANKS = 128


@dataclass
class SimResult:
    """One simulated call. Times in seconds, bandwidths in B/s; ``link_utilization``
    maps each directed link an algorithm uses to the share of its nominal bandwidth
    used over the whole call (wire bytes, protocol overhead included)."""

    algorithm: str
    collective: str
    ranks: int
    size: int
    protocol: str
    instances: int
    time: float
    base_latency: float
    makespan: float
    iterations: int
    simulated_iterations: int
    link_utilization: dict[tuple[str, str], float]
    critical_path: CriticalPath | None = None
    flow_segments: list[tuple[tuple[str, str], float, float, float]] = field(default_factory=list)
    #: how far ``makespan`` may be off where iterations were extrapolated, relative: the
    #: spread of the last period estimates over the iterations extrapolated (0 when every
    #: iteration was simulated; at most ``engine.EXTRAPOLATION_TOLERANCE`` unless the
    #: estimates never settled within the engine's bound)
    uncertainty: float = 0.0

    @property
    def unsettled(self) -> bool:
        """Whether the time was extrapolated from period estimates that did not settle."""
        return self.uncertainty > engine.EXTRAPOLATION_TOLERANCE

    @property
    def algbw(self) -> float:
        return self.size / self.time if self.time > 0 else float("inf")

    @property
    def busbw(self) -> float:
        return self.algbw * bus_factor(self.collective, self.ranks)

    @property
    def time_us(self) -> float:
        return self.time * 1e6

    def row(self) -> dict:
        """The JSON row the CLI prints (nccl-tests units: us and GB/s), with the time's
        relative ``uncertainty`` where it is above the extrapolation's tolerance."""
        row = {"size": self.size, "protocol": self.protocol, "instances": self.instances,
               "time_us": round(self.time_us, 3), "algbw_gbps": round(self.algbw / GB, 4),
               "busbw_gbps": round(self.busbw / GB, 4)}
        if self.unsettled:
            row["uncertainty"] = round(self.uncertainty, 4)
        return row


def bus_factor(collective: str, ranks: int) -> float:
    """nccl-tests' busbw factor; 1 for custom collectives, which have none."""
    return 1.0 if collective == "custom" else busbw_factor(collective, ranks)


def chunk_bytes(algo: Algorithm, size: float) -> float:
    """Bytes of one chunk of ``algo`` when called with nccl-tests size ``size``."""
    k = algo.chunks_per_loop * (algo.num_ranks if algo.collective in _ROOT_HOLDS_ALL else 1)
    return size / max(1, k)


def _check_size(size: float) -> None:
    if not (isinstance(size, (int, float)) and size > 0):
        raise InputError(f"the message size must be a positive number of bytes, got {size!r}", source="size")


def run_setup(algo: Algorithm, prog: CompiledAlgorithm, size: float, protocol: ProtocolModel,
              fidelity: Fidelity, instances: int) -> engine.RunSetup:
    """The engine parameters of one call (module doc)."""
    share = protocol.wire_efficiency / instances
    rates = [bw * fidelity.efficiency(kind) * share for bw, kind in zip(prog.link_bandwidth, prog.link_kind)]
    return engine.RunSetup(
        chunk_bytes=chunk_bytes(algo, size) / instances, slice_bytes=protocol.slice_bytes,
        fifo_slices=protocol.fifo_slices, link_rate=rates,
        tb_cap=fidelity.thread_block_bandwidth(protocol.name),
        extra_latency=protocol.hop_latency, latency_scale=fidelity.route_latency_scale,
        reduce_bandwidth=fidelity.reduce_bandwidth, copy_bandwidth=fidelity.copy_bandwidth)


def simulate(algo: Algorithm, topology: Topology, size: float, protocol: str | None = None,
             fidelity: Fidelity | None = None, instances: int = 1, routes: Routes | None = None,
             exact: bool = False, record: bool = False) -> SimResult:
    """Simulate one call of ``algo`` with ``size`` bytes (module doc).

    ``exact`` simulates every pipeline iteration instead of extrapolating the steady
    period; ``record`` also keeps the flows' rate periods (for the timeline) and the
    critical path, and implies ``exact``.
    """
    _check_size(size)
    if not (isinstance(instances, int) and instances >= 1):
        raise InputError(f"instances must be an integer >= 1, got {instances!r}", source="instances")
    try:
        proto = PROTOCOL_MODELS[protocol_name(protocol or algo.protocol)]
    except ValueError as e:
        raise InputError(str(e), source="protocol") from None
    fidelity = fidelity or fidelity_for(topology)
    prog = compile_algorithm(algo, topology, routes)
    setup = run_setup(algo, prog, size, proto, fidelity, instances)
    if algo.switch_traffic is not None:  # an MSCCL++ plan's NVLS operations: in-switch reduction
        from arborcc.sim.switch_ops import charge_switch_ops

        prog, rates = charge_switch_ops(prog, setup.link_rate, algo.switch_traffic, topology, fidelity,
                                        proto.wire_efficiency / instances)
        setup = replace(setup, link_rate=rates)
    whole_up_to = (0 if algo.num_ranks > WHOLE_UP_TO_RANKS else
                   engine.pipelining(setup.chunk_bytes * WHOLE_UP_TO_BYTES / size, setup.slice_bytes)[0])
    out = engine.run(prog, setup, None if exact else 2, record, whole_up_to)
    base = proto.base_latency + fidelity.launch_latency
    time = base + out.makespan
    util = {}
    for l, key in enumerate(prog.link_keys):
        nominal = prog.link_bandwidth[l] * time
        util[key] = (out.link_bytes[l] * instances / proto.wire_efficiency) / nominal if nominal > 0 else 0.0
    segments = [(prog.link_keys[l], a + base, b + base, rate * instances / proto.wire_efficiency)
                for l, a, b, rate in out.flow_segments]
    path = critical_path(prog, out, base) if record else None
    return SimResult(algo.name, algo.collective, algo.num_ranks, int(size), proto.name, instances, time, base,
                     out.makespan, out.iterations, out.simulated, util, path, segments, out.uncertainty)


def predict_time(algo: Algorithm, topology: Topology, size: float, protocol: str | None = None,
                 routes: Routes | None = None, instances: int = 1) -> float:
    """Seconds one call of ``algo`` with ``size`` bytes takes on ``topology`` - the
    prediction ``synth``'s ``auto`` and ``tune`` compare candidates by."""
    return simulate(algo, topology, size, protocol, routes=routes, instances=instances).time


def sweep(algo: Algorithm, topology: Topology, sizes: Sequence[float], protocol: str | None = None,
          fidelity: Fidelity | None = None, instances: int = 1, routes: Routes | None = None) -> list[SimResult]:
    """:func:`simulate` at every size (the algorithm is compiled once)."""
    return [simulate(algo, topology, s, protocol, fidelity, instances, routes) for s in sizes]
