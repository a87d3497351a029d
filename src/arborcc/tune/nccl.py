"""The NCCL baseline: what NCCL itself runs for an all-reduce or a broadcast on a
topology, per size, timed by the simulator.

NCCL (2.18, NVIDIA/nccl ``src/graph``, ``src/enqueue.cc``):

* builds its rings (:func:`arborcc.synth.nccl_rings.nccl_rings`: NVLink-only when it can)
  and runs every ring twice (``ncclTopoPostset`` duplicates the channels); on NVSwitch
  machines its search finds many rings of the same order - 24 channels on DGX A100,
  32 on DGX H100 (the fidelity profile's ``nccl_channels``);
* picks algorithm and protocol per call with its alpha-beta model
  (:func:`arborcc.sim.nccl_model.nccl_estimate`; LL128 only where the rings stay on
  NVLink); across nodes it may pick its double binary tree;
* uses fewer channels for small calls: while ``bytes < channels x threads x
  threshold`` it drops a channel (thresholds 64 bytes per thread for Simple, 8 for
  LL128 and 8 x ranks for LL, 512 threads, 640 for LL128);
* on machines that reduce in the switch it may run NVLS (:mod:`arborcc.sim.nvls`); the
  baseline takes it when the model says it is faster than the ring.

The rings run as NCCL's ring kernel (:func:`arborcc.sim.nccl_ring.ring_allreduce_algorithm`)
on the device paths the ring search chose; identical channels are simulated as
instances (exact, see :mod:`arborcc.sim.simulate`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from arborcc.errors import SynthesisError
from arborcc.ir.model import Algorithm, Protocol
from arborcc.sim.fidelity import Fidelity, fidelity_for
from arborcc.sim.nccl_ring import ring_allreduce_algorithm, ring_broadcast_algorithm
from arborcc.sim.nvls import nvls_allreduce_time
from arborcc.sim.simulate import SimResult, simulate
from arborcc.topology.model import LinkKind, Topology

#: (threads per channel, bytes per thread below which a channel is dropped)
CHANNEL_THRESHOLDS = {"Simple": (512, 64), "LL128": (640, 8), "LL": (512, 8)}
MAX_CHANNELS = 32
#: the collectives the baseline covers
COLLECTIVES = ("allreduce", "broadcast")


@dataclass
class NcclCall:
    """What NCCL runs for one call and what it costs."""

    algorithm: str  #: ring, tree or nvls
    protocol: str
    channels: int
    result: SimResult

    def row(self) -> dict:
        return {**self.result.row(), "nccl_algorithm": self.algorithm, "channels": self.channels}


class NcclBaseline:
    """NCCL on ``topology`` (module doc); :meth:`call` gives one call."""

    def __init__(self, topology: Topology, fidelity: Fidelity | None = None):
        from arborcc.synth.nccl_rings import nccl_rings

        if topology.num_ranks < 2:
            raise SynthesisError(f"{topology.name} has {topology.num_ranks} GPU; a collective needs at least 2")
        self.topology = topology
        self.fidelity = fidelity or fidelity_for(topology)
        self.schedule = nccl_rings(topology)
        rings = len(self.schedule.rings)
        wanted = self.fidelity.nccl_channels if rings == 1 and self.fidelity.nccl_channels else 2 * rings
        self.channels = max(1, min(MAX_CHANNELS, wanted))
        self._algorithms: dict[int, tuple[Algorithm, dict]] = {}

    @cached_property
    def protocols(self) -> tuple[str, ...]:
        """LL128 runs only where the rings stay on NVLink (NCCL enables it there only)."""
        nvlink = self.schedule.intra_link_kind is LinkKind.NVLINK
        return ("LL", "LL128", "Simple") if nvlink else ("LL", "Simple")

    def channels_for(self, size: float, protocol: str) -> int:
        """Channels NCCL uses for a call of ``size`` bytes (module doc)."""
        threads, per_thread = CHANNEL_THRESHOLDS[protocol]
        if protocol == "LL":
            per_thread *= self.topology.num_ranks
        nc = self.channels
        while nc > 1 and size < nc * threads * per_thread:
            nc -= 1
        return nc

    def ring_algorithm(self, distinct: int, collective: str = "allreduce", root: int = 0) -> tuple[Algorithm, dict]:
        """NCCL's ring kernel for ``collective`` over the first ``distinct`` rings, with the
        device path of every connection."""
        key = (collective, root, distinct)
        if key not in self._algorithms:
            rings = self.schedule.rings[:distinct]
            if collective == "allreduce":
                algo = ring_allreduce_algorithm(rings, f"nccl-ring-allreduce-{distinct}")
            else:
                algo = ring_broadcast_algorithm(rings, root, f"nccl-ring-broadcast-{distinct}")
            routes = {}
            for c, ring in enumerate(rings):
                hops = self.schedule.hops[c] if self.schedule.hops else []
                for k, path in enumerate(hops):
                    routes[(ring[k], ring[(k + 1) % len(ring)], c)] = path
            self._algorithms[key] = (algo, routes)
        return self._algorithms[key]

    def simulate_ring(self, size: float, protocol: str, channels: int | None = None,
                      collective: str = "allreduce", root: int = 0) -> SimResult:
        """The ring kernel on ``channels`` channels (default: NCCL's count for the size)."""
        nc = channels or self.channels_for(size, protocol)
        distinct = min(nc, len(self.schedule.rings))
        algo, routes = self.ring_algorithm(distinct, collective, root)
        return simulate(algo, self.topology, size, protocol, self.fidelity,
                        instances=max(1, round(nc / distinct)), routes=routes)

    def model_choice(self, size: float, collective: str = "allreduce") -> str:
        """The ring protocol NCCL's alpha-beta model picks for ``size``."""
        return min(self.protocols, key=lambda p: self.schedule.nccl_estimate(collective, p, size).time)

    def call(self, size: float, collective: str = "allreduce", root: int = 0,
             protocol: str | None = None) -> NcclCall:
        """What NCCL runs for ``collective`` (allreduce or broadcast) of ``size`` bytes;
        ``protocol`` forces one (and rules NVLS out)."""
        if collective not in COLLECTIVES:
            raise SynthesisError(f"the NCCL baseline covers {', '.join(COLLECTIVES)}, not {collective}")
        proto = protocol or self.model_choice(size, collective)
        nc = self.channels_for(size, proto)
        ring = NcclCall("ring", proto, nc, self.simulate_ring(size, proto, nc, collective, root))
        if protocol is None and collective == "allreduce":
            nvls = nvls_allreduce_time(self.topology, size, self.fidelity)
            if nvls is not None and nvls < ring.result.time:
                r = ring.result
                nvls_result = SimResult("nccl-nvls", "allreduce", r.ranks, r.size, "Simple", 1, nvls, nvls, 0.0,
                                        1, 1, {})
                return NcclCall("nvls", "Simple", 0, nvls_result)
        return ring
