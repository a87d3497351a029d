"""The runtime uses the CPU layout: ranks are pinned socket by socket and L3 by L3, and an
all-reduce whose ranks span more than one socket or L3 runs the hierarchical all-reduce
over those groups, chosen by the plan per size, verified, and equal to numpy. These
machines have one socket, so the two-socket layouts are synthetic sysfs trees
(``ARBORCC_SYSFS_ROOT`` / the ``sysfs_root`` option)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborcc.errors import ArborccError, InputError
from arborcc.ir.aliasing import Mode, declared_modes
from arborcc.runtime.environment import runtime_settings
from arborcc.runtime.launch import run_ranks
from arborcc.runtime.plan import DEFAULT_SMALL_BYTES, DEFAULT_STAGED_BYTES, Plan, hierarchy
from arborcc.topology.cpus import job_layout, placement_order, rank_groups, rank_placement, read_cpu_layout
from arborcc.verify import verify_algorithm
from support.cli_runs import arborcc, refused
from support.segments import leftovers, segments
from support.sysfs_trees import write_sockets

TWO_BY_FOUR = [[0, 1, 2, 3], [4, 5, 6, 7]]


# -- where ranks run ------------------------------------------------------------------------

def test_eight_ranks_on_two_sockets_of_four_cores_fill_socket_0_first(tmp_path):
    layout = read_cpu_layout(write_sockets(tmp_path, TWO_BY_FOUR))
    placement = rank_placement(layout, 8)
    assert placement.cpu_of_rank == tuple(range(8))
    assert placement.socket_groups == placement.cache_groups == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert rank_groups(layout, placement.cpu_of_rank) == ((0, 1, 2, 3), (4, 5, 6, 7))


def test_sockets_numbered_alternately_still_give_consecutive_ranks_one_socket(tmp_path):
    """CPUs 0, 2, 4, 6 on socket 0 and 1, 3, 5, 7 on socket 1 (as some BIOSes number them):
    ranks 0-3 take socket 0's CPUs, not CPU 0-3 by id."""
    layout = read_cpu_layout(write_sockets(tmp_path, [[0, 2, 4, 6], [1, 3, 5, 7]]))
    placement = rank_placement(layout, 8)
    assert placement.cpu_of_rank == (0, 2, 4, 6, 1, 3, 5, 7)
    assert placement.socket_groups == ((0, 1, 2, 3), (4, 5, 6, 7))


def test_every_core_gets_a_rank_before_a_second_hardware_thread(tmp_path):
    """Two sockets of two cores, siblings numbered next to each other (CPUs 0 and 1 are one
    core): ranks 0-3 get one core each, socket by socket; ranks 4-7 the second threads."""
    layout = read_cpu_layout(write_sockets(tmp_path, [[0, 1, 2, 3], [4, 5, 6, 7]], threads=2))
    placement = rank_placement(layout, 8)
    assert placement.cpu_of_rank == (0, 2, 4, 6, 1, 3, 5, 7)
    assert placement.core_groups == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert placement.socket_groups == ((0, 1, 4, 5), (2, 3, 6, 7))


def test_one_socket_gives_one_group(tmp_path):
    layout = read_cpu_layout(write_sockets(tmp_path, [list(range(8))]))
    placement = rank_placement(layout, 8)
    assert placement.cpu_of_rank == tuple(range(8))
    assert rank_groups(layout, placement.cpu_of_rank) == (tuple(range(8)),)


def test_a_restricted_affinity_places_ranks_within_it_socket_by_socket(tmp_path):
    layout = read_cpu_layout(write_sockets(tmp_path, TWO_BY_FOUR))
    placement = rank_placement(layout, 4, allowed=[6, 1, 5, 2])
    assert placement.cpu_of_rank == (1, 2, 5, 6)
    assert rank_groups(layout, placement.cpu_of_rank) == ((0, 1), (2, 3))
    wrapped = rank_placement(layout, 6, allowed=[1, 5])  # more ranks than allowed CPUs: round robin
    assert wrapped.cpu_of_rank == (1, 5, 1, 5, 1, 5)
    assert rank_groups(layout, wrapped.cpu_of_rank) == ((0, 2, 4), (1, 3, 5))


