"""Reading `nvidia-smi topo -m` dumps (samples hand-written in the real format)."""

from __future__ import annotations

import itertools
from pathlib import Path

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborcc.errors import TopologyError
from arborcc.topology.defaults import INTER_SOCKET, NVLINK_LANE, PCIE_X16
from arborcc.topology.model import GB, DeviceKind, LinkKind, Topology
from arborcc.topology.nvidia_smi import parse_cpu_list, parse_nvidia_smi, read_nvidia_smi
from arborcc.topology.readers import read_topology
from support.topologies import DGX1V_NVLINKS, pcie_parent

SAMPLES = Path(__file__).parent / "samples"
BAD = SAMPLES / "bad"





def cpu_of(t: Topology, dev: str) -> str:
    while t.devices[dev].kind is not DeviceKind.CPU:
        dev = pcie_parent(t, dev)
    return dev


def pcie_graph(t: Topology) -> nx.Graph:
    g = nx.Graph()
    g.add_edges_from((l.src, l.dst) for l in t.links.values() if l.kind in (LinkKind.PCIE, LinkKind.INTER_SOCKET))
    return g


# --------------------------------------------------------------------------------------
# DGX-1V with 4 NICs
# --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dgx1v() -> Topology:
    return read_nvidia_smi(SAMPLES / "dgx1v_topo.txt")


def test_dgx1v_nvlinks_follow_the_reference_matrix(dgx1v):
    lane = NVLINK_LANE["nvlink2"]
    for i, j in itertools.permutations(range(8), 2):
        link = dgx1v.link(f"gpu{i}", f"gpu{j}")
        if DGX1V_NVLINKS[i][j]:
            assert link is not None and link.kind is LinkKind.NVLINK
            assert link.count == DGX1V_NVLINKS[i][j]
            assert link.bandwidth == DGX1V_NVLINKS[i][j] * lane
        else:
            assert link is None
    # every V100 has six NVLinks
    for g in dgx1v.ranks:
        assert sum(l.count for l in dgx1v.out_links(g) if l.kind is LinkKind.NVLINK) == 6


def test_dgx1v_pcie_switches_and_sockets(dgx1v):
    assert dgx1v.ranks == tuple(f"gpu{i}" for i in range(8))
    groups = [("gpu0", "gpu1", "nic0"), ("gpu2", "gpu3", "nic2"), ("gpu4", "gpu5", "nic1"), ("gpu6", "gpu7", "nic3")]
    switches = []
    for group in groups:
        parents = {pcie_parent(dgx1v, d) for d in group}
        assert len(parents) == 1
        (sw,) = parents
        assert dgx1v.devices[sw].kind is DeviceKind.PCIE_SWITCH
        switches.append(sw)
    assert len(set(switches)) == 4
    assert [pcie_parent(dgx1v, sw) for sw in switches] == ["cpu0", "cpu0", "cpu1", "cpu1"]
    assert [cpu_of(dgx1v, f"gpu{i}") for i in range(8)] == ["cpu0"] * 4 + ["cpu1"] * 4
    qpi = dgx1v.link("cpu0", "cpu1")
    assert qpi.kind is LinkKind.INTER_SOCKET and qpi.bandwidth == INTER_SOCKET
    assert dgx1v.link("gpu0", pcie_parent(dgx1v, "gpu0")).bandwidth == PCIE_X16[3]
    assert len(dgx1v.devices) == 2 + 4 + 8 + 4


def test_dgx1v_routes_without_nvlink_cross_the_sockets(dgx1v):
    g = pcie_graph(dgx1v)
    assert nx.shortest_path(g, "gpu0", "gpu5") == ["gpu0", "pcie0", "cpu0", "cpu1", "pcie2", "gpu5"]
    assert nx.shortest_path(g, "gpu0", "nic0") == ["gpu0", "pcie0", "nic0"]
    full = dgx1v.to_networkx()
    for a, b in itertools.permutations(dgx1v.ranks + ("nic0", "nic3"), 2):
        assert nx.has_path(full, a, b)


