"""The CPU layout from sysfs (sockets, NUMA nodes, last-level-cache domains, cores), read
from trees the tests write, where ranks land when pinned, and ``topo show --detect``."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborcc.cli.main import main
from arborcc.errors import ArborccError, TopologyError
from arborcc.topology.cpus import format_cpu_list, rank_placement, read_cpu_layout, this_machine_placement
from support.sysfs_trees import write_sysfs

def test_two_sockets_two_l3_domains_and_hardware_threads(tmp_path):
    layout = read_cpu_layout(write_sysfs(tmp_path))
    assert layout.sockets == {0: (0, 1, 4, 5), 1: (2, 3, 6, 7)}
    assert layout.numa_nodes == {0: (0, 1, 4, 5), 1: (2, 3, 6, 7)}
    assert layout.cache_domains == {0: (0, 1, 4, 5), 2: (2, 3, 6, 7)}
    assert layout.cache_level == 3 and layout.cache_bytes == 32 << 20
    assert layout.cores == {(0, 0): (0, 4), (0, 1): (1, 5), (1, 0): (2, 6), (1, 1): (3, 7)}
    assert layout.missing == ()


def test_two_l3_domains_in_one_socket(tmp_path):
    """A socket split into two cache domains (as AMD's CCXs are): the domains, not the socket, group the CPUs."""
    cpus = {c: {"socket": 0, "core": c} for c in range(4)}
    layout = read_cpu_layout(write_sysfs(tmp_path, cpus, nodes={0: "0-3"}, l3={0: "0-1", 1: "2-3"}, online="0-3"))
    assert layout.sockets == {0: (0, 1, 2, 3)}
    assert layout.cache_domains == {0: (0, 1), 2: (2, 3)}


def test_only_online_cpus_are_counted(tmp_path):
    layout = read_cpu_layout(write_sysfs(tmp_path, online="0-3"))
    assert [c.id for c in layout.cpus] == [0, 1, 2, 3]
    assert layout.sockets == {0: (0, 1), 1: (2, 3)}


def test_what_a_container_hides_is_assumed_and_said(tmp_path):
    cpus = {c: {"socket": 0, "core": c} for c in range(2)}
    root = write_sysfs(tmp_path, cpus, nodes=None, l3=None, online=None)
    for c in range(2):
        (root / "cpu" / f"cpu{c}" / "topology" / "physical_package_id").unlink()
    layout = read_cpu_layout(root)
    assert [c.id for c in layout.cpus] == [0, 1]  # from the cpu* directories
    assert layout.numa_nodes == {0: (0, 1)} and layout.sockets == {0: (0, 1)}
    assert layout.cache_level == 1  # the highest level there is
    text = " | ".join(layout.missing)
    assert "NUMA" in text and "sockets" in text


@pytest.mark.parametrize("path, content", [("cpu/online", "0-x"), ("cpu/cpu3/topology/physical_package_id", "one"),
                                           ("cpu/cpu2/cache/index3/shared_cpu_list", "2--3"),
                                           ("cpu/cpu1/cache/index3/size", "lots"),
                                           ("node/node1/cpulist", "2-3,z")])
def test_an_unreadable_file_is_an_error_naming_it(tmp_path, path, content):
    root = write_sysfs(tmp_path)
    (root / path).write_text(content)
    with pytest.raises(TopologyError) as e:
        read_cpu_layout(root)
    assert e.value.source is not None and e.value.source.endswith(path.split("/")[-1] if "node" not in path
                                                                  else "cpulist")


def test_no_cpu_directory_is_an_error_naming_it(tmp_path):
    with pytest.raises(TopologyError, match="does not exist"):
        read_cpu_layout(tmp_path / "nothing")


def test_format_cpu_list_writes_linux_ranges():
    assert format_cpu_list([5, 0, 1, 2, 8, 10, 11]) == "0-2,5,8,10-11"
    assert format_cpu_list([]) == ""


# -- where pinned ranks run ---------------------------------------------------------------

def test_pinned_ranks_share_a_cache_domain_with_the_ranks_of_their_socket(tmp_path):
    """Rank r on CPU r mod 8: ranks 0, 1, 4, 5 on socket 0 (one L3), 2, 3, 6, 7 on socket 1."""
    placement = rank_placement(read_cpu_layout(write_sysfs(tmp_path)), 8)
    assert placement.cpu_of_rank == tuple(range(8))
    assert placement.cache_groups == ((0, 1, 4, 5), (2, 3, 6, 7))
    assert placement.socket_groups == placement.numa_groups == ((0, 1, 4, 5), (2, 3, 6, 7))
    assert placement.core_groups == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert placement.shares_cache(0, 5) and not placement.shares_cache(0, 2)
    assert placement.shares_socket(3, 7) and not placement.shares_socket(1, 6)


def test_more_ranks_than_allowed_cpus_wrap_around(tmp_path):
    layout = read_cpu_layout(write_sysfs(tmp_path))
    placement = rank_placement(layout, 6, allowed=[6, 2, 3])
    assert placement.cpu_of_rank == (2, 3, 6, 2, 3, 6)
    assert placement.socket_groups == ((0, 1, 2, 3, 4, 5),)
    assert placement.core_groups == ((0, 2, 3, 5), (1, 4))  # CPUs 2 and 6 are one core


def test_allowed_cpus_outside_the_layout_are_refused(tmp_path):
    with pytest.raises(TopologyError, match="not online CPUs"):
        rank_placement(read_cpu_layout(write_sysfs(tmp_path, online="0-3")), 2, allowed=[0, 7])


def test_this_machine_places_ranks_on_its_own_cpus():
    placement = this_machine_placement(3)
    assert set(placement.cpu_of_rank) <= os.sched_getaffinity(0)
    assert sorted(r for g in placement.socket_groups for r in g) == [0, 1, 2]


# -- topo show --detect ---------------------------------------------------------------------

def test_topo_show_detect_prints_the_cpus_without_a_gpu(tmp_path, capsys):
    root = write_sysfs(tmp_path)
    assert main(["topo", "show", "--detect", "--sysfs-root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "8 online CPUs, 4 cores (2 threads each), 2 sockets, 2 NUMA nodes, 2 L3 domains of 32 MB" in out
    assert "socket 1: CPUs 2-3,6-7" in out and "L3 domain 2: CPUs 2-3,6-7" in out
    assert "GPUs (NVML): none detected" in out


def test_topo_show_detect_json_has_the_cpus(tmp_path, capsys):
    root = write_sysfs(tmp_path)
    assert main(["topo", "show", "--detect", "--sysfs-root", str(root), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["cpus"]["cores"] == 4
    assert [d["cpus"] for d in result["cpus"]["cache_domains"]] == ["0-1,4-5", "2-3,6-7"]


def test_topo_show_sysfs_root_without_detect_is_refused(tmp_path, capsys):
    assert main(["topo", "show", "--sysfs-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--sysfs-root" in err and "--detect" in err


def test_topo_show_detect_names_the_bad_sysfs_file(tmp_path, capsys):
    root = write_sysfs(tmp_path)
    (root / "cpu" / "cpu5" / "topology" / "core_id").write_text("five")
    assert main(["topo", "show", "--detect", "--sysfs-root", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cpu5/topology/core_id" in err


# -- anything in the files: a layout or one error -----------------------------------------

FILES = ["cpu/online", "cpu/cpu0/topology/physical_package_id", "cpu/cpu1/topology/core_id",
         "cpu/cpu2/cache/index3/shared_cpu_list", "cpu/cpu3/cache/index3/level", "cpu/cpu4/cache/index3/size",
         "node/node0/cpulist", "node/node1/cpulist"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damage=st.lists(st.tuples(st.sampled_from(FILES),
                                 st.one_of(st.text(max_size=12), st.sampled_from(["-1", "0-7", "99999999", "7-0", "",
                                                                                  "0,,1", "3\n4"]))),
                       min_size=1, max_size=3))
def test_any_file_content_gives_a_layout_or_one_error(tmp_path_factory, damage):
    root = write_sysfs(tmp_path_factory.mktemp("sysfs"))
    for path, content in damage:
        (root / path).write_text(content)
    try:
        layout = read_cpu_layout(root)
    except ArborccError as e:
        assert "\n" not in str(e)
        return
    assert layout.cpus and all(c.socket >= 0 for c in layout.cpus)
    placement = rank_placement(layout, 8)
    assert sorted(r for g in placement.socket_groups for r in g) == list(range(8))


def test_topo_show_detect_prints_the_cpus_then_the_detected_gpus(tmp_path, capsys, monkeypatch):
    from arborcc.topology import detect
    from arborcc.topology.machines import build_machine

    monkeypatch.setattr(detect, "detect_topology", lambda: build_machine("dgx1v"))
    root = write_sysfs(tmp_path)
    assert main(["topo", "show", "--detect", "--sysfs-root", str(root), "--gpus", "0,1"]) == 0
    out = capsys.readouterr().out
    assert out.index("CPUs (sysfs ") < out.index(": 2 GPUs, ") and "none detected" not in out
    assert main(["topo", "show", "--detect", "--sysfs-root", str(root), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert len(result["gpus"]) == 8 and result["cpus"]["cpus"] == 8 and result["gpus_not_detected"] is None


@pytest.mark.parametrize("failure", [TopologyError("NVML could not be initialised (no driver)"),
                                     TopologyError("NVML reports no GPU", source="NVML")])
def test_topo_show_detect_without_gpus_says_why_and_asking_for_gpus_is_refused(tmp_path, capsys, monkeypatch,
                                                                               failure):
    from arborcc.topology import detect

    def no_gpus():
        raise failure

    monkeypatch.setattr(detect, "detect_topology", no_gpus)
    root = write_sysfs(tmp_path)
    assert main(["topo", "show", "--detect", "--sysfs-root", str(root)]) == 0
    assert f"GPUs (NVML): none detected: {failure}" in capsys.readouterr().out
    assert main(["topo", "show", "--detect", "--sysfs-root", str(root), "--gpus", "0,1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "NVML" in err


def test_topo_show_detect_still_refuses_flags_that_do_not_go_with_it(tmp_path, capsys):
    root = write_sysfs(tmp_path)
    assert main(["topo", "show", "--detect", "--sysfs-root", str(root), "--nodes", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--nodes" in err
