"""Live detection: NVML through a fake ``pynvml`` module (we have no GPU), NUMA through sysfs."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

from arborcc.errors import ArborccError, MissingDependencyError, TopologyError
from arborcc.topology import detect
from arborcc.topology.defaults import NVLINK_LANE, PCIE_X16
from arborcc.topology.detect import NumaNode, detect_numa_nodes, detect_topology
from arborcc.topology.model import GB, LinkKind
from arborcc.topology.nvidia_smi import read_nvidia_smi
from support.topologies import DGX1V_NVLINKS, pcie_parent

SAMPLES = Path(__file__).parent / "samples"

DGX1V_BUS = ["06", "07", "0a", "0b", "85", "86", "89", "8a"]
# NVML's nvmlGpuTopologyLevel_t and nvmlNvLinkDeviceType_t values
SINGLE, MULTIPLE, HOSTBRIDGE, NODE, SYSTEM = 10, 20, 30, 40, 50
REMOTE_GPU, REMOTE_SWITCH = 0, 2


class FakeNVMLError(Exception):
    pass


def cpu_masks(cpus: set[int], words: int) -> list[int]:
    return [sum(1 << (c - 64 * w) for c in cpus if 64 * w <= c < 64 * (w + 1)) for w in range(words)]


def fake_pynvml(gpus: list[dict], ancestor, *, remote_type: bool = True, numa_ids: list[int] | None = None,
                init_error: str | None = None, count_error: bool = False) -> tuple[types.ModuleType, dict]:
    """A module with the pynvml calls detection uses, answering from ``gpus``.

    Each GPU: ``bus`` (NVML's 8-digit-domain form), ``links`` (per link index: None for a
    link that is down, or ``(remote bus, remote device type)``), ``version``, ``cpus``,
    ``pcie`` (generation, width). ``ancestor(i, j)`` gives the PCIe topology level.
    """
    m = types.ModuleType("pynvml")
    calls = {"init": 0, "shutdown": 0}
    m.NVMLError = FakeNVMLError
    m.NVML_FEATURE_ENABLED, m.NVML_FEATURE_DISABLED = 1, 0
    m.NVML_NVLINK_MAX_LINKS = 18

    def init():
        if init_error:
            raise FakeNVMLError(init_error)
        calls["init"] += 1

    def shutdown():
        calls["shutdown"] += 1

    def count():
        if count_error:
            raise FakeNVMLError("Unknown Error")
        return len(gpus)

    def link(h, k):
        links = gpus[h[1]]["links"]
        if k >= len(links):
            raise FakeNVMLError("Not Supported")
        return links[k]

    m.nvmlInit, m.nvmlShutdown, m.nvmlDeviceGetCount = init, shutdown, count
    m.nvmlDeviceGetHandleByIndex = lambda i: ("gpu-handle", i)
    m.nvmlDeviceGetPciInfo = lambda h: SimpleNamespace(busId=gpus[h[1]]["bus"].encode())
    m.nvmlDeviceGetNvLinkState = lambda h, k: 0 if link(h, k) is None else 1
    m.nvmlDeviceGetNvLinkRemotePciInfo = lambda h, k: SimpleNamespace(busId=link(h, k)[0])
    if remote_type:
        m.nvmlDeviceGetNvLinkRemoteDeviceType = lambda h, k: link(h, k)[1]
    m.nvmlDeviceGetNvLinkVersion = lambda h, k: gpus[h[1]]["version"]
    m.nvmlDeviceGetTopologyCommonAncestor = lambda a, b: ancestor(a[1], b[1])
    m.nvmlDeviceGetCpuAffinity = lambda h, words: cpu_masks(gpus[h[1]]["cpus"], words)
    m.nvmlDeviceGetMaxPcieLinkGeneration = lambda h: gpus[h[1]]["pcie"][0]
    m.nvmlDeviceGetMaxPcieLinkWidth = lambda h: gpus[h[1]]["pcie"][1]
    if numa_ids is not None:
        m.nvmlDeviceGetNumaNodeId = lambda h: numa_ids[h[1]]
    return m, calls


def numa_tree(root: Path, nodes: dict[int, str], distances: dict[int, str]) -> Path:
    for n, cpulist in nodes.items():
        (root / f"node{n}").mkdir(parents=True)
        (root / f"node{n}" / "cpulist").write_text(cpulist + "\n")
        (root / f"node{n}" / "distance").write_text(distances[n] + "\n")
    (root / "possible").write_text("0-1\n")
    (root / "power").mkdir()
    return root


SOCKET_CPUS = [set(range(0, 20)) | set(range(40, 60)), set(range(20, 40)) | set(range(60, 80))]


def dgx1v_gpus() -> list[dict]:
    gpus = []
    for i in range(8):
        links = [(f"00000000:{DGX1V_BUS[j]}:00.0", REMOTE_GPU) for j in range(8) for _ in range(DGX1V_NVLINKS[i][j])]
        gpus.append({"bus": f"00000000:{DGX1V_BUS[i]}:00.0", "links": links + [None] * (12 - len(links)),
                     "version": 2, "cpus": SOCKET_CPUS[i // 4], "pcie": (3, 16)})
    return gpus


def dgx1v_ancestor(i: int, j: int) -> int:
    return SINGLE if i // 2 == j // 2 else HOSTBRIDGE if i // 4 == j // 4 else SYSTEM


@pytest.fixture
def many_cpus(monkeypatch):
    monkeypatch.setattr(detect.os, "cpu_count", lambda: 80)


def use(monkeypatch, module: types.ModuleType) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", module)


# --------------------------------------------------------------------------------------
# NVML
# --------------------------------------------------------------------------------------
def test_dgx1v_through_nvml_matches_the_nvidia_smi_dump(monkeypatch, tmp_path, many_cpus):
    module, calls = fake_pynvml(dgx1v_gpus(), dgx1v_ancestor)
    use(monkeypatch, module)
    root = numa_tree(tmp_path, {0: "0-19,40-59", 1: "20-39,60-79"}, {0: "10 21", 1: "21 10"})
    t = detect_topology(numa_root=root)
    assert calls == {"init": 1, "shutdown": 1}
    smi = read_nvidia_smi(SAMPLES / "dgx1v_topo.txt")
    without_nics = {k: l for k, l in smi.links.items() if not (k[0].startswith("nic") or k[1].startswith("nic"))}
    assert t.links == without_nics  # NVLinks per the reference matrix, switches {0,1} {2,3} {4,5} {6,7}
    assert t.link("gpu0", "gpu3").count == 2 and t.link("gpu0", "gpu3").bandwidth == 2 * NVLINK_LANE["nvlink2"]
    assert t.devices["gpu4"].pci == "0000:85:00.0"
    assert [t.devices[f"gpu{i}"].numa for i in range(8)] == [0] * 4 + [1] * 4
    assert t.meta["format"] == "nvml"


def test_nvswitch_box_through_nvml(monkeypatch, many_cpus):
    switches = [f"00000000:{b}:00.0" for b in ("c4", "c5", "c6", "c7", "c8", "c9")]
    gpus = [{"bus": f"00000000:{b}:00.0", "links": [(switches[k // 2], REMOTE_SWITCH) for k in range(12)],
             "version": 3, "cpus": set(range(64)) if i < 4 else set(range(64, 128)), "pcie": (4, 16)}
            for i, b in enumerate(["07", "0f", "47", "4e", "87", "90", "b7", "bd"])]

    def ancestor(i, j):
        return MULTIPLE if i // 2 == j // 2 else NODE if i // 4 == j // 4 else SYSTEM

    module, _ = fake_pynvml(gpus, ancestor, numa_ids=[0, 0, 0, 0, 1, 1, 1, 1])
    use(monkeypatch, module)
    t = detect_topology(name="a100-box", numa_root="/nonexistent")
    assert t.name == "a100-box"
    for g in t.ranks:
        assert t.link(g, "nvswitch0").count == 12
        assert t.link(g, "nvswitch0").bandwidth == 12 * NVLINK_LANE["nvlink3"]
    assert not any(t.devices[l.src].is_gpu and t.devices[l.dst].is_gpu for l in t.links.values())

    def parent(d):
        return pcie_parent(t, d)

    # PXB pairs: each GPU behind its own bridge, both bridges under one upper switch on the GPU's CPU
    for p in range(4):
        a, b = parent(f"gpu{2 * p}"), parent(f"gpu{2 * p + 1}")
        assert a != b and parent(a) == parent(b)
        assert parent(parent(a)) == f"cpu{p // 2}"
    assert t.link("gpu0", parent("gpu0")).bandwidth == PCIE_X16[4]
    assert t.link("cpu0", "cpu1").kind is LinkKind.INTER_SOCKET




def test_old_nvml_without_remote_device_type(monkeypatch, many_cpus):
    gpus = dgx1v_gpus()
    gpus[0]["links"][-1] = ("00000000:ee:00.0", REMOTE_GPU)  # a link to something that is not one of our GPUs
    module, _ = fake_pynvml(gpus, dgx1v_ancestor, remote_type=False)
    use(monkeypatch, module)
    t = detect_topology(numa_root="/nonexistent", lane_bandwidth=20 * GB, pcie_bandwidth=10 * GB)
    assert t.link("gpu1", "gpu2").count == 2 and t.link("gpu1", "gpu2").bandwidth == 40 * GB
    # the unknown bus id is taken for an NVSwitch port (the fabric NVML older versions cannot name)
    assert t.link("gpu0", "nvswitch0").count == 1
    assert t.link("gpu0", "pcie0").bandwidth == 10 * GB


def test_nvml_init_failure_is_one_clear_line(monkeypatch):
    module, calls = fake_pynvml([], dgx1v_ancestor, init_error="NVML Shared Library Not Found")
    use(monkeypatch, module)
    with pytest.raises(TopologyError) as info:
        detect_topology()
    message = str(info.value)
    assert message.startswith("NVML could not be initialised (NVML Shared Library Not Found)")
    assert "\n" not in message and calls["shutdown"] == 0


def test_nvml_errors_during_detection_still_shut_down(monkeypatch):
    module, calls = fake_pynvml(dgx1v_gpus(), dgx1v_ancestor, count_error=True)
    use(monkeypatch, module)
    with pytest.raises(TopologyError, match="NVML: nvmlDeviceGetCount failed: Unknown Error"):
        detect_topology()
    assert calls == {"init": 1, "shutdown": 1}
    module, calls = fake_pynvml([], dgx1v_ancestor)
    use(monkeypatch, module)
    with pytest.raises(TopologyError, match="NVML reports no GPU"):
        detect_topology()
    assert calls["shutdown"] == 1


def test_missing_pynvml_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    with pytest.raises(MissingDependencyError) as info:
        detect_topology()
    assert "nvidia-ml-py" in str(info.value) and "arborcc[nvml]" in str(info.value)


@pytest.mark.skipif(os.path.exists("/dev/nvidia0"), reason="this machine has a GPU")
def test_this_machine_without_gpus_fails_cleanly():
    with pytest.raises(ArborccError) as info:
        detect_topology()
    assert isinstance(info.value, (MissingDependencyError, TopologyError)) and "\n" not in str(info.value)


# --------------------------------------------------------------------------------------
# NUMA nodes from sysfs
# --------------------------------------------------------------------------------------
def test_numa_nodes_of_a_fake_sysfs(tmp_path):
    root = numa_tree(tmp_path, {1: "4-7,12-15", 0: "0-3,8-11", 2: ""}, {0: "10 21 31", 1: "21 10 31", 2: "31 31 10"})
    nodes = detect_numa_nodes(root)
    assert nodes == [NumaNode(0, (0, 1, 2, 3, 8, 9, 10, 11), (10, 21, 31)),
                     NumaNode(1, (4, 5, 6, 7, 12, 13, 14, 15), (21, 10, 31)),
                     NumaNode(2, (), (31, 31, 10))]  # a memory-only node has no CPUs
    node_id, cpus, distances = nodes[1]
    assert node_id == 1 and 12 in cpus and distances[1] == 10


def test_numa_errors(tmp_path):
    with pytest.raises(TopologyError, match="does not exist"):
        detect_numa_nodes(tmp_path / "absent")
    with pytest.raises(TopologyError, match="no NUMA node"):
        detect_numa_nodes(tmp_path)
    numa_tree(tmp_path / "bad", {0: "0-x"}, {0: "10"})
    with pytest.raises(TopologyError) as info:
        detect_numa_nodes(tmp_path / "bad")
    assert str(info.value) == f"{tmp_path / 'bad' / 'node0' / 'cpulist'}: cannot read CPU list '0-x'"
    numa_tree(tmp_path / "bad2", {0: "0-3"}, {0: "ten"})
    with pytest.raises(TopologyError, match="cannot read distances 'ten'"):
        detect_numa_nodes(tmp_path / "bad2")


@pytest.mark.skipif(not os.path.isdir("/sys/devices/system/node"), reason="no NUMA sysfs here")
def test_numa_nodes_of_this_machine():
    nodes = detect_numa_nodes()
    assert len(nodes) >= 1
    assert len({n.id for n in nodes}) == len(nodes)
    assert any(n.cpus for n in nodes)
    assert all(d > 0 for n in nodes for d in n.distances)
