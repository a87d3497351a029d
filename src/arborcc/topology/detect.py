"""Live detection of the machine this process runs on, without launching GPU kernels.

GPUs come from NVML (Python module ``pynvml``, package ``nvidia-ml-py``; NVIDIA
Management Library API reference, https://docs.nvidia.com/deploy/nvml-api/):

* ``nvmlDeviceGetNvLinkState`` / ``nvmlDeviceGetNvLinkRemotePciInfo`` /
  ``nvmlDeviceGetNvLinkRemoteDeviceType`` / ``nvmlDeviceGetNvLinkVersion`` per link give
  the NVLink peers (GPUs by bus id, or the NVSwitch fabric) and the lane generation;
* ``nvmlDeviceGetTopologyCommonAncestor`` gives the PCIe relation of every GPU pair
  (the same levels ``nvidia-smi topo -m`` prints: SINGLE = PIX, MULTIPLE = PXB,
  HOSTBRIDGE = PHB, NODE, SYSTEM = SYS), from which
  :func:`arborcc.topology.nvidia_smi.build_host_topology` rebuilds the PCIe tree;
* ``nvmlDeviceGetCpuAffinity`` / ``nvmlDeviceGetNumaNodeId`` and the NUMA nodes of
  sysfs place each GPU on its CPU;
* ``nvmlDeviceGetMaxPcieLinkGeneration`` / ``...Width`` give the PCIe bandwidth with
  NCCL's formula.

NICs are not detected (NVML does not see them). NUMA nodes come from
``/sys/devices/system/node/node*/{cpulist,distance}``.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections import Counter
from pathlib import Path
from typing import NamedTuple

from arborcc.errors import MissingDependencyError, TopologyError
from arborcc.topology import defaults
from arborcc.topology.model import DeviceKind, GB, Topology
from arborcc.topology.nccl_xml import canonical_busid
from arborcc.topology.nvidia_smi import Endpoint, build_host_topology, parse_cpu_list

log = logging.getLogger(__name__)

NUMA_ROOT = "/sys/devices/system/node"
SOURCE = "NVML"

#: NVML's nvmlGpuTopologyLevel_t values -> the relations nvidia-smi prints
_TOPOLOGY_LEVELS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
#: nvmlNvLinkDeviceType_t
_REMOTE_GPU, _REMOTE_IBMNPU, _REMOTE_SWITCH = 0, 1, 2
#: NCCL's PCIe speed code per generation (x width / 80 = GB/s)
_PCIE_CODE = {1: 15, 2: 30, 3: 60, 4: 120, 5: 240, 6: 480}


class NumaNode(NamedTuple):
    """A NUMA node of sysfs: its id, CPUs and distance row (index = other node id)."""

    id: int
    cpus: tuple[int, ...]
    distances: tuple[int, ...]


def detect_numa_nodes(root: str | os.PathLike = NUMA_ROOT) -> list[NumaNode]:
    """The NUMA nodes under ``root`` (``node*/cpulist`` and ``node*/distance``), by id."""
    base = Path(root)
    if not base.is_dir():
        raise TopologyError("no NUMA information: the directory does not exist", source=str(base))
    nodes: list[NumaNode] = []
    for entry in base.iterdir():
        m = re.fullmatch(r"node(\d+)", entry.name)
        if not m or not entry.is_dir():
            continue
        cpulist, distance = entry / "cpulist", entry / "distance"
        try:
            cpus = tuple(sorted(parse_cpu_list(cpulist.read_text()))) if cpulist.exists() else ()
        except ValueError:
            raise TopologyError(f"cannot read CPU list {cpulist.read_text().strip()!r}", source=str(cpulist)) from None
        except OSError as e:
            raise TopologyError(f"cannot read: {e.strerror or e}", source=str(cpulist)) from None
        try:
            distances = tuple(int(x) for x in distance.read_text().split()) if distance.exists() else ()
        except ValueError:
            raise TopologyError(f"cannot read distances {distance.read_text().strip()!r}", source=str(distance)) from None
        except OSError as e:
            raise TopologyError(f"cannot read: {e.strerror or e}", source=str(distance)) from None
        nodes.append(NumaNode(int(m.group(1)), cpus, distances))
    if not nodes:
        raise TopologyError("no NUMA node (node*) found", source=str(base))
    return sorted(nodes)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _Nvml:
    """Thin access to the pynvml calls used here, turning NVML errors into TopologyError."""

    def __init__(self, module):
        self.m = module
        self.error = getattr(module, "NVMLError", Exception)

    def call(self, name: str, *args):
        try:
            return getattr(self.m, name)(*args)
        except self.error as e:
            raise TopologyError(f"{name} failed: {e}", source=SOURCE) from None

    def optional(self, name: str, *args):
        """The call's result, or None when this NVML/driver/GPU does not provide it."""
        fn = getattr(self.m, name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except self.error:
            return None


def _gpu_numa(nvml: _Nvml, handle, cpus: frozenset[int] | None, nodes: list[NumaNode] | None) -> int | None:
    numa = nvml.optional("nvmlDeviceGetNumaNodeId", handle)
    if isinstance(numa, int) and numa >= 0:
        return numa
    if cpus and nodes:
        touching = [n.id for n in nodes if cpus & set(n.cpus)]
        if len(touching) == 1:
            return touching[0]
    return None


def detect_topology(
    *,
    name: str = "detected",
    lane_bandwidth: float | None = None,
    pcie_bandwidth: float | None = None,
    inter_socket_bandwidth: float = defaults.INTER_SOCKET,
    numa_root: str | os.PathLike = NUMA_ROOT,
) -> Topology:
    """The GPUs of this machine, their NVLinks, PCIe tree and CPUs, through NVML.

    ``lane_bandwidth`` (B/s per NVLink lane) defaults to the nominal bandwidth of the
    NVLink generation NVML reports; ``pcie_bandwidth`` to NCCL's figure for the GPUs'
    maximum PCIe generation and width. Raises :class:`MissingDependencyError` without
    ``nvidia-ml-py`` and :class:`TopologyError` when NVML cannot be initialised.
    """
    try:
        import pynvml
    except ImportError:
        raise MissingDependencyError("GPU detection", "nvidia-ml-py", extra="nvml") from None
    nvml = _Nvml(pynvml)
    try:
        pynvml.nvmlInit()
    except Exception as e:  # noqa: BLE001 - any failure here means "no usable driver"
        reason = str(e) or type(e).__name__
        raise TopologyError(f"NVML could not be initialised ({reason}); is the NVIDIA driver installed "
                            "and a GPU visible?") from None
    try:
        return _detect(nvml, name, lane_bandwidth, pcie_bandwidth, inter_socket_bandwidth, numa_root)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down is best effort
            log.debug("nvmlShutdown failed", exc_info=True)


def _detect(nvml: _Nvml, name: str, lane_bandwidth: float | None, pcie_bandwidth: float | None,
            inter_socket_bandwidth: float, numa_root) -> Topology:
    m = nvml.m
    count = nvml.call("nvmlDeviceGetCount")
    if count == 0:
        raise TopologyError("NVML reports no GPU", source=SOURCE)
    handles = [nvml.call("nvmlDeviceGetHandleByIndex", i) for i in range(count)]
    busids = []
    for i, h in enumerate(handles):
        raw = _text(nvml.call("nvmlDeviceGetPciInfo", h).busId)
        canon = canonical_busid(raw)
        if canon is None:
            raise TopologyError(f"GPU {i}: NVML bus id {raw!r} is not a PCI bus id", source=SOURCE)
        busids.append(canon)
    gpu_of = {b: f"gpu{i}" for i, b in enumerate(busids)}
    try:
        nodes = detect_numa_nodes(numa_root)
    except TopologyError:
        nodes = None

    words = max(1, math.ceil((os.cpu_count() or 1) / 64))
    enabled = getattr(m, "NVML_FEATURE_ENABLED", 1)
    max_links = getattr(m, "NVML_NVLINK_MAX_LINKS", 18)
    endpoints: list[Endpoint] = []
    pair_lanes: dict[tuple[str, str], int] = {}
    switch_lanes: dict[str, int] = {}
    versions: Counter[int] = Counter()
    pcie: list[float] = []
    for i, h in enumerate(handles):
        gid = f"gpu{i}"
        masks = nvml.optional("nvmlDeviceGetCpuAffinity", h, words)
        cpus = frozenset(64 * w + bit for w, mask in enumerate(masks or []) for bit in range(64)
                         if int(mask) >> bit & 1) or None
        endpoints.append(Endpoint(gid, DeviceKind.GPU, i, numa=_gpu_numa(nvml, h, cpus, nodes), cpus=cpus,
                                  pci=busids[i]))
        gen = nvml.optional("nvmlDeviceGetMaxPcieLinkGeneration", h)
        width = nvml.optional("nvmlDeviceGetMaxPcieLinkWidth", h)
        if gen in _PCIE_CODE and isinstance(width, int) and width > 0:
            pcie.append(width * _PCIE_CODE[gen] / 80 * GB)

        peers: Counter[str] = Counter()
        for link in range(max_links):
            if nvml.optional("nvmlDeviceGetNvLinkState", h, link) != enabled:
                continue
            remote = nvml.optional("nvmlDeviceGetNvLinkRemotePciInfo", h, link)
            remote_bus = canonical_busid(_text(remote.busId)) if remote is not None else None
            kind = nvml.optional("nvmlDeviceGetNvLinkRemoteDeviceType", h, link)
            if kind is None:  # older NVML: a bus id we know is a GPU, anything else the switch
                kind = _REMOTE_GPU if remote_bus in gpu_of else _REMOTE_SWITCH
            version = nvml.optional("nvmlDeviceGetNvLinkVersion", h, link)
            if isinstance(version, int):
                versions[version] += 1
            if kind == _REMOTE_GPU and remote_bus in gpu_of and gpu_of[remote_bus] != gid:
                peers[gpu_of[remote_bus]] += 1
            elif kind == _REMOTE_SWITCH:
                switch_lanes[gid] = switch_lanes.get(gid, 0) + 1
            elif kind == _REMOTE_IBMNPU:
                log.warning("%s link %d goes to a CPU (NVLink to POWER CPUs is not modelled); ignored", gid, link)
        for peer, lanes in peers.items():
            key = (gid, peer) if gid < peer else (peer, gid)
            if key in pair_lanes and pair_lanes[key] != lanes:
                log.warning("NVML reports %d NVLinks %s->%s but %d the other way", lanes, gid, peer, pair_lanes[key])
            pair_lanes.setdefault(key, lanes)

    relations: dict[frozenset[str], str] = {}
    for i in range(count):
        for j in range(i + 1, count):
            level = nvml.optional("nvmlDeviceGetTopologyCommonAncestor", handles[i], handles[j])
            rel = _TOPOLOGY_LEVELS.get(int(level)) if level is not None else None
            if rel is not None:
                relations[frozenset((f"gpu{i}", f"gpu{j}"))] = rel

    if lane_bandwidth is None:
        version = versions.most_common(1)[0][0] if versions else 2
        known = defaults.NVLINK_LANE
        lane_bandwidth = known.get(f"nvlink{version}", max(known.values()))
    meta = {"format": "nvml", "source": SOURCE}
    return build_host_topology(
        name, endpoints, relations, nvlinks=pair_lanes, nvswitch_lanes=switch_lanes,
        lane_bandwidth=lane_bandwidth, pcie_bandwidth=pcie_bandwidth or (max(pcie) if pcie else defaults.PCIE_X16[3]),
        inter_socket_bandwidth=inter_socket_bandwidth, source=SOURCE, meta=meta,
    )