def test_dgx1v_nic_names_and_bandwidth():
    t = read_nvidia_smi(SAMPLES / "dgx1v_topo.txt", nic_bandwidth=25 * GB)
    assert t.meta["nic_names"] == {f"nic{k}": f"mlx5_{k}" for k in range(4)}
    assert t.meta["nic_bandwidth"] == {f"nic{k}": 25 * GB for k in range(4)}
    assert t.meta["format"] == "nvidia-smi"


def test_bandwidth_parameters_are_applied():
    t = read_nvidia_smi(SAMPLES / "dgx1v_topo.txt", lane_bandwidth=20 * GB, pcie_bandwidth=PCIE_X16[4],
                        inter_socket_bandwidth=6 * GB)
    assert t.link("gpu0", "gpu3").bandwidth == 40 * GB
    assert t.link("gpu0", "pcie0").bandwidth == PCIE_X16[4]
    assert t.link("pcie0", "cpu0").bandwidth == PCIE_X16[4]
    assert t.link("cpu1", "cpu0").bandwidth == 6 * GB


@pytest.mark.parametrize("bad", [0, -1.0, "12"])
def test_bad_parameters(bad):
    with pytest.raises(TopologyError, match="pcie_bandwidth must be a positive number"):
        read_nvidia_smi(SAMPLES / "dgx1v_topo.txt", pcie_bandwidth=bad)


# --------------------------------------------------------------------------------------
# DGX A100: NVSwitch fabric, NIC legend, NUMA affinity
# --------------------------------------------------------------------------------------
def test_a100_all_nv12_is_an_nvswitch_fabric():
    t = read_nvidia_smi(SAMPLES / "dgx_a100_topo.txt", lane_bandwidth=NVLINK_LANE["nvlink3"],
                        pcie_bandwidth=PCIE_X16[4])
    assert t.devices["nvswitch0"].kind is DeviceKind.NVSWITCH
    for g in t.ranks:
        up, down = t.link(g, "nvswitch0"), t.link("nvswitch0", g)
        assert up.count == down.count == 12
        assert up.bandwidth == 12 * NVLINK_LANE["nvlink3"] == 300 * GB
    assert not any(l.kind is LinkKind.NVLINK and t.devices[l.dst].is_gpu and t.devices[l.src].is_gpu
                   for l in t.links.values())
    # NUMA affinity names the CPUs; each GPU pair sits under one switch with its two NICs,
    # each device behind a bridge of its own (PXB: several bridges between any two)
    assert [cpu_of(t, f"gpu{i}") for i in range(8)] == ["cpu3", "cpu3", "cpu1", "cpu1", "cpu7", "cpu7", "cpu5", "cpu5"]
    assert t.devices["gpu0"].numa == 3
    uppers = []
    for p in range(4):
        members = (f"gpu{2 * p}", f"gpu{2 * p + 1}", f"nic{2 * p}", f"nic{2 * p + 1}")
        bridges = [pcie_parent(t, d) for d in members]
        assert len(set(bridges)) == 4
        (upper,) = {pcie_parent(t, b) for b in bridges}
        assert t.devices[upper].kind is DeviceKind.PCIE_SWITCH
        assert pcie_parent(t, upper) == cpu_of(t, members[0])
        uppers.append(upper)
    assert len(set(uppers)) == 4
    assert len(t.devices_of_kind(DeviceKind.PCIE_SWITCH)) == 4 * 5
    cpus = [c.id for c in t.devices_of_kind(DeviceKind.CPU)]
    assert len(cpus) == 4
    assert all(t.link(a, b).kind is LinkKind.INTER_SOCKET for a, b in itertools.permutations(cpus, 2))
    assert t.meta["nic_names"]["nic5"] == "mlx5_5"
    assert t.link("gpu0", pcie_parent(t, "gpu0")).bandwidth == 24 * GB