def test_without_a_layout_ranks_take_cpus_in_id_order():
    assert placement_order(None, [5, 1, 3]) == (1, 3, 5)


def test_a_rank_not_bound_to_one_cpu_leaves_the_groups_unknown(tmp_path):
    layout = read_cpu_layout(write_sockets(tmp_path, TWO_BY_FOUR))
    assert rank_groups(layout, [0, -1]) is None
    assert rank_groups(layout, [0, 99]) is None


# -- what the plan chooses --------------------------------------------------------------------

def choice(size: int, groups, mode: Mode = Mode.INPLACE, plan: Plan | None = None,
           staged_bytes: int = DEFAULT_STAGED_BYTES, collective: str = "allreduce"):
    n = sum(len(g) for g in groups) if groups else 8
    return (plan or Plan()).choose(collective, n, mode, size // 4, 4, 0, staged_bytes, groups)


TWO_SOCKET_GROUPS = ((0, 1, 2, 3), (4, 5, 6, 7))


def test_two_sockets_run_the_hierarchical_all_reduce_above_the_staged_range():
    """Default thresholds: one-shot below small_bytes, the staged owner all-reduce up to
    staged_bytes (1 MB), the hierarchical all-reduce above."""
    assert choice(4096, TWO_SOCKET_GROUPS).algorithm.name.startswith("direct-oneshot")
    assert choice(DEFAULT_SMALL_BYTES, TWO_SOCKET_GROUPS).algorithm.name.startswith("direct-owner")
    assert choice(DEFAULT_STAGED_BYTES, TWO_SOCKET_GROUPS).algorithm.name.startswith("direct-owner")
    for size in (DEFAULT_STAGED_BYTES + 4, 64 << 20):
        c = choice(size, TWO_SOCKET_GROUPS)
        assert c.algorithm.name == "layout-hierarchical-allreduce-2x4-inplace"
        assert (c.low, c.high, c.entry) == (DEFAULT_STAGED_BYTES + 1, None, None)
        assert "CPU layout" in c.reason and "2 groups of 4" in c.reason


def test_out_of_place_calls_get_the_out_of_place_hierarchical_all_reduce():
    algo = choice(4 << 20, TWO_SOCKET_GROUPS, Mode.OUTOFPLACE).algorithm
    assert algo.name == "layout-hierarchical-allreduce-2x4-outofplace"
    assert Mode.OUTOFPLACE in declared_modes(algo) and verify_algorithm(algo).ok


def test_never_staged_the_hierarchical_all_reduce_starts_at_small_bytes():
    assert choice(DEFAULT_SMALL_BYTES - 4, TWO_SOCKET_GROUPS, staged_bytes=0).algorithm.name.startswith("direct-")
    c = choice(DEFAULT_SMALL_BYTES, TWO_SOCKET_GROUPS, staged_bytes=0)
    assert c.algorithm.name.startswith("layout-hierarchical") and c.low == DEFAULT_SMALL_BYTES


@pytest.mark.parametrize("groups", [None, (tuple(range(8)),), ((0, 1, 2, 3, 4, 5), (6, 7)), ((0,), (1,)),
                                    ((0, 1), (2, 3, 4))])
def test_one_group_unequal_groups_or_one_rank_per_group_stay_flat(groups):
    c = choice(64 << 20, groups)
    assert c.algorithm.name.startswith("direct-owner") and "CPU layout" not in c.reason


@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "broadcast", "reduce", "alltoall"])
def test_other_collectives_are_not_changed_by_the_layout(collective):
    assert choice(64 << 20, TWO_SOCKET_GROUPS, collective=collective).algorithm.name.startswith("direct-")


def test_the_groups_of_any_layout_give_a_verified_algorithm_or_the_flat_one():
    """Two L3 domains in each of two sockets (four groups of two ranks), and groups that
    are not numbered consecutively."""
    for groups in (((0, 1), (2, 3), (4, 5), (6, 7)), ((0, 2, 4, 6), (1, 3, 5, 7))):
        algo = choice(4 << 20, groups).algorithm
        assert algo.name.startswith("layout-hierarchical") and verify_algorithm(algo).ok


# -- running it ------------------------------------------------------------------------------

