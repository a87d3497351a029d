"""Default link parameters shared by built-in machines and readers of formats that do
not carry them (nvidia-smi dumps, NCCL XML). Every built-in machine can override them.

Sources: NCCL's topology model (https://github.com/NVIDIA/nccl, ``src/graph/topo.h``:
the PCIe bandwidth formula, the per-generation NVLink bandwidths, the per-hop
latencies these defaults follow in magnitude) and the vendors' link specifications
(NVLink 2/3/4 at 25 GB/s per lane and direction, PCIe gen3/4/5 x16).

References:

* MXNet: "Single machine All Reduce Topology-aware Communication", Apache MXNet design
  proposal, 2018, https://cwiki.apache.org/confluence/display/MXNET/Single+machine+All+Reduce+Topology-aware+Communication
"""

from __future__ import annotations

from arborcc.topology.model import GB, US, LinkKind

#: per-hop latency of a directed link, seconds
LATENCY: dict[LinkKind, float] = {
    LinkKind.NVLINK: 0.7 * US,
    LinkKind.PCIE: 1.0 * US,
    LinkKind.INTER_SOCKET: 1.0 * US,
    LinkKind.MEMORY: 0.1 * US,
    LinkKind.NETWORK: 2.5 * US,
    LinkKind.SWITCH_PORT: 1.0 * US,
}

#: nominal bandwidth of one NVLink lane per direction, by generation (B/s)
NVLINK_LANE = {"nvlink1": 20 * GB, "nvlink2": 25 * GB, "nvlink3": 25 * GB, "nvlink4": 25 * GB, "nvlink5": 50 * GB}

#: PCIe x16 per direction by generation (NCCL: width x speed-code / 80 GB/s)
PCIE_X16 = {3: 12 * GB, 4: 24 * GB, 5: 48 * GB}

#: one NIC when a format does not say (100 Gb/s EDR InfiniBand, as on DGX-1)
NIC_BANDWIDTH = 12.5 * GB

#: CPU-to-CPU (QPI/UPI/xGMI) bandwidth per direction as seen by GPU peer traffic; the
#: MXNet proposal measured ~10 GB/s GPU-to-GPU across sockets on p3.16xlarge.
INTER_SOCKET = 10 * GB

#: the most NVLinks any GPU generation has (H100: 18); an all-pairs ``NV#`` matrix whose
#: per-GPU total exceeds this must be an NVSwitch fabric, not a mesh.
MAX_NVLINKS_PER_GPU = 18