def _uniform_dump(n: int, lanes: int) -> str:
    head = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tCPU Affinity"
    rows = [f"GPU{i}\t" + "\t".join(" X " if i == j else f"NV{lanes}" for j in range(n)) + "\t0-7" for i in range(n)]
    return "\n".join([head] + rows) + "\n"


@pytest.mark.parametrize("n, lanes, fabric", [(2, 12, False), (4, 4, False), (4, 6, False), (4, 12, True),
                                              (3, 10, True), (16, 6, True)])
def test_nvswitch_inference_threshold(n, lanes, fabric):
    t = parse_nvidia_smi(_uniform_dump(n, lanes))
    assert ("nvswitch0" in t.devices) is fabric
    if fabric:
        assert all(t.link(g, "nvswitch0").count == lanes for g in t.ranks)
    else:
        assert all(t.link(a, b).count == lanes for a, b in itertools.permutations(t.ranks, 2))


# --------------------------------------------------------------------------------------
# container view, old SOC dump
# --------------------------------------------------------------------------------------
def test_container_view_keeps_printed_labels_and_tolerates_noise():
    t = read_nvidia_smi(SAMPLES / "container_4gpu.txt")
    assert t.ranks == ("gpu0", "gpu1", "gpu2", "gpu3")
    assert t.link("gpu0", "gpu2").count == 2
    assert t.link("gpu1", "gpu3").count == 2
    assert t.link("gpu0", "gpu1").count == t.link("gpu2", "gpu3").count == 1
    assert t.link("gpu0", "gpu3") is None and t.link("gpu1", "gpu2") is None
    assert [cpu_of(t, g) for g in t.ranks] == ["cpu0", "cpu0", "cpu1", "cpu1"]
    assert [t.devices[g].numa for g in t.ranks] == [0, 0, 1, 1]
    assert nx.shortest_path(pcie_graph(t), "gpu0", "gpu3") == ["gpu0", "cpu0", "cpu1", "gpu3"]
    assert not t.devices_of_kind(DeviceKind.NIC)


def test_old_dump_with_soc_and_two_level_switches():
    t = read_nvidia_smi(SAMPLES / "old_soc_topo.txt")
    assert [cpu_of(t, f"gpu{i}") for i in range(8)] == ["cpu0"] * 4 + ["cpu1"] * 4
    leaf = [pcie_parent(t, f"gpu{i}") for i in range(8)]
    assert leaf[0] == leaf[1] != leaf[2] == leaf[3]
    assert leaf[4] == leaf[5] != leaf[6] == leaf[7]
    # PXB: the two socket-0 switches sit under one upper switch; socket 1's hang off the CPU
    upper = pcie_parent(t, leaf[0])
    assert upper == pcie_parent(t, leaf[2]) and t.devices[upper].kind is DeviceKind.PCIE_SWITCH
    assert pcie_parent(t, upper) == "cpu0"
    assert pcie_parent(t, leaf[4]) == pcie_parent(t, leaf[6]) == "cpu1"
    assert pcie_parent(t, "nic0") == "cpu0"  # PHB to everything
    assert t.meta["nic_names"] == {"nic0": "mlx4_0"}
    assert not any(l.kind is LinkKind.NVLINK for l in t.links.values())


def test_read_topology_dispatches_text_to_nvidia_smi():
    path = SAMPLES / "dgx1v_topo.txt"
    assert read_topology(path) == read_nvidia_smi(path)
    assert read_topology(path, lane_bandwidth=20 * GB).link("gpu0", "gpu3").bandwidth == 40 * GB
    with pytest.raises(TopologyError, match="option 'sm' does not apply to nvidia-smi output"):
        read_topology(path, sm=70)


def test_parse_cpu_list():
    assert parse_cpu_list("0-2,8,10-11") == {0, 1, 2, 8, 10, 11}
    for bad in ("0-", "a", "3-1", "1,,x"):
        with pytest.raises(ValueError):
            parse_cpu_list(bad)


