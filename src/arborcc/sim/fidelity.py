"""Fidelity profiles: the machine-specific numbers that turn link bandwidths into the
rates, overheads and compute costs real GPUs show.

A :class:`Fidelity` holds, per GPU generation:

* ``link_efficiency`` - the share of a link's nominal bandwidth a Simple-protocol
  transfer reaches (DMA/flag overheads; Blink measured about 21 GB/s per NVLink2 lane
  of 25 nominal on DGX-1V; the NCCL maintainers put A100 NVLink at about 20 of 25).
* ``tb_bandwidth`` - per protocol, the most one thread block (one connection) moves
  per second; LL polls flags 8 bytes at a time and LL128 is capped per channel in
  NCCL's own model (``perChMaxRingLL128Bws``), Simple is limited by the links.
* ``reduce_bandwidth`` / ``copy_bandwidth`` - bytes per second one thread block
  reduces or copies locally (a reduce step costs ``bytes / reduce_bandwidth``).
* ``launch_latency`` - once per call on top of the protocol's base latency (kernel
  launch and completion as nccl-tests measures them).
* ``route_latency_scale`` - multiplies the topology's link latencies (a built-in
  NVSwitch route counts two NVLink hops of 0.7 us; NCCL charges 0.6 us per NVLink hop).
* ``nccl_channels`` - the rings NCCL runs on a switch machine (its logs: 24 on
  DGX A100, 32 on DGX H100) and ``nvls_efficiency`` the share of port bandwidth
  NVLink SHARP all-reduce reaches (:mod:`arborcc.sim.nvls`).

The defaults and how each was calibrated against published measurements are in
``docs/fidelity.md`` (the table there is printed by ``benchmarks/sim/fidelity.py``).
Built-in machines map to a profile by name (clusters by the machine they copy);
anything else gets :data:`GENERIC`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Mapping

from arborcc.topology.model import GB, US, LinkKind, Topology

INF = math.inf


def _frozen(d: dict) -> Mapping:
    return MappingProxyType(dict(d))


@dataclass(frozen=True)
class Fidelity:
    """Calibrated per-machine parameters of the simulator (see module doc). Bandwidths
    in B/s, times in seconds."""

    name: str
    link_efficiency: Mapping[LinkKind, float] = field(default_factory=lambda: _frozen({}))
    tb_bandwidth: Mapping[str, float] = field(default_factory=lambda: _frozen({}))
    reduce_bandwidth: float = INF
    copy_bandwidth: float = INF
    launch_latency: float = 0.0
    route_latency_scale: float = 1.0
    nccl_channels: int = 0
    nvls_efficiency: float = 0.0

    def efficiency(self, kind: LinkKind) -> float:
        return self.link_efficiency.get(kind, 1.0)

    def thread_block_bandwidth(self, protocol: str) -> float:
        return self.tb_bandwidth.get(protocol, INF)

    def with_changes(self, **changes) -> "Fidelity":
        for key in ("link_efficiency", "tb_bandwidth"):
            if key in changes:
                changes[key] = _frozen(changes[key])
        return replace(self, **changes)


#: an idealized machine: nominal link rates, no compute or launch cost
IDEAL = Fidelity("ideal")

_NVLINK_PCIE = {LinkKind.NVLINK: 0.84, LinkKind.PCIE: 0.85, LinkKind.INTER_SOCKET: 0.85,
                LinkKind.NETWORK: 0.92, LinkKind.SWITCH_PORT: 0.92}
#: NCCL charges 0.6 us per NVLink hop (LL ring, ``hwLat``); a built-in NVSwitch route
#: is two 0.7 us NVLink links
_SWITCH_HOP = 0.6 / 1.4

#: V100 (DGX-1V, DGX-2, p3.16xlarge): Blink (MLSys 2020, section 2.2 and appendix A.1)
#: forwards about 21 GB/s along chains of NVLink2 lanes of 25 GB/s and reduce+forwards
#: about 19 over 8 GPUs
V100 = Fidelity(
    "v100",
    link_efficiency=_frozen(_NVLINK_PCIE),
    tb_bandwidth=_frozen({"LL": 5 * GB, "LL128": 20 * GB}),
    reduce_bandwidth=220 * GB,
    copy_bandwidth=400 * GB,
    launch_latency=10 * US,
    nccl_channels=0,
)
#: P100 (DGX-1P): NVLink1, the V100 overheads
P100 = V100.with_changes(name="p100")
#: A100 (DGX A100, p4d.24xlarge): nccl-tests all-reduce on 8 GPUs (docs/fidelity.md)
A100 = Fidelity(
    "a100",
    link_efficiency=_frozen({**_NVLINK_PCIE, LinkKind.NVLINK: 0.811}),
    tb_bandwidth=_frozen({"LL": 5 * GB, "LL128": 20 * GB}),
    reduce_bandwidth=300 * GB,
    copy_bandwidth=600 * GB,
    launch_latency=29.8 * US,
    route_latency_scale=_SWITCH_HOP,
    nccl_channels=24,
)
#: DGX H100's NIC path (PCIe gen5, then one NDR 400 Gb/s NIC): one NIC measures 46-48 GB/s
#: and 8 per node reach 380+ GB/s all-reduce busbw across nodes (about 400 peak), i.e. at
#: least 47.5 GB/s per NIC, since a ring's busbw cannot exceed its NICs' summed rate. PCIe
#: gen5 x16 is NCCL's 48 GB/s (width x speed / 80: already 3/4 of the 64 GB/s signalling
#: rate) and carries all of it (0.85 of it, 40.8, held every NIC below the measured 46);
#: the NIC's 50 GB/s at 0.96 is 48, the top of the one-NIC measurement
_H100_NIC_PATH = {LinkKind.PCIE: 1.0, LinkKind.NETWORK: 0.96}
#: H100 (DGX H100): nccl-tests all-reduce on 8 GPUs, NVLS and NCCL_ALGO=RING; across nodes
#: the NIC path above (docs/fidelity.md)
H100 = Fidelity(
    "h100",
    link_efficiency=_frozen({**_NVLINK_PCIE, **_H100_NIC_PATH, LinkKind.NVLINK: 0.871}),
    tb_bandwidth=_frozen({"LL": 6 * GB, "LL128": 36.7 * GB}),
    reduce_bandwidth=300 * GB,
    copy_bandwidth=800 * GB,
    launch_latency=10.6 * US,
    route_latency_scale=_SWITCH_HOP,
    nccl_channels=32,
    nvls_efficiency=0.685,
)
#: machines nothing is known about: the V100 overheads
GENERIC = V100.with_changes(name="generic")

PROFILES: dict[str, Fidelity] = {f.name: f for f in (IDEAL, V100, P100, A100, H100, GENERIC)}
MACHINE_PROFILES = {"dgx1v": V100, "dgx2": V100, "dgx1p": P100, "dgx-a100": A100, "dgx-h100": H100}


def fidelity_for(topology: Topology) -> Fidelity:
    """The profile of the machine ``topology`` was built from (``meta["machine"]``), else
    :data:`GENERIC`."""
    machine = topology.meta.get("machine")
    return MACHINE_PROFILES.get(str(machine), GENERIC) if machine else GENERIC


def efficiency_adjusted(topology: Topology, fidelity: Fidelity | None = None) -> Topology:
    """``topology`` with every link at the rate ``fidelity`` (default: its own profile)
    lets it carry - nominal bandwidth x link efficiency. The bounds synthesis proves on it
    are the efficiency-adjusted bounds: the rate a perfect pipeline of the optimal
    schedule reaches in the simulator."""
    from dataclasses import replace

    from arborcc.topology.model import TopologyBuilder

    fidelity = fidelity or fidelity_for(topology)
    b = TopologyBuilder(topology.name, source=topology.name, meta=topology.meta)
    for d in topology.devices.values():
        b.add_device(d)
    for link in topology.links.values():
        b.add_link(replace(link, bandwidth=link.bandwidth * fidelity.efficiency(link.kind)))
    return b.build(ranks=topology.ranks)


def fidelity_named(name: str) -> Fidelity:
    """A profile by name (``ideal``, ``v100``, ``a100``, ``h100``, ...)."""
    try:
        return PROFILES[name.lower()]
    except KeyError:
        raise ValueError(f"unknown fidelity profile {name!r} (known: {', '.join(PROFILES)})") from None
