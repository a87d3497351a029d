"""NVLink SHARP (NVLS) all-reduce: what NCCL runs on NVSwitch machines that reduce in
the switch (DGX H100 and later), as a closed-form model.

In-switch reduction has no MSCCL form (an MSCCL step names two GPUs, never a switch),
so this is not simulated step by step. With NVLS each GPU owns 1/n of the buffer: it
asks the switch for the sum of its share from all n GPUs (every GPU's port sends S/n
to each of n readers, S in all, and receives its S/n sum) and then stores the sum
once to the multicast address, which the switch copies to all n GPUs (port out S/n,
in S). Each port carries S (1 + 1/n) each way, so

    time = launch + NVLS base latency + S (1 + 1/n) / (port bandwidth x efficiency).

NCCL's own model charges NVLS a base latency of 23 us (``src/graph/tuning.cc``,
``baseLat``, NCCL 2.18). The efficiency is the fidelity profile's
``nvls_efficiency`` (calibrated in ``docs/fidelity.md``).
"""

from __future__ import annotations

from arborcc.sim.fidelity import Fidelity
from arborcc.topology.model import DeviceKind, Topology

NVLS_BASE_LATENCY = 23e-6


def nvls_port_bandwidth(topology: Topology) -> float | None:
    """The smallest GPU-to-NVSwitch bandwidth over the ranks (B/s), or None when some
    rank has no NVSwitch port (NVLS needs every GPU on the switch) or the ranks span
    several hosts."""
    hosts = {topology.devices[g].host for g in topology.ranks}
    if len(hosts) != 1:
        return None
    best = None
    for g in topology.ranks:
        ports = [l.bandwidth for l in topology.out_links(g)
                 if topology.devices[l.dst].kind is DeviceKind.NVSWITCH]
        if not ports:
            return None
        bw = sum(ports)
        best = bw if best is None else min(best, bw)
    return best


def nvls_allreduce_time(topology: Topology, size: float, fidelity: Fidelity) -> float | None:
    """Seconds an NVLS all-reduce of ``size`` bytes takes (module doc); None when the
    machine cannot run one (no in-switch reduction in its profile, or no NVSwitch)."""
    port = nvls_port_bandwidth(topology)
    if port is None or fidelity.nvls_efficiency <= 0:
        return None
    n = topology.num_ranks
    return fidelity.launch_latency + NVLS_BASE_LATENCY + size * (1 + 1 / n) / (port * fidelity.nvls_efficiency)