# --------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, message", [
    ("smi_bad_cell.txt", "4: row GPU2, column GPU5: cannot read cell 'NVX'"),
    ("smi_short_row.txt", "5: row GPU3: expected 12 cells (one per column), found 8"),
    ("smi_asymmetric.txt", "3: row GPU1, column GPU0: 'NV2' disagrees with row GPU0, column GPU1 (line 2)"),
    ("smi_x_off_diagonal.txt", "4: row GPU2, column GPU0: 'X' is only valid on the diagonal"),
    ("smi_too_many_nvlinks.txt", "2: row GPU0: 24 NVLinks in all, more than any GPU has (18), "
                                 "and the matrix is not an NVSwitch fabric"),
])
def test_bad_dumps_name_line_row_and_column(name, message):
    path = BAD / name
    with pytest.raises(TopologyError) as info:
        read_nvidia_smi(path)
    assert str(info.value) == f"{path}:{message}"
    with pytest.raises(TopologyError) as again:
        read_topology(path)
    assert str(again.value) == str(info.value)


@pytest.mark.parametrize("text, problem", [
    ("no matrix here\n", "no `nvidia-smi topo -m` matrix found"),
    ("\tGPU0\tGPU1\n\nLegend:\n", "the matrix has a header but no rows"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV1\n", "column GPU1 has no row"),
    ("\tGPU0\tGPU0\nGPU0\t X \tNV1\n", "header: column GPU0 appears twice"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV1\nGPU0\tNV1\t X \n", "row GPU0 appears twice"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV1\nGPU2\tNV1\t X \n", "row GPU2 is not one of the header's columns"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV1\t5\nGPU1\tNV1\t X \n", "row GPU0: 3 cells for 2 columns"),
    ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\t0-x\nGPU1\tPIX\t X \t0-3\n",
     "row GPU0, column CPU Affinity: cannot read '0-x'"),
    ("\tGPU0\tmlx5_0\nGPU0\t X \tNV2\nmlx5_0\tNV2\t X \n", "NVLink (NV2) between a GPU and a NIC"),
    ("\tGPU0\tGPU1\nGPU0\tPIX\tPIX\nGPU1\tPIX\t X \n", "expected 'X' on the diagonal, got 'PIX'"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV0\nGPU1\tNV0\t X \n", "cannot read cell 'NV0'"),
])
def test_malformed_text(text, problem):
    with pytest.raises(TopologyError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        parse_nvidia_smi(text, "dump.txt")


def test_unrecognised_file_and_unreadable_paths(tmp_path):
    with pytest.raises(TopologyError) as info:
        read_topology(BAD / "not_a_topology.txt")
    assert str(info.value).startswith(f"{BAD / 'not_a_topology.txt'}: format not recognised")
    with pytest.raises(TopologyError, match="cannot read the file"):
        read_nvidia_smi(tmp_path / "missing.txt")
    with pytest.raises(TopologyError, match="cannot read the file"):
        read_topology(tmp_path / "missing.txt")
    with pytest.raises(TopologyError, match="is a directory"):
        read_topology(tmp_path)
    binary = tmp_path / "dump.bin"
    binary.write_bytes(b"\xff\xfe\x00GPU0")
    with pytest.raises(TopologyError, match="not a text file"):
        read_topology(binary)


# --------------------------------------------------------------------------------------
# properties
# --------------------------------------------------------------------------------------
@st.composite
def pcie_hosts(draw):
    """A random PCIe layout: sockets hold (upper switch?, leaf switch?) places for devices.

    Returns the column labels (GPUs first, then NICs), each label's (socket, upper, leaf)
    place, and the socket CPU lists.
    """
    places = []
    for socket in range(draw(st.integers(1, 2))):
        for upper in range(draw(st.integers(0, 2))):
            for leaf in range(draw(st.integers(0, 2))):
                places += [(socket, upper, leaf)] * draw(st.integers(1, 3))
            places += [(socket, upper, None)] * draw(st.integers(0, 2))
        for leaf in range(draw(st.integers(0, 2))):
            places += [(socket, None, 100 + leaf)] * draw(st.integers(1, 2))
        places += [(socket, None, None)] * draw(st.integers(0, 2))
    places = draw(st.permutations(places))
    if not places:
        places = [(0, None, None)]
    gpus = draw(st.integers(1, len(places)))
    labels = [f"GPU{i}" for i in range(gpus)] + [f"mlx5_{k}" for k in range(len(places) - gpus)]
    return labels, dict(zip(labels, places)), draw(st.booleans())


def expected_relation(a, b) -> str:
    (sa, ua, la), (sb, ub, lb) = a, b
    if sa != sb:
        return "SYS"
    if ua is not None and ua == ub:
        return "PIX" if la == lb else "PXB"
    if ua is None and ub is None and la is not None and la == lb:
        return "PIX"
    return "PHB"


def reconstructed_relation(t: Topology, a: str, b: str) -> str:
    def chain(x):
        out = []
        while t.devices[x].kind is not DeviceKind.CPU:
            x = pcie_parent(t, x)
            out.append(x)
        return out
    ca, cb = chain(a), chain(b)
    if ca[-1] != cb[-1]:
        return "SYS"
    common = next(x for x in ca if x in cb)
    if t.devices[common].kind is DeviceKind.CPU:
        return "PHB"
    return "PIX" if ca[0] == cb[0] == common else "PXB"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pcie_hosts())
def test_reconstructed_pcie_tree_reproduces_every_relation(host):
    labels, place, with_affinity = host
    cpus = {0: "0-7", 1: "8-15"}
    head = "\t" + "\t".join(labels) + ("\tCPU Affinity" if with_affinity else "")
    lines = [head]
    for r in labels:
        cells = [" X " if r == c else expected_relation(place[r], place[c]) for c in labels]
        tail = [cpus[place[r][0]]] if with_affinity and r.startswith("GPU") else []
        lines.append("\t".join([r] + cells + tail))
    t = parse_nvidia_smi("\n".join(lines) + "\n")
    ident = {lb: f"gpu{lb[3:]}" if lb.startswith("GPU") else f"nic{lb[5:]}" for lb in labels}
    for a, b in itertools.combinations(labels, 2):
        assert reconstructed_relation(t, ident[a], ident[b]) == expected_relation(place[a], place[b]), (a, b)


_TOKENS = st.sampled_from(["NV1", "NV", "NVX", "X", "PIX", "SOC", "GPU9", "mlx5_9", "", "\t", "  ", "0-1", "N/A",
                           "CPU", "Affinity", "\x1b[1m", "GPU0", "NV99"])


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_mangled_dumps_fail_only_with_topology_errors(data):
    lines = (SAMPLES / "dgx1v_topo.txt").read_text().splitlines()
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(lines) - 1))
        action = data.draw(st.sampled_from(["replace", "delete", "duplicate", "insert"]))
        tokens = lines[i].split("\t")
        if action == "replace":
            tokens[data.draw(st.integers(0, len(tokens) - 1))] = data.draw(_TOKENS)
            lines[i] = "\t".join(tokens)
        elif action == "delete":
            del lines[i]
        elif action == "duplicate":
            lines.insert(i, lines[i])
        else:
            lines.insert(i, "\t".join(data.draw(st.lists(_TOKENS, max_size=14))))
        if not lines:
            lines = [""]
    try:
        t = parse_nvidia_smi("\n".join(lines), "mangled.txt")
    except TopologyError as e:
        assert "\n" not in str(e) and str(e).startswith("mangled.txt")
    else:
        assert t.ranks and all(t.devices[g].is_gpu for g in t.ranks)
