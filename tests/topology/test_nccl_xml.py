"""NCCL topology XML: reading real-format files, writing what NCCL parses, round trips."""

from __future__ import annotations

import itertools
import logging
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborcc.errors import TopologyError
from arborcc.topology.defaults import INTER_SOCKET, LATENCY, NVLINK_LANE, PCIE_X16
from arborcc.topology.model import GB, Device, DeviceKind, LinkKind, Topology, TopologyBuilder
from arborcc.topology.nccl_xml import (canonical_busid, dump_nccl_xml, nccl_lane_bandwidth, parse_nccl_xml,
                                       pcie_link_bandwidth, read_nccl_xml, write_nccl_xml)
from arborcc.topology.nvidia_smi import read_nvidia_smi
from arborcc.topology.readers import read_topology
from support.topologies import DGX1V_NVLINKS, pcie_parent

SAMPLES = Path(__file__).parent / "samples"
BAD = SAMPLES / "bad"





# --------------------------------------------------------------------------------------
# topologies built by hand with the shared conventions
# --------------------------------------------------------------------------------------
def _host_devices(b: TopologyBuilder, cpus: int, switches: dict[int, int]) -> None:
    for c in range(cpus):
        b.add_device(Device(f"cpu{c}", DeviceKind.CPU, host=0, index=c, numa=c))
    for s, c in switches.items():
        b.add_device(Device(f"pcie{s}", DeviceKind.PCIE_SWITCH, host=0, index=s, numa=c))
    if cpus == 2:
        b.connect("cpu0", "cpu1", LinkKind.INTER_SOCKET, INTER_SOCKET, LATENCY[LinkKind.INTER_SOCKET])