def two_cpu_tree(root) -> tuple[str, list[int]]:
    """A tree in which two of the CPUs this test may use are two sockets (so ranks pinned
    round robin over them alternate sockets): (root, the two CPUs)."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two CPUs to put ranks on two sockets")
    cpus = allowed[:2]
    return str(write_sockets(root, [[cpus[0]], [cpus[1]]])), cpus


def all_reduce_rank(root: str, cpus: list[int], counts: list[int], inplace: bool, staged_bytes: int):
    """One rank: the communicator on the synthetic layout, then an all-reduce per count;
    (the rank groups, the algorithm of each call, the results)."""
    os.sched_setaffinity(0, set(cpus))
    from arborcc.runtime.communicator import Communicator

    comm = Communicator.from_env(plan=Plan(small_bytes=4096), sysfs_root=root, staged_bytes=staged_bytes)
    try:
        names, results = [], []
        for count in counts:
            x = ((np.arange(count, dtype=np.float64) + 1) * (comm.rank + 1)) % 1000
            mode = Mode.INPLACE if inplace else Mode.OUTOFPLACE
            names.append(comm.plan.choose("allreduce", comm.world_size, mode, count, 8, 0, staged_bytes,
                                          comm.rank_groups).algorithm.name)
            out = x if inplace else np.empty_like(x)
            sent = x.copy()
            comm.allreduce(x, None if inplace else out)
            results.append((out, inplace or np.array_equal(x, sent)))
        return comm.rank_groups, names, results
    finally:
        comm.close()


def run_on_two_sockets(tmp_path, ranks: int, counts: list[int], inplace: bool, staged_bytes: int = 0,
                       timeout: float = 120.0):
    root, cpus = two_cpu_tree(tmp_path / "sysfs")
    before = segments()
    got = run_ranks(all_reduce_rank, ranks, (root, cpus, counts, inplace, staged_bytes), timeout=timeout)
    assert not leftovers(before)
    groups = (tuple(range(0, ranks, 2)), tuple(range(1, ranks, 2)))
    for rank_groups_seen, names, results in got:
        assert rank_groups_seen == groups
        assert all(n.startswith("layout-hierarchical-allreduce-2x") for n in names), names
    for i, count in enumerate(counts):
        want = sum(((np.arange(count, dtype=np.float64) + 1) * (r + 1)) % 1000 for r in range(ranks))
        for rank, (_, _, results) in enumerate(got):
            out, input_kept = results[i]
            assert np.array_equal(out, want), (rank, count)
            assert input_kept, (rank, count)  # out of place: the input is left as it was


@pytest.mark.parametrize("ranks", [4, 8])
@pytest.mark.parametrize("inplace", [True, False], ids=["inplace", "outofplace"])
def test_hierarchical_all_reduce_on_two_sockets_equals_numpy(tmp_path, ranks, inplace):
    # 4096 elements divide into the 2 x G chunks; 5003 leave a tail for the direct algorithm
    run_on_two_sockets(tmp_path, ranks, [4096, 5003], inplace)


@pytest.mark.timeout(300)
def test_hierarchical_all_reduce_of_16_ranks_equals_numpy(tmp_path):
    run_on_two_sockets(tmp_path, 16, [8192 + 3], inplace=True, timeout=240)


def test_default_thresholds_run_the_hierarchical_all_reduce_above_one_megabyte(tmp_path):
    run_on_two_sockets(tmp_path, 4, [(DEFAULT_STAGED_BYTES // 8) + 1], inplace=False,
                       staged_bytes=DEFAULT_STAGED_BYTES)


# -- bad input ---------------------------------------------------------------------------------

def test_a_sysfs_root_without_cpus_is_refused_naming_the_variable(tmp_path):
    with pytest.raises(InputError, match=r"^\$ARBORCC_SYSFS_ROOT: .*cpu.*does not exist"):
        runtime_settings({"ARBORCC_SYSFS_ROOT": str(tmp_path)})


def test_a_sysfs_root_with_a_bad_file_is_refused_naming_the_variable_and_the_file(tmp_path):
    root = write_sockets(tmp_path, TWO_BY_FOUR)
    (root / "cpu" / "cpu5" / "topology" / "core_id").write_text("five\n")
    with pytest.raises(InputError, match=r"^\$ARBORCC_SYSFS_ROOT: .*cpu5/topology/core_id: not a number"):
        runtime_settings({"ARBORCC_SYSFS_ROOT": str(root)})


def test_a_fifo_in_the_sysfs_tree_is_refused_not_read(tmp_path):
    root = write_sockets(tmp_path, TWO_BY_FOUR)
    (root / "cpu" / "online").unlink()
    os.mkfifo(root / "cpu" / "online")
    with pytest.raises(InputError, match=r"^\$ARBORCC_SYSFS_ROOT: .*cpu/online: not a regular file"):
        runtime_settings({"ARBORCC_SYSFS_ROOT": str(root)})


def test_an_oversized_sysfs_file_is_refused(tmp_path):
    root = write_sockets(tmp_path, TWO_BY_FOUR)
    (root / "cpu" / "online").write_text("0-7," * 5000)
    with pytest.raises(InputError, match=r"^\$ARBORCC_SYSFS_ROOT: .*cpu/online: longer than a sysfs attribute"):
        runtime_settings({"ARBORCC_SYSFS_ROOT": str(root)})


def test_a_bad_sysfs_root_option_is_refused_naming_the_option(tmp_path):
    from arborcc.runtime.communicator import Options

    with pytest.raises(InputError, match=r"^sysfs_root: .*does not exist"):
        Options(sysfs_root=str(tmp_path / "nowhere"))


def test_arborcc_run_refuses_a_bad_sysfs_root_in_one_line(tmp_path):
    (tmp_path / "train.py").write_text("print('ran')\n")
    run = arborcc("run", "-n", "2", "train.py", cwd=tmp_path,
                  env={"ARBORCC_SYSFS_ROOT": str(tmp_path / "nowhere")})
    refused(run, r"\$ARBORCC_SYSFS_ROOT", "does not exist")
    assert "ran" not in run.out


def test_arborcc_bench_refuses_a_broken_sysfs_tree_in_one_line(tmp_path):
    root = write_sockets(tmp_path / "sysfs", TWO_BY_FOUR)
    (root / "cpu" / "cpu2" / "cache" / "index3" / "shared_cpu_list").write_text("2-x\n")
    run = arborcc("bench", "-n", "2", "-b", "4K", "-e", "4K", cwd=tmp_path, env={"ARBORCC_SYSFS_ROOT": str(root)},
                  address_space=None)
    refused(run, r"\$ARBORCC_SYSFS_ROOT", "cpu2/cache/index3/shared_cpu_list")


# -- anything: a layout and a verified plan, or one error ----------------------------------------

FILES = ["cpu/online", "cpu/cpu0/topology/physical_package_id", "cpu/cpu5/topology/physical_package_id",
         "cpu/cpu1/topology/core_id", "cpu/cpu2/cache/index3/shared_cpu_list", "cpu/cpu6/cache/index3/level",
         "node/node1/cpulist"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damage=st.lists(st.tuples(st.sampled_from(FILES),
                                 st.one_of(st.text(max_size=10), st.sampled_from(["-1", "0-7", "1", "3", "7-0", "",
                                                                                  "0,,1", "99999"]))),
                       max_size=3),
       ranks=st.integers(1, 16), allowed=st.sets(st.integers(0, 7), min_size=1))
def test_any_tree_gives_a_placement_and_a_verified_choice_or_one_error(tmp_path_factory, damage, ranks, allowed):
    root = write_sockets(tmp_path_factory.mktemp("sysfs"), TWO_BY_FOUR)
    for path, content in damage:
        (root / path).write_text(content)
    try:
        runtime_settings({"ARBORCC_SYSFS_ROOT": str(root)})
        layout = job_layout(str(root))
        placement = rank_placement(layout, ranks, sorted(allowed & {c.id for c in layout.cpus}) or None)
    except ArborccError as e:
        assert "\n" not in str(e)
        return
    groups = rank_groups(layout, placement.cpu_of_rank)
    assert groups is not None and sorted(r for g in groups for r in g) == list(range(ranks))
    c = Plan().choose("allreduce", ranks, Mode.OUTOFPLACE, (4 << 20) // 4, 4, 0, DEFAULT_STAGED_BYTES, groups)
    assert c.algorithm.name.startswith("layout-hierarchical" if hierarchy(groups) else "direct-")
    assert verify_algorithm(c.algorithm).ok
