"""The three NCCL protocols as the simulator sees them.

A protocol decides how a transfer uses the wire and how finely it is pipelined
(facts from NCCL's and MSCCL's sources, NVIDIA/nccl ``src/include/device.h`` and
``src/graph/tuning.cc``, microsoft/msccl ``src/include/msccl``):

* **wire efficiency** - payload bytes per wire byte. Simple sends raw data (1.0); LL
  interleaves a 4-byte flag with every 4 data bytes (0.5); LL128 carries 120 data
  bytes in every 128-byte line (0.9375).
* **slice** - the store-and-forward unit. A connection's FIFO holds ``NCCL_STEPS = 8``
  steps; Simple's 4 MiB buffer gives 512 KiB steps, forwarded two at a time
  (``MSCCL_SLICESTEPS``), so 1 MiB slices; LL's 512 KiB buffer gives 64 KiB wire
  (32 KiB payload) steps; LL128's 4.69 MiB buffer gives 600 KiB wire (562.5 KiB
  payload) steps. The runtime runs the algorithm once per slice of every chunk (the
  ``gridOffset`` loop of the MSCCL interpreter) and splits a multi-chunk step into
  transfers of at most one slice (``maxAllowedCount``), which is what pipelines them.
* **FIFO depth** - slices a sender may have in flight on one connection before the
  receiver frees a slot: 8 steps / steps per slice.
* **hop latency** - the synchronization cost a transfer pays on top of the route's own
  link latency before the receiver can use it (flag write, fence, poll). NCCL's model
  charges per hop on NVLink 0.6 / 1.9 / 3.4 us (LL / LL128 / Simple ring); the
  defaults here are those numbers minus the 0.7 us a built-in NVLink carries already.
* **base latency** - once per call: NCCL's ring base latencies 6.6 / 14 / 8.4 us.

Calibrated, machine-specific adjustments (link efficiency, per-thread-block
bandwidth, launch overhead) live in :mod:`arborcc.sim.fidelity`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from arborcc.ir.model import Protocol

KIB = 1024
MIB = 1024 * 1024


@dataclass(frozen=True)
class ProtocolModel:
    """How one protocol moves data (see module doc). Bytes are payload bytes."""

    name: str
    wire_efficiency: float
    slice_bytes: float
    fifo_slices: int
    hop_latency: float  #: seconds per transfer on top of the route's link latency
    base_latency: float  #: seconds once per call

    def with_changes(self, **changes: float) -> "ProtocolModel":
        return replace(self, **changes)


PROTOCOL_MODELS: dict[str, ProtocolModel] = {
    "Simple": ProtocolModel("Simple", 1.0, 1 * MIB, 4, 2.7e-6, 8.4e-6),
    "LL": ProtocolModel("LL", 0.5, 32 * KIB, 8, 0.0, 6.6e-6),
    "LL128": ProtocolModel("LL128", 120 / 128, 562.5 * KIB, 8, 1.2e-6, 14.0e-6),
}
PROTOCOL_NAMES: tuple[str, ...] = ("LL", "LL128", "Simple")


def protocol_name(protocol: str | Protocol) -> str:
    """The canonical name (``Simple``, ``LL``, ``LL128``) of ``protocol``, any case."""
    text = protocol.value if isinstance(protocol, Protocol) else str(protocol)
    for name in PROTOCOL_NAMES:
        if name.lower() == text.lower():
            return name
    raise ValueError(f"unknown protocol {protocol!r} (known: {', '.join(PROTOCOL_NAMES)})")