def build_dgx1v_like() -> Topology:
    """8 V100s (NVLink matrix of topologies.md), 4 PCIe gen3 switches, 2 CPUs, 4 NICs."""
    b = TopologyBuilder("dgx1v-like")
    _host_devices(b, 2, {0: 0, 1: 0, 2: 1, 3: 1})
    pcie = dict(kind=LinkKind.PCIE, bandwidth=PCIE_X16[3], latency=LATENCY[LinkKind.PCIE])
    for g in range(8):
        b.add_device(Device(f"gpu{g}", DeviceKind.GPU, host=0, index=g, numa=g // 4))
    for n, sw in enumerate([0, 2, 1, 3]):
        b.add_device(Device(f"nic{n}", DeviceKind.NIC, host=0, index=n, numa=sw // 2))
        b.connect(f"nic{n}", f"pcie{sw}", **pcie)
    for s in range(4):
        b.connect(f"pcie{s}", f"cpu{s // 2}", **pcie)
    for g in range(8):
        b.connect(f"gpu{g}", f"pcie{g // 2}", **pcie)
    for i, j in itertools.combinations(range(8), 2):
        if DGX1V_NVLINKS[i][j]:
            n = DGX1V_NVLINKS[i][j]
            b.connect(f"gpu{i}", f"gpu{j}", LinkKind.NVLINK, n * NVLINK_LANE["nvlink2"], LATENCY[LinkKind.NVLINK], n)
    return b.build()


def build_a100_like() -> Topology:
    """8 A100s on one NVSwitch fabric (12 lanes each), 4 gen4 switches with 2 GPUs + 2 NICs."""
    b = TopologyBuilder("a100-like")
    _host_devices(b, 2, {0: 0, 1: 0, 2: 1, 3: 1})
    b.add_device(Device("nvswitch0", DeviceKind.NVSWITCH, host=0, index=0))
    pcie = dict(kind=LinkKind.PCIE, bandwidth=PCIE_X16[4], latency=LATENCY[LinkKind.PCIE])
    for g in range(8):
        b.add_device(Device(f"gpu{g}", DeviceKind.GPU, host=0, index=g, numa=g // 4))
        b.connect(f"gpu{g}", f"pcie{g // 2}", **pcie)
        b.connect(f"gpu{g}", "nvswitch0", LinkKind.NVLINK, 12 * NVLINK_LANE["nvlink3"], LATENCY[LinkKind.NVLINK], 12)
    for n in range(8):
        b.add_device(Device(f"nic{n}", DeviceKind.NIC, host=0, index=n, numa=n // 4))
        b.connect(f"nic{n}", f"pcie{n // 2}", **pcie)
    for s in range(4):
        b.connect(f"pcie{s}", f"cpu{s // 2}", **pcie)
    return b.build()


# --------------------------------------------------------------------------------------
# what NCCL's own parser needs (src/graph/xml.cc): no declaration, spaces, quoted values
# --------------------------------------------------------------------------------------
_LINE = re.compile(r'( *)<(/?)([a-z]+)((?: [a-z_]+="[^"<>&]{0,255}")*)(/?)>')
REQUIRED = {"cpu": {"numaid", "arch"}, "pci": {"busid", "class", "link_speed", "link_width"},
            "gpu": {"dev", "sm", "rank", "gdr"}, "nvlink": {"count", "tclass"}, "net": {"dev", "speed"}}


def assert_nccl_parsable(text: str) -> ET.Element:
    stack: list[str] = []
    for line in text.splitlines():
        m = _LINE.fullmatch(line)
        assert m, f"NCCL's parser would reject {line!r}"
        indent, closing, tag, attrs, single = m.groups()
        assert len(re.findall(r" [a-z_]+=", attrs)) <= 16
        if closing:
            assert stack.pop() == tag and len(indent) == 2 * len(stack)
        else:
            assert len(indent) == 2 * len(stack)
            if not single:
                stack.append(tag)
    assert not stack
    root = ET.fromstring(text)
    assert root.tag == "system" and root.get("version") == "1"
    for el in root.iter():
        assert REQUIRED.get(el.tag, set()) <= set(el.attrib), el.tag
        if el.tag == "cpu" and el.get("vendor") == "GenuineIntel":
            assert {"familyid", "modelid"} <= set(el.attrib)
        if el.tag == "nvlink" and el.get("tclass") == "0x030200":
            assert "target" in el.attrib
    return root


# --------------------------------------------------------------------------------------
# reading the samples
# --------------------------------------------------------------------------------------
def test_dgx1v_sample_nvlinks_switches_and_nics():
    t = read_nccl_xml(SAMPLES / "dgx1v_nccl.xml")
    lane = nccl_lane_bandwidth(70)
    assert lane == 20 * GB
    for i, j in itertools.permutations(range(8), 2):
        link = t.link(f"gpu{i}", f"gpu{j}")
        assert (link.count, link.bandwidth) == (DGX1V_NVLINKS[i][j], DGX1V_NVLINKS[i][j] * lane) \
            if DGX1V_NVLINKS[i][j] else link is None
    assert [pcie_parent(t, f"gpu{i}") for i in range(8)] == ["pcie0", "pcie0", "pcie1", "pcie1",
                                                           "pcie2", "pcie2", "pcie3", "pcie3"]
    assert [pcie_parent(t, f"nic{n}") for n in range(4)] == ["pcie0", "pcie2", "pcie1", "pcie3"]
    assert [pcie_parent(t, f"pcie{s}") for s in range(4)] == ["cpu0", "cpu0", "cpu1", "cpu1"]
    assert t.link("gpu0", "pcie0").bandwidth == 12 * GB
    assert t.link("cpu0", "cpu1").kind is LinkKind.INTER_SOCKET
    assert t.devices["gpu4"].pci == "0000:85:00.0" and t.devices["pcie3"].pci == "0000:87:00.0"
    assert t.devices["gpu4"].numa == 1
    assert t.meta["nic_names"] == {"nic0": "mlx5_0", "nic1": "mlx5_1", "nic2": "mlx5_2", "nic3": "mlx5_3"}
    assert t.meta["nic_bandwidth"]["nic3"] == 12.5 * GB  # 100000 Mb/s
    assert t.meta["gpu_sm"]["gpu7"] == 70
    assert t.ranks == tuple(f"gpu{i}" for i in range(8))


def test_dgx1v_sample_agrees_with_the_nvidia_smi_dump():
    xml = read_nccl_xml(SAMPLES / "dgx1v_nccl.xml", lane_bandwidth=NVLINK_LANE["nvlink2"])
    smi = read_nvidia_smi(SAMPLES / "dgx1v_topo.txt")
    assert xml.links == smi.links
    assert {d.id: (d.kind, d.index, d.numa) for d in xml.devices.values()} == \
        {d.id: (d.kind, d.index, d.numa) for d in smi.devices.values()}


def test_a100_sample_nvswitch_nesting_and_ignored_devices():
    t = read_nccl_xml(SAMPLES / "dgx_a100_nccl.xml")
    for g in t.ranks:  # six NVSwitches x 2 lanes become one fabric of 12 lanes, sm80 = 20 GB/s a lane
        assert t.link(g, "nvswitch0").count == t.link("nvswitch0", g).count == 12
        assert t.link(g, "nvswitch0").bandwidth == 240 * GB
    assert t.devices["nvswitch0"].pci is None
    assert pcie_parent(t, "gpu2") == "pcie2" and pcie_parent(t, "gpu3") == "pcie3"
    assert pcie_parent(t, "pcie2") == pcie_parent(t, "pcie3") == pcie_parent(t, "nic2") == "pcie1"
    assert pcie_parent(t, "pcie1") == "cpu0"
    assert pcie_parent(t, "gpu0") == pcie_parent(t, "nic1") == "pcie0"
    assert t.link("gpu0", "pcie0").bandwidth == 24 * GB  # 16.0 GT/s PCIe x16
    assert len(t.devices) == 2 + 6 + 8 + 1 + 8  # the NVMe drive is not a device of the model
    assert t.meta["nic_bandwidth"]["nic7"] == 25 * GB
    assert t.meta["nccl_cpu"]["cpu1"]["vendor"] == "AuthenticAMD"
    # written back, the CPU attributes survive
    root = assert_nccl_parsable(dump_nccl_xml(t))
    assert {c.get("vendor") for c in root.iter("cpu")} == {"AuthenticAMD"}
    assert read_nccl_xml(SAMPLES / "dgx_a100_nccl.xml", lane_bandwidth=25 * GB).link("gpu0", "nvswitch0").bandwidth \
        == 300 * GB


def test_nccl_formulas():
    assert pcie_link_bandwidth(16, "8 GT/s") == 12 * GB
    assert pcie_link_bandwidth(16, "16.0 GT/s PCIe") == 24 * GB
    assert pcie_link_bandwidth(16, "32 GT/s") == 48 * GB
    assert pcie_link_bandwidth(8, "2.5 GT/s") == 1.5 * GB
    assert pcie_link_bandwidth(0, "5 GT/s") == 6 * GB  # width 0 counts as 16
    assert pcie_link_bandwidth(16, "Unknown speed") == 12 * GB  # NCCL's fallback code 60
    assert [nccl_lane_bandwidth(sm) / GB for sm in (60, 70, 80, 86, 90, 100)] == [18, 20, 20, 12, 20.6, 40.1]
    assert canonical_busid("00000000:0A:00.0") == "0000:0a:00.0"
    assert canonical_busid("0a:00.0") is None


# --------------------------------------------------------------------------------------
# writing and round trips
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("build, lane", [(build_dgx1v_like, NVLINK_LANE["nvlink2"]),
                                         (build_a100_like, NVLINK_LANE["nvlink3"])])
def test_round_trip_of_hand_built_machines(tmp_path, build, lane):
    t = build()
    text = dump_nccl_xml(t)
    assert_nccl_parsable(text)
    back = parse_nccl_xml(text, lane_bandwidth=lane)
    assert back == t
    assert dump_nccl_xml(back) == text  # sm, NIC speeds, CPU attributes kept in meta
    path = tmp_path / "topo.xml"
    write_nccl_xml(t, path)
    assert read_nccl_xml(path, lane_bandwidth=lane) == t
    assert read_topology(path, lane_bandwidth=lane) == t


def test_written_file_content():
    t = build_dgx1v_like()
    root = assert_nccl_parsable(dump_nccl_xml(t, sm=70))
    gpus = {g.get("dev"): g for g in root.iter("gpu")}
    assert {g.get("sm") for g in gpus.values()} == {"70"}
    busid = {dev: pci.get("busid") for pci in root.iter("pci") for g in pci.findall("gpu") for dev in [g.get("dev")]}
    targets = {(nv.get("target"), nv.get("count")) for nv in gpus["0"].findall("nvlink")}
    assert targets == {(busid["1"], "1"), (busid["2"], "1"), (busid["3"], "2"), (busid["4"], "2")}
    assert len(set(busid.values())) == 8
    switches = [p for p in root.iter("pci") if p.get("class") == "0x060400"]
    assert len(switches) == 4 and all(p.get("link_speed") == "8 GT/s" and p.get("link_width") == "16" for p in switches)
    assert [n.get("speed") for n in root.iter("net")] == ["100000"] * 4
    assert not text_has_declaration(dump_nccl_xml(t))
    # the guessed sm follows the NVLink count (6 lanes: V100)
    assert {g.get("sm") for g in ET.fromstring(dump_nccl_xml(t)).iter("gpu")} == {"70"}
    assert {g.get("sm") for g in ET.fromstring(dump_nccl_xml(build_a100_like())).iter("gpu")} == {"80"}


def text_has_declaration(text: str) -> bool:
    return text.lstrip().startswith("<?")


def test_ranks_order_survives():
    t = build_dgx1v_like().with_ranks([f"gpu{i}" for i in (3, 1, 0, 2, 7, 6, 5, 4)])
    back = parse_nccl_xml(dump_nccl_xml(t), lane_bandwidth=NVLINK_LANE["nvlink2"])
    assert back.ranks == t.ranks and back == t


def _two_hosts() -> Topology:
    b = TopologyBuilder("two-nodes")
    b.add_device(Device("leaf0", DeviceKind.NET_SWITCH, host=None, index=0))
    for h in range(2):
        p = f"n{h}."
        b.add_device(Device(p + "cpu0", DeviceKind.CPU, host=h, index=0, numa=0))
        b.add_device(Device(p + "nic0", DeviceKind.NIC, host=h, index=0, numa=0))
        b.connect(p + "nic0", p + "cpu0", LinkKind.PCIE, PCIE_X16[4], LATENCY[LinkKind.PCIE])
        b.connect(p + "nic0", "leaf0", LinkKind.NETWORK, 50 * GB, LATENCY[LinkKind.NETWORK])
        for g in range(2):
            b.add_device(Device(f"{p}gpu{g}", DeviceKind.GPU, host=h, index=g, numa=0))
            b.connect(f"{p}gpu{g}", p + "cpu0", LinkKind.PCIE, PCIE_X16[4], LATENCY[LinkKind.PCIE])
        b.connect(p + "gpu0", p + "gpu1", LinkKind.NVLINK, 4 * 25 * GB, LATENCY[LinkKind.NVLINK], 4)
    return b.build()


def test_multi_host_needs_a_chosen_host(tmp_path):
    t = _two_hosts()
    path = tmp_path / "cluster.xml"
    with pytest.raises(TopologyError, match="spans hosts 0, 1; NCCL XML describes one node: choose one with host=N"):
        write_nccl_xml(t, path)
    assert not path.exists()
    with pytest.raises(TopologyError, match="host 5 is not in the topology"):
        dump_nccl_xml(t, host=5)
    root = assert_nccl_parsable(dump_nccl_xml(t, host=1))
    assert len(list(root.iter("gpu"))) == 2
    assert [n.get("speed") for n in root.iter("net")] == ["400000"]  # from the 50 GB/s network link
    node = parse_nccl_xml(dump_nccl_xml(t, host=1), lane_bandwidth=25 * GB)
    assert node.link("gpu0", "gpu1").count == 4 and set(node.ranks) == {"gpu0", "gpu1"}


def _builder_with(extra) -> Topology:
    b = TopologyBuilder("odd")
    b.add_device(Device("cpu0", DeviceKind.CPU, host=0, index=0, numa=0))
    for g in range(2):
        b.add_device(Device(f"gpu{g}", DeviceKind.GPU, host=0, index=g, numa=0))
    b.add_device(Device("pcie0", DeviceKind.PCIE_SWITCH, host=0, index=0, numa=0))
    b.add_device(Device("nic0", DeviceKind.NIC, host=0, index=0, numa=0))
    extra(b)
    return b.build()


def _pcie(b, x, y, bw=PCIE_X16[3]):
    b.connect(x, y, LinkKind.PCIE, bw, LATENCY[LinkKind.PCIE])


@pytest.mark.parametrize("extra, problem", [
    (lambda b: (_pcie(b, "gpu0", "cpu0"), _pcie(b, "gpu1", "cpu0"), _pcie(b, "nic0", "cpu0")),
     "pcie0 has no PCIe path to a CPU"),
    (lambda b: (_pcie(b, "pcie0", "cpu0"), _pcie(b, "gpu0", "pcie0"), _pcie(b, "gpu1", "pcie0"),
                _pcie(b, "gpu1", "cpu0"), _pcie(b, "nic0", "cpu0")), "form a cycle"),
    (lambda b: (_pcie(b, "pcie0", "cpu0"), _pcie(b, "gpu0", "pcie0"), _pcie(b, "gpu1", "gpu0"),
                _pcie(b, "nic0", "cpu0")), "gpu1 is attached below gpu0"),
    (lambda b: (_pcie(b, "pcie0", "cpu0"), _pcie(b, "gpu0", "pcie0"), _pcie(b, "gpu1", "pcie0"),
                _pcie(b, "nic0", "cpu0"), b.connect("gpu0", "nic0", LinkKind.NVLINK, 25 * GB, 0.0)),
     "NCCL XML has NVLinks only to GPUs, NVSwitches and CPUs"),
])
def test_unwritable_topologies(tmp_path, extra, problem):
    t = _builder_with(extra)
    path = tmp_path / "odd.xml"
    with pytest.raises(TopologyError, match=problem):
        write_nccl_xml(t, path)
    assert not path.exists() and not list(tmp_path.iterdir())


def test_unrepresentable_pcie_bandwidth_is_rounded_with_a_warning(caplog):
    t = _builder_with(lambda b: (_pcie(b, "pcie0", "cpu0", 10 * GB), _pcie(b, "gpu0", "pcie0"),
                                 _pcie(b, "gpu1", "pcie0"), _pcie(b, "nic0", "cpu0")))
    with caplog.at_level(logging.WARNING, logger="arborcc.topology.nccl_xml"):
        back = parse_nccl_xml(dump_nccl_xml(t))
    assert "not a PCIe width x speed NCCL knows" in caplog.text
    assert back.link("pcie0", "cpu0").bandwidth == 12 * GB  # the nearest width x speed NCCL knows
    assert back.link("gpu0", "pcie0").bandwidth == 12 * GB


# --------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, message", [
    ("xml_wrong_root.xml", "1: root element is <topology>, not <system>: not an NCCL topology file"),
    ("xml_missing_sm.xml", "37: <gpu dev=\"3\">: missing attribute 'sm'"),
    ("xml_bad_number.xml", "28: <pci busid=\"0000:0a:00.0\">: attribute 'link_width': expected an integer, got 'x16'"),
    ("xml_bad_busid.xml", "52: <pci busid=\"83:00\">: attribute 'busid': expected a PCI bus id like 0000:07:00.0, "
                          "got '83:00'"),
    ("xml_bad_version.xml", "1: <system>: attribute 'version': NCCL topology version 2 is not supported (expected 1)"),
    ("xml_not_well_formed.xml", "17: not well-formed XML: mismatched tag"),
    ("xml_bad_tclass.xml", "14: <nvlink target=\"0000:0b:00.0\">: attribute 'tclass': unknown NVLink target class "
                           "'0x123456' (expected 0x030200 GPU, 0x068000 NVSwitch or 0x068001 CPU)"),
    ("xml_duplicate_numaid.xml", "51: <cpu numaid=\"0\">: numaid 0 appears twice (first at line 3)"),
])
def test_bad_files_name_the_element_and_attribute(name, message):
    path = BAD / name
    with pytest.raises(TopologyError) as info:
        read_nccl_xml(path)
    assert str(info.value) == f"{path}:{message}"
    with pytest.raises(TopologyError) as again:
        read_topology(path)
    assert str(again.value) == str(info.value)


@pytest.mark.parametrize("text, problem", [
    ("", "no element found"),
    ('<system version="1"><cpu arch="x86_64" vendor="AuthenticAMD" familyid="23"/></system>',
     "<cpu>: missing attribute 'numaid'"),
    ('<system version="1"><cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6"/></system>',
     "missing attribute 'modelid'"),
    ('<system version="1"><cpu numaid="0" arch="arm64" affinity="zz"/></system>', "attribute 'affinity'"),
    ('<system version="1"><cpu numaid="0" arch="arm64" host_hash="0x1"/><cpu numaid="1" arch="arm64" '
     'host_hash="0x2"/></system>', "several hosts"),
    ('<system><cpu numaid="0" arch="arm64"/></system>', "<system>: missing attribute 'version'"),
    ('<!DOCTYPE s [<!ENTITY x "y">]><system version="1"/>', "entity declarations are not allowed"),
    ('<system version="1"><cpu numaid="0" arch="arm64"><pci busid="0000:01:00.0" class="0x030200" link_speed="8 GT/s" '
     'link_width="16"><gpu dev="0" sm="80" rank="0"><nvlink target="0000:01:00.0" count="1" tclass="0x030200"/>'
     '</gpu></pci></cpu></system>', "an NVLink from a GPU to itself"),
    ('<system version="1"><cpu numaid="0" arch="arm64"><pci busid="0000:01:00.0" class="0x030200" link_speed="8 GT/s" '
     'link_width="16"><gpu dev="0" sm="80" rank="0"/></pci><pci busid="0000:02:00.0" class="0x030200" '
     'link_speed="8 GT/s" link_width="16"><gpu dev="1" sm="80" rank="0"/></pci></cpu></system>',
     "rank 0 appears twice"),
    ('<system version="1"><cpu numaid="0" arch="arm64"><pci busid="0000:01:00.0" class="0x030200" link_speed="8 GT/s" '
     'link_width="16"><gpu dev="0" sm="80" rank="0"/></pci><pci busid="0000:02:00.0" class="0x020700" '
     'link_speed="8 GT/s" link_width="16"><nic><net dev="0" speed="fast"/></nic></pci></cpu></system>',
     "<net dev=\"0\">: attribute 'speed': expected an integer, got 'fast'"),
    ('<system version="1"><cpu numaid="0" arch="arm64"/></system>', "the topology has no GPU"),
])
def test_malformed_xml(text, problem):
    with pytest.raises(TopologyError) as info:
        parse_nccl_xml(text, "t.xml")
    assert problem in str(info.value) and str(info.value).startswith("t.xml") and "\n" not in str(info.value)


def test_nvlink_to_unknown_gpu_is_ignored_like_nccl_does():
    text = (SAMPLES / "dgx1v_nccl.xml").read_text().replace('<nvlink target="0000:85:00.0" count="2"',
                                                            '<nvlink target="0000:99:00.0" count="2"')
    t = parse_nccl_xml(text)
    assert t.link("gpu0", "gpu4") is None and t.link("gpu4", "gpu0").count == 2


# --------------------------------------------------------------------------------------
# property: any single host built with the conventions survives write -> read
# --------------------------------------------------------------------------------------
@st.composite
def hosts(draw):
    b = TopologyBuilder("random-host")
    n_cpus = draw(st.integers(1, 3))
    for c in range(n_cpus):
        b.add_device(Device(f"cpu{c}", DeviceKind.CPU, host=0, index=c, numa=c))
    for a, c in itertools.combinations(range(n_cpus), 2):
        b.connect(f"cpu{a}", f"cpu{c}", LinkKind.INTER_SOCKET, INTER_SOCKET, LATENCY[LinkKind.INTER_SOCKET])
    speeds = st.sampled_from([PCIE_X16[3], PCIE_X16[4], PCIE_X16[5], 6 * GB, 3 * GB])
    parents = [f"cpu{c}" for c in range(n_cpus)]
    numa = {f"cpu{c}": c for c in range(n_cpus)}
    for s in range(draw(st.integers(0, 4))):
        parent = draw(st.sampled_from(parents))
        b.add_device(Device(f"pcie{s}", DeviceKind.PCIE_SWITCH, host=0, index=s, numa=numa[parent]))
        b.connect(f"pcie{s}", parent, LinkKind.PCIE, draw(speeds), LATENCY[LinkKind.PCIE])
        parents.append(f"pcie{s}")
        numa[f"pcie{s}"] = numa[parent]
    n_gpus = draw(st.integers(1, 6))
    for g in range(n_gpus):
        parent = draw(st.sampled_from(parents))
        b.add_device(Device(f"gpu{g}", DeviceKind.GPU, host=0, index=g, numa=numa[parent]))
        b.connect(f"gpu{g}", parent, LinkKind.PCIE, draw(speeds), LATENCY[LinkKind.PCIE])
    for n in range(draw(st.integers(0, 3))):
        parent = draw(st.sampled_from(parents))
        b.add_device(Device(f"nic{n}", DeviceKind.NIC, host=0, index=n, numa=numa[parent]))
        b.connect(f"nic{n}", parent, LinkKind.PCIE, draw(speeds), LATENCY[LinkKind.PCIE])
    lane = draw(st.sampled_from([18 * GB, 20 * GB, 25 * GB]))
    if n_gpus > 1 and draw(st.booleans()):
        b.add_device(Device("nvswitch0", DeviceKind.NVSWITCH, host=0, index=0))
        for g in range(n_gpus):
            k = draw(st.integers(1, 18))
            b.connect(f"gpu{g}", "nvswitch0", LinkKind.NVLINK, k * lane, LATENCY[LinkKind.NVLINK], k)
    else:
        for i, j in itertools.combinations(range(n_gpus), 2):
            k = draw(st.integers(0, 3))
            if k:
                b.connect(f"gpu{i}", f"gpu{j}", LinkKind.NVLINK, k * lane, LATENCY[LinkKind.NVLINK], k)
    ranks = draw(st.permutations([f"gpu{g}" for g in range(n_gpus)]))
    return b.build(ranks=ranks), lane


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts())
def test_any_conventional_host_round_trips(host):
    t, lane = host
    text = dump_nccl_xml(t)
    assert_nccl_parsable(text)
    back = parse_nccl_xml(text, lane_bandwidth=lane)
    assert back == t
    assert dump_nccl_xml(back) == text


# --------------------------------------------------------------------------------------
# the lead's built-in machines, once they exist
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("machine", ["dgx1p", "dgx1v", "dgx2", "dgx-a100", "dgx-h100"])
def test_builtin_machines_round_trip(machine):
    machines = pytest.importorskip("arborcc.topology.machines")
    t = machines.build_machine(machine)
    lanes = {l.bandwidth / l.count for l in t.links.values() if l.kind is LinkKind.NVLINK}
    assert len(lanes) == 1
    inter = {l.bandwidth for l in t.links.values() if l.kind is LinkKind.INTER_SOCKET} or {INTER_SOCKET}
    text = dump_nccl_xml(t)
    assert_nccl_parsable(text)
    back = parse_nccl_xml(text, lane_bandwidth=lanes.pop(), inter_socket_bandwidth=inter.pop())
    assert back == t


def test_one_node_of_a_cluster_is_the_machine():
    cluster = pytest.importorskip("arborcc.topology.cluster")
    machines = pytest.importorskip("arborcc.topology.machines")
    c = cluster.build_cluster("dgx-a100", 2)
    node = parse_nccl_xml(dump_nccl_xml(c, host=1), lane_bandwidth=25 * GB)
    assert node == machines.build_machine("dgx-a100")
    assert node.meta["nic_bandwidth"]["nic0"] == 25 * GB  # the NIC's network link


_VALUES = st.sampled_from(["", "0", "-1", "x16", "0x", "0000:99:00.0", "0000:06:00.0", "99", "8 GT/s", "0x030200",
                           "0x068000", "0x068001", "0x060400", "0x020700", "abc", "1e3", "0x1f"])


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_mangled_xml_fails_only_with_topology_errors(data):
    lines = (SAMPLES / data.draw(st.sampled_from(["dgx1v_nccl.xml", "dgx_a100_nccl.xml"]))).read_text().splitlines()
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(lines) - 1))
        values = list(re.finditer(r'="([^"]*)"', lines[i]))
        if values and data.draw(st.booleans()):
            m = data.draw(st.sampled_from(values))
            lines[i] = lines[i][:m.start(1)] + data.draw(_VALUES) + lines[i][m.end(1):]
        elif data.draw(st.booleans()):
            lines[i] = re.sub(r' [a-z_]+="[^"]*"', "", lines[i], count=1)  # drop an attribute
        else:
            del lines[i]
            if not lines:
                lines = [""]
    try:
        t = parse_nccl_xml("\n".join(lines), "mangled.xml")
    except TopologyError as e:
        assert "\n" not in str(e) and str(e).startswith("mangled.xml")
    else:
        assert t.ranks and all(t.devices[g].is_gpu for g in t.ranks)
