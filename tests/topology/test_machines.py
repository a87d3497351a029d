"""Built-in machines: structure as the reference describes it, and overrides."""

import pytest

from arborcc.errors import TopologyError
from arborcc.topology.machines import DGX1V_NVLINKS, MACHINES, build_machine, machine_params
from arborcc.topology.model import GB, DeviceKind, LinkKind


def nvlink_lanes(t, a, b):
    link = t.link(a, b)
    return link.count if link is not None and link.kind is LinkKind.NVLINK else 0


def test_dgx1v_nvlink_matrix_matches_reference():
    t = build_machine("dgx1v")
    for i in range(8):
        for j in range(8):
            assert nvlink_lanes(t, f"gpu{i}", f"gpu{j}") == DGX1V_NVLINKS[i][j]
    # every V100 uses all 6 of its NVLinks
    for i in range(8):
        assert sum(l.count for l in t.out_links(f"gpu{i}") if l.kind is LinkKind.NVLINK) == 6
    assert t.link("gpu0", "gpu3").bandwidth == pytest.approx(50 * GB)


def test_dgx1p_same_pairs_one_lane():
    v, p = build_machine("dgx1v"), build_machine("dgx1p")
    pairs = lambda t: {(l.src, l.dst) for l in t.links.values() if l.kind is LinkKind.NVLINK}  # noqa: E731
    assert pairs(v) == pairs(p)
    assert {l.count for l in p.links.values() if l.kind is LinkKind.NVLINK} == {1}
    assert len(pairs(p)) == 32  # 16 pairs, both directions


def test_alias_p3_16xlarge_is_dgx1v():
    assert build_machine("p3.16xlarge") == build_machine("dgx1v")


@pytest.mark.parametrize("name,gpus,lanes", [("dgx2", 16, 6), ("dgx-a100", 8, 12), ("dgx-h100", 8, 18)])
def test_nvswitch_machines(name, gpus, lanes):
    t = build_machine(name)
    assert t.num_ranks == gpus
    (sw,) = t.devices_of_kind(DeviceKind.NVSWITCH)
    for g in t.ranks:
        assert t.link(g, sw.id).count == lanes
        assert t.link(g, sw.id).bandwidth == pytest.approx(lanes * 25 * GB)
    assert t.route(t.ranks[0], t.ranks[-1]).path == (t.ranks[0], sw.id, t.ranks[-1])


def test_every_machine_builds_and_routes_all_gpu_pairs():
    for name in MACHINES:
        t = build_machine(name)
        for a in t.ranks:
            for b in t.ranks:
                if a != b:
                    assert t.route(a, b).bandwidth > 0


def test_overrides_change_bandwidth():
    t = build_machine("dgx1v", nvlink_gbps=20, pcie_gbps=16)
    assert t.link("gpu0", "gpu3").bandwidth == pytest.approx(40 * GB)
    assert t.link("gpu0", "pcie0").bandwidth == pytest.approx(16 * GB)
    assert t.meta["params"]["nvlink_gbps"] == 20


def test_bad_override_and_unknown_machine():
    with pytest.raises(TopologyError, match="positive"):
        machine_params("dgx1v", nvlink_gbps=0)
    with pytest.raises(TopologyError, match="unknown machine 'dgx3'"):
        build_machine("dgx3")
