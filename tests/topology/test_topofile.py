"""arborcc's own topology file (YAML and JSON): content, lossless round trips, errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborcc.errors import TopologyError
from arborcc.topology.defaults import LATENCY
from arborcc.topology.model import (GB, MAX_BANDWIDTH, MIN_BANDWIDTH, US, Device, DeviceKind, LinkKind, Topology,
                                    TopologyBuilder)
from arborcc.topology.nccl_xml import read_nccl_xml
from arborcc.topology.nvidia_smi import read_nvidia_smi
from arborcc.topology.readers import read_topology
from arborcc.topology.topofile import (dump_topology, parse_topology, read_topology_file, topology_from_dict,
                                       topology_to_dict, write_topology_file)

SAMPLES = Path(__file__).parent / "samples"
BAD = SAMPLES / "bad"


def sample_topologies() -> list[Topology]:
    return [read_nvidia_smi(SAMPLES / "dgx1v_topo.txt"), read_nvidia_smi(SAMPLES / "dgx_a100_topo.txt"),
            read_nccl_xml(SAMPLES / "dgx_a100_nccl.xml"), read_topology_file(SAMPLES / "small_box.yaml")]


# --------------------------------------------------------------------------------------
# the hand-written samples
# --------------------------------------------------------------------------------------
def test_small_box_content():
    t = read_topology_file(SAMPLES / "small_box.yaml")
    assert t.name == "small-box"
    assert t.ranks == ("gpu1", "gpu0", "gpu2", "gpu3")
    assert t.devices["gpu0"].pci == "0000:06:00.0" and t.devices["gpu2"].pci is None
    nv = t.link("gpu1", "gpu0")
    assert (nv.kind, nv.count, nv.bandwidth, nv.latency) == (LinkKind.NVLINK, 2, 50 * GB, 0.7 * US)
    assert t.link("gpu3", "gpu2").latency == LATENCY[LinkKind.NVLINK]  # latency_us omitted: the kind's default
    assert t.link("pcie0", "cpu0").bandwidth == 12 * GB and t.link("cpu0", "pcie0").bandwidth == 10.5 * GB
    assert t.link("cpu0", "pcie1").bandwidth == 12 * GB  # block-style entry, duplex
    assert t.link("pcie0", "gpu0").bandwidth == 12 * GB  # duplex by default
    assert len(t.links) == 2 * 2 + 4 * 2 + 2 + 2
    assert t.meta == {"description": "hand-written example", "measured": {"pcie_down_gbps": 10.5}}


def test_yaml_and_json_samples_are_the_same_topology():
    a = read_topology_file(SAMPLES / "small_box.yaml")
    b = read_topology_file(SAMPLES / "small_box.json")
    assert a == b and a.meta == b.meta and a.name == b.name


# --------------------------------------------------------------------------------------
# round trips
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("suffix", [".yaml", ".yml", ".json"])
def test_model_file_model_and_file_model_file(tmp_path, suffix):
    for k, t in enumerate(sample_topologies()):
        path = tmp_path / f"t{k}{suffix}"
        write_topology_file(t, path)
        back = read_topology_file(path)
        assert back == t and back.meta == t.meta and back.name == t.name and back.ranks == t.ranks
        again = tmp_path / f"again{k}{suffix}"
        write_topology_file(back, again)
        assert again.read_text() == path.read_text()
        assert read_topology(path) == t


def test_builtin_machines_and_clusters_round_trip(tmp_path):
    machines = pytest.importorskip("arborcc.topology.machines")
    cluster = pytest.importorskip("arborcc.topology.cluster")
    for t in [machines.build_machine(name) for name in machines.MACHINES] + [cluster.build_cluster("dgx1v", 3)]:
        for suffix in (".yaml", ".json"):
            path = tmp_path / f"{t.name}{suffix}"
            write_topology_file(t, path)
            back = read_topology_file(path)
            assert back == t and back.meta == t.meta and back.hosts == t.hosts


def test_the_written_yaml_is_readable_and_uses_file_units():
    t = read_nvidia_smi(SAMPLES / "dgx1v_topo.txt")
    doc = yaml.safe_load(dump_topology(t, "yaml"))
    assert doc["arborcc_topology"] == 1 and "ranks" not in doc  # default order is not written
    nv = next(l for l in doc["links"] if (l["src"], l["dst"]) == ("gpu0", "gpu3"))
    assert nv == {"src": "gpu0", "dst": "gpu3", "kind": "nvlink", "count": 2, "bandwidth_gbps": 50.0,
                  "latency_us": 0.7, "duplex": True}
    assert len(doc["links"]) == len(t.links) // 2  # every link of a reader is full duplex
    assert json.loads(dump_topology(t, "json")) == doc


def test_dict_round_trip_and_custom_ranks():
    t = read_topology_file(SAMPLES / "small_box.yaml")
    d = topology_to_dict(t)
    assert d["ranks"] == ["gpu1", "gpu0", "gpu2", "gpu3"]
    assert topology_from_dict(d) == t
    assert topology_from_dict(json.loads(json.dumps(d))) == t


@st.composite
def topologies(draw):
    n = draw(st.integers(1, 6))
    kinds = [DeviceKind.GPU] + [draw(st.sampled_from(list(DeviceKind))) for _ in range(n - 1)]
    b = TopologyBuilder(draw(st.text(min_size=1, max_size=8)))
    ids = []
    for i, kind in enumerate(kinds):
        did = draw(st.sampled_from(["", "n1.", "yes", "0x"])) + f"{kind.value}{i}"
        ids.append(did)
        b.add_device(Device(did, kind, host=draw(st.none() | st.integers(0, 3)),
                            index=draw(st.none() | st.integers(0, 99)), numa=draw(st.none() | st.integers(0, 7)),
                            pci=draw(st.none() | st.sampled_from(["0000:07:00.0", "true", "1.5"]))))
    bandwidth = st.floats(min_value=MIN_BANDWIDTH, max_value=MAX_BANDWIDTH, allow_nan=False, allow_infinity=False) | \
        st.sampled_from([12 * GB, 20.6 * GB, 25e9 / 3, 1000.1, 1e9 + 1])
    latency = st.floats(min_value=0, max_value=1e-2, allow_nan=False) | st.sampled_from([0.7 * US, 1e-6 / 3, 0.0])
    for a in range(n):
        for c in range(n):
            if a != c and draw(st.integers(0, 3)) == 0:
                b.add_link(_link(ids[a], ids[c], draw(st.sampled_from(list(LinkKind))), draw(bandwidth),
                                 draw(latency), draw(st.integers(1, 18))))
    gpus = [i for i, k in zip(ids, kinds) if k is DeviceKind.GPU]
    meta = draw(st.dictionaries(st.text(max_size=5), st.none() | st.booleans() | st.integers() | st.text(max_size=5)
                                | st.floats(allow_nan=False, allow_infinity=False), max_size=3))
    b.meta = meta
    return b.build(ranks=draw(st.permutations(gpus)))


def _link(src, dst, kind, bandwidth, latency, count):
    from arborcc.topology.model import Link
    return Link(src, dst, kind, bandwidth, latency, count)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topologies(), st.sampled_from(["yaml", "json"]))
def test_any_topology_round_trips_exactly(t, fmt):
    text = dump_topology(t, fmt)
    back = parse_topology(text, fmt)
    assert back == t
    assert back.meta == t.meta and back.name == t.name
    assert dump_topology(back, fmt) == text


@pytest.mark.parametrize("name", ["\x00num:", "\x00num0:1.5", "a\x00num0:"])
def test_a_name_that_looks_like_the_number_mark_stays_a_name(name):
    # found by hypothesis: the JSON writer marks exact numbers with a string prefix, and
    # a topology named with that prefix came back with its name cut off
    b = TopologyBuilder(name)
    b.add_device(Device("gpu0", DeviceKind.GPU))
    b.add_device(Device("cpu0", DeviceKind.CPU))
    b.connect("gpu0", "cpu0", LinkKind.PCIE, 20e9, 1e-6)
    t = b.build()
    for fmt in ("yaml", "json"):
        back = parse_topology(dump_topology(t, fmt), fmt)
        assert back.name == name and back == t


def test_floats_come_back_bit_for_bit():
    for value in (20.6 * GB, 1e9 + 1, 25e9 / 3, MIN_BANDWIDTH, 1000.0000000000001, MAX_BANDWIDTH,
                  999999999999999.9, (0.1 + 0.2) * 1e4):
        b = TopologyBuilder("f")
        b.add_device(Device("gpu0", DeviceKind.GPU))
        b.add_device(Device("cpu0", DeviceKind.CPU))
        latency = value / 1e15  # from 1e-12 s to 1 s
        b.connect("gpu0", "cpu0", LinkKind.PCIE, value, latency)
        t = b.build()
        for fmt in ("yaml", "json"):
            back = parse_topology(dump_topology(t, fmt), fmt)
            assert back.link("gpu0", "cpu0").bandwidth == value and back.link("cpu0", "gpu0").latency == latency


# --------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, message", [
    ("topo_undefined_endpoint.yaml", "12: link gpu3->gpu9: gpu9 is not defined"),
    ("topo_undefined_endpoint.json", "4: link gpu3->gpu9: gpu9 is not defined"),
    ("topo_unknown_key.yaml", "10: links[0].bandwith_gbps: unknown key 'bandwith_gbps' (did you mean 'bandwidth_gbps'?)"),
    ("topo_unknown_kind.yaml", "5: devices[1].kind: unknown kind 'tpu': expected one of gpu, cpu, core, "
                               "pcie_switch, nvswitch, nic, net_switch"),
    ("topo_duplicate_id.yaml", "6: devices[2].id: duplicate device id gpu0"),
    ("topo_zero_bandwidth.yaml", "7: links[0].bandwidth_gbps: must be a positive number, got 0"),
    ("topo_negative_bandwidth.json", "10: links[1].bandwidth_gbps: must be a positive number, got -12.0"),
    ("topo_wrong_type.yaml", "7: links[0].count: expected an integer, got the string 'two'"),
    ("topo_bad_syntax.yaml", "5: YAML syntax error: " + ("did not find expected ',' or '}'" if yaml.__with_libyaml__
                                                         else "expected ',' or '}', but got '{'")),
    ("topo_bad_syntax.json", "6: JSON syntax error: Expecting value (column 3)"),
    ("topo_bad_version.yaml", "1: arborcc_topology: unsupported format version 7 (this arborcc reads 1)"),
])
def test_bad_files(name, message):
    path = BAD / name
    with pytest.raises(TopologyError) as info:
        read_topology_file(path)
    assert str(info.value) == f"{path}:{message}"
    with pytest.raises(TopologyError) as again:
        read_topology(path)
    assert str(again.value) == str(info.value)


GOOD = """arborcc_topology: 1
name: t
devices:
- {id: gpu0, kind: gpu, index: 0}
- {id: gpu1, kind: gpu, index: 1}
- {id: cpu0, kind: cpu}
links:
- {src: gpu0, dst: gpu1, kind: nvlink, count: 2, bandwidth_gbps: 50.0}
"""


@pytest.mark.parametrize("old, new, problem", [
    ("name: t\n", "name: t\ncolour: blue\n", "3: colour: unknown key 'colour'"),
    ("devices:\n", "version: 1\ndevices:\n", "3: version: unknown key 'version'"),
    ("arborcc_topology: 1\n", "arborcc_topology: true\n", "unsupported format version True"),
    ("- {id: cpu0, kind: cpu}\n", "- {id: cpu0, kind: cpu, host: -1}\n", "6: devices[2].host: must be >= 0, got -1"),
    ("- {id: cpu0, kind: cpu}\n", "- {id: cpu0, kind: cpu, numa: 1.5}\n", "devices[2].numa: expected an integer, got the number 1.5"),
    ("- {id: cpu0, kind: cpu}\n", "- {id: cpu0, kind: cpu, pci: 7}\n", "devices[2].pci: expected a non-empty string, got the number 7"),
    ("- {id: cpu0, kind: cpu}\n", "- {id: '', kind: cpu}\n", "devices[2].id: expected a non-empty string"),
    ("- {id: cpu0, kind: cpu}\n", "- {kind: cpu}\n", "6: devices[2]: missing key 'id'"),
    ("- {id: cpu0, kind: cpu}\n", "- cpu0\n", "6: devices[2]: expected a mapping, got the string 'cpu0'"),
    ("count: 2", "count: 0", "links[0].count: must be >= 1, got 0"),
    ("count: 2", "count: true", "links[0].count: expected an integer, got the boolean true"),
    ("bandwidth_gbps: 50.0}", "bandwidth_gbps: '50'}", "expected a number, got the string '50'"),
    ("bandwidth_gbps: 50.0}", "bandwidth_gbps: .inf}", "links[0].bandwidth_gbps: '.inf' is not a finite number"),
    ("bandwidth_gbps: 50.0}", "bandwidth_gbps: 50.0, latency_us: -1.0}", "latency_us: must be a non-negative number"),
    ("bandwidth_gbps: 50.0}", "bandwidth_gbps: 50.0, duplex: 'true'}", "links[0].duplex: expected true or false, got the string 'true'"),
    ("kind: nvlink", "kind: infiniband", "links[0].kind: unknown kind 'infiniband'"),
    ("dst: gpu1", "dst: gpu0", "a link cannot join a device to itself"),
    ("- {src: gpu0, dst: gpu1, kind: nvlink, count: 2, bandwidth_gbps: 50.0}\n",
     "- {src: gpu0, dst: gpu1, kind: nvlink, count: 2, bandwidth_gbps: 50.0}\n"
     "- {src: gpu1, dst: gpu0, kind: nvlink, bandwidth_gbps: 50.0, duplex: false}\n", "9: duplicate link gpu1->gpu0"),
    ("name: t\n", "name: t\nranks: [gpu1, cpu0]\n", "rank cpu0 is a cpu, not a gpu"),
    ("name: t\n", "name: t\nranks: gpu1\n", "ranks: expected a list of GPU ids, got the string 'gpu1'"),
    ("name: t\n", "name: t\nname: u\n", "3: name: key given twice"),
    ("name: t\n", "name: t\nmeta: [1]\n", "meta: expected a mapping, got a list"),
    ("- {id: gpu0, kind: gpu, index: 0}\n", "- {id: gpu0, kind: gpu, index: 0, 1: 2}\n", "keys must be strings"),
    ("- {id: gpu0, kind: gpu, index: 0}\n", "- {id: gpu0, kind: gpu, index: !!python/name:os.system }\n",
     "devices[0].index"),
])
def test_validation_errors_point_at_the_line(old, new, problem):
    assert old in GOOD
    with pytest.raises(TopologyError) as info:
        parse_topology(GOOD.replace(old, new, 1), "yaml", "t.yaml")
    assert problem in str(info.value) and str(info.value).startswith("t.yaml:") and "\n" not in str(info.value)


def test_empty_or_scalar_documents():
    for text in ("", "# nothing\n"):
        with pytest.raises(TopologyError, match="the file is empty"):
            parse_topology(text, "yaml", "t.yaml")
    with pytest.raises(TopologyError, match="expected a mapping, got the number 3"):
        parse_topology("3\n", "yaml", "t.yaml")
    with pytest.raises(TopologyError, match="missing key 'devices'"):
        parse_topology('{"arborcc_topology": 1}', "json", "t.json")
    with pytest.raises(TopologyError, match="^t.json:2: name: key given twice$"):
        parse_topology('{"arborcc_topology": 1, "name": "a",\n "name": "b", "devices": []}', "json", "t.json")
    with pytest.raises(TopologyError, match="^t.json:3: NaN is not a finite number$"):
        parse_topology('{"arborcc_topology": 1, "devices": [],\n "meta": {"y": "NaN",\n "x": NaN}}', "json", "t.json")


def test_dict_errors_name_the_path_when_there_is_no_line():
    d = topology_to_dict(read_topology_file(SAMPLES / "small_box.yaml"))
    assert (d["links"][3]["src"], d["links"][3]["dst"]) == ("gpu1", "pcie0")
    d["links"][3]["dst"] = "gpu9"
    with pytest.raises(TopologyError) as info:
        topology_from_dict(d, "box")
    assert str(info.value) == "box:links[3].dst: link gpu1->gpu9: gpu9 is not defined"


def test_writing_fails_cleanly(tmp_path):
    t = read_topology_file(SAMPLES / "small_box.yaml")
    with pytest.raises(TopologyError, match="unknown topology file type '.txt'"):
        write_topology_file(t, tmp_path / "t.txt")
    b = TopologyBuilder("m", meta={"when": {1, 2}})
    b.add_device(Device("gpu0", DeviceKind.GPU))
    with pytest.raises(TopologyError, match=r"meta.when: cannot write a value of type set"):
        write_topology_file(b.build(), tmp_path / "m.yaml")
    b.meta = {"x": math.inf}
    with pytest.raises(TopologyError, match="non-finite"):
        write_topology_file(b.build(), tmp_path / "m.json")
    (tmp_path / "file").write_text("")
    with pytest.raises(TopologyError, match="cannot create the folder"):
        write_topology_file(t, tmp_path / "file" / "such" / "dir.yaml")
    assert [p.name for p in tmp_path.iterdir()] == ["file"]
    with pytest.raises(TopologyError, match="unknown topology file type"):
        read_topology_file(tmp_path / "t.toml")
    with pytest.raises(TopologyError, match="cannot read the file"):
        read_topology_file(tmp_path / "absent.yaml")


def test_read_topology_sniffs_content_without_a_suffix(tmp_path):
    t = read_topology_file(SAMPLES / "small_box.yaml")
    for fmt in ("yaml", "json"):
        path = tmp_path / f"box-{fmt}"
        path.write_text(dump_topology(t, fmt))
        assert read_topology(path) == t
    bom = tmp_path / "bom.json"  # files saved by some Windows editors start with a byte-order mark
    bom.write_bytes(b"\xef\xbb\xbf" + dump_topology(t, "json").encode())
    assert read_topology(bom) == t and read_topology_file(bom) == t
    with pytest.raises(TopologyError, match="option 'lane_bandwidth' does not apply to an arborcc topology file"):
        read_topology(SAMPLES / "small_box.yaml", lane_bandwidth=1.0)
