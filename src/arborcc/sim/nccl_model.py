"""NCCL's own alpha-beta cost model, the closed-form predictor NCCL tunes with.

NCCL picks an algorithm (ring, tree) and a protocol (LL, LL128, Simple) per call from a
latency + size / bandwidth model in its tuning code (NVIDIA NCCL,
``src/graph/tuning.cc``: ``baseLat``, ``hwLat``, ``ncclTopoTuneModel``;
https://github.com/NVIDIA/nccl). The constants below are that file's:

* base latency (us) per algorithm and protocol, and a per-hop latency by link class
  (NVLink, PCIe, network);
* ring latency = base + (steps - inter-node steps) x intra-node hop + inter-node steps x
  inter-node hop, with ``2(n-1)`` steps (``2(nodes-1)`` inter-node) for all-reduce and
  ``n-1`` (``nodes-1``) for the others;
* tree (all-reduce only) latency = base + 2 ((ranks per node - 1) x intra-node hop +
  log2(nodes) x inter-node hop);
* bus bandwidth = the channels' bandwidths summed, times the protocol's share of the
  wire (LL carries 8 bytes of data per 16, LL128 120 per 128 - about 92%); a tree's is
  its channels' times 0.92, and then 1/3.8 with LL, 120/128 with LL128 across nodes
  (7/9 within one) (``ncclTopoTuneModel``'s "model refinements"; its per-size tree
  correction factors and per-channel caps are not modelled);
  ring algorithm bandwidth = bus x n / (2(n-1)) for all-reduce, bus x n / (n-1) for
  reduce-scatter / all-gather, bus for broadcast / reduce; a tree halves the bus;
* time = latency + bytes / algorithm bandwidth.

The model takes numbers, not schedules: the caller (synthesis, the simulator) knows the
rings or trees NCCL would build and passes their rank and node counts, the slowest
link class inside a node, and their summed bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from arborcc.errors import InputError

PROTOCOLS = ("LL", "LL128", "Simple")
ALGORITHMS = ("ring", "tree")
LINK_CLASSES = ("nvlink", "pcie", "network")
#: the collectives NCCL's tuning model covers (names as in :mod:`arborcc.ir.collectives`)
MODELLED_COLLECTIVES = frozenset({"allreduce", "reducescatter", "allgather", "broadcast", "reduce"})

#: base latency (us) per algorithm, per protocol
BASE_LATENCY_US = {"tree": {"LL": 6.8, "LL128": 14.0, "Simple": 8.4},
                   "ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}}
#: per-hop latency (us) by link class, algorithm and protocol
HOP_LATENCY_US = {
    "nvlink": {"tree": {"LL": 0.6, "LL128": 1.25, "Simple": 4.0}, "ring": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4}},
    "pcie": {"tree": {"LL": 1.0, "LL128": 1.9, "Simple": 4.0}, "ring": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7}},
    "network": {"tree": {"LL": 5.0, "LL128": 8.5, "Simple": 14.0}, "ring": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0}},
}
#: share of the wire each protocol delivers
PROTOCOL_EFFICIENCY = {"LL": 0.5, "LL128": 0.92, "Simple": 1.0}
#: a tree's bus bandwidth factor, and then its protocol's (LL128: across nodes, within one)
TREE_EFFICIENCY = 0.92
TREE_PROTOCOL_EFFICIENCY = {"LL": 1 / 3.8, "LL128": (120 / 128, 7 / 9), "Simple": 1.0}

_SOURCE = "NCCL model"


@dataclass(frozen=True)
class NcclEstimate:
    """What :func:`nccl_estimate` predicts: seconds and B/s."""

    latency: float
    bus_bandwidth: float
    algorithm_bandwidth: float
    time: float


def nccl_estimate(collective: str, algorithm: str, protocol: str, n_bytes: float, *, ranks: int, nodes: int,
                  intra_link: str, bus_bandwidth: float) -> NcclEstimate:
    """NCCL's predicted time for ``n_bytes`` (nccl-tests size) of ``collective`` (module doc).

    ``ranks``/``nodes``: the GPUs and hosts the rings or trees span; ``intra_link``: the
    slowest link class inside a node (``"nvlink"`` or ``"pcie"``); ``bus_bandwidth``:
    the channels' (rings') or both trees' bandwidths summed, in B/s, before the
    protocol's share is taken.
    """
    for name, value, known in (("collective", collective, MODELLED_COLLECTIVES), ("algorithm", algorithm, ALGORITHMS),
                               ("protocol", protocol, PROTOCOLS), ("intra_link", intra_link, LINK_CLASSES)):
        if value not in known:
            raise InputError(f"unknown {name} {value!r} (known: {', '.join(sorted(known))})", source=_SOURCE)
    if algorithm == "tree" and collective != "allreduce":
        raise InputError(f"NCCL's tree algorithm implements allreduce only, not {collective}", source=_SOURCE)
    if not n_bytes >= 0:
        raise InputError(f"n_bytes must be >= 0, got {n_bytes}", source=_SOURCE)
    if ranks < 1 or nodes < 1 or nodes > ranks:
        raise InputError(f"{ranks} ranks on {nodes} nodes is not a job", source=_SOURCE)
    intra = HOP_LATENCY_US[intra_link][algorithm][protocol]
    inter = HOP_LATENCY_US["network"][algorithm][protocol]
    base = BASE_LATENCY_US[algorithm][protocol]
    if algorithm == "tree":
        share = TREE_PROTOCOL_EFFICIENCY[protocol]
        if isinstance(share, tuple):
            share = share[0] if nodes > 1 else share[1]
        bus = bus_bandwidth * TREE_EFFICIENCY * share
    else:
        bus = bus_bandwidth * PROTOCOL_EFFICIENCY[protocol]
    n = ranks
    if n == 1:
        return NcclEstimate(0.0, bus, math.inf, 0.0)
    if algorithm == "ring":
        if collective == "allreduce":
            steps, inter_steps, ratio = 2 * (n - 1), 2 * (nodes - 1), n / (2 * (n - 1))
        elif collective in ("reducescatter", "allgather"):
            steps, inter_steps, ratio = n - 1, nodes - 1, n / (n - 1)
        else:
            steps, inter_steps, ratio = n - 1, nodes - 1, 1.0
        latency_us = base + (steps - inter_steps) * intra + inter_steps * inter
        algbw = bus * ratio
    else:
        per_node = n // nodes
        latency_us = base + 2 * ((per_node - 1) * intra + math.log2(nodes) * inter)
        algbw = bus * 0.5
    latency = latency_us * 1e-6
    time = latency + (n_bytes / algbw if algbw > 0 else (0.0 if n_bytes == 0 else math.inf))
    return NcclEstimate(latency, bus, algbw, time)
