"""``rail-direct``: on switch machines joined rail by rail, reduce-scatter, all-gather and
all-reduce as direct transfers inside each node pipelined with one transfer per chunk
between rail peers. Its programs verify in both call forms within the runtimes' limits
and compute what numpy computes (on 2 x DGX H100, on small switch hierarchies and on any
host, lane and chunk count; the all-reduce on four DGX H100 too); on 2 x DGX H100 at 64 MiB `auto` picks it, its report equals
the simulated time of its file, it reaches 1.2x NCCL's ring there and is within 5% of what
the switch ports allow; it refuses, naming why, where it does not apply."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arborcc.errors import SynthesisError
from arborcc.ir.aliasing import Mode
from arborcc.ir.limits import EXECUTOR, LEGACY
from arborcc.sim.fidelity import fidelity_for
from arborcc.sim.protocols import PROTOCOL_MODELS
from arborcc.sim.simulate import predict_time
from arborcc.synth.strategies.rail_direct import (BUILDERS, RAIL_DIRECT_COLLECTIVES, chunk_counts, lanes_for,
                                                   steps_per_threadblock, switch_hosts)
from arborcc.synth.synthesis import synthesize
from arborcc.topology.cluster import build_cluster
from arborcc.topology.machines import build_machine
from arborcc.topology.model import GB, Device, DeviceKind, LinkKind, Topology, TopologyBuilder
from arborcc.verify import verify_algorithm
from tests.support.execution import assert_executes

MIB = 1 << 20


def switch_nodes(nodes: int, gpus: int) -> Topology:
    """``nodes`` hosts of ``gpus`` GPUs on one NVSwitch each, every GPU with its own NIC on
    one network switch (a small DGX cluster)."""
    b = TopologyBuilder(f"{nodes}x{gpus}-switch")
    b.add_device(Device("leaf0", DeviceKind.NET_SWITCH, None, 0))
    for h in range(nodes):
        switch = b.add_device(Device(f"n{h}.nvswitch0", DeviceKind.NVSWITCH, h, 0)).id
        for i in range(gpus):
            gpu = b.add_device(Device(f"n{h}.gpu{i}", DeviceKind.GPU, h, i)).id
            nic = b.add_device(Device(f"n{h}.nic{i}", DeviceKind.NIC, h, i)).id
            b.connect(gpu, switch, LinkKind.NVLINK, 300 * GB, 1e-6)
            b.connect(gpu, nic, LinkKind.PCIE, 40 * GB, 1e-6)
            b.connect(nic, "leaf0", LinkKind.NETWORK, 40 * GB, 2e-6)
    return b.build()


@pytest.fixture(scope="module")
def two_dgx_h100():
    return build_cluster("dgx-h100", 2)


def assert_within_limits(algorithm):
    for program in algorithm.ranks:
        assert len(program.threadblocks) <= EXECUTOR.max_threadblocks_per_rank
        assert all(len(tb.steps) <= EXECUTOR.max_steps_per_threadblock for tb in program.threadblocks)
        assert all(tb.channel < EXECUTOR.max_channels for tb in program.threadblocks)


@pytest.mark.parametrize("collective", RAIL_DIRECT_COLLECTIVES)
def test_rail_direct_verifies_in_both_forms_within_the_limits_and_equals_numpy_on_two_dgx_h100(
        collective, two_dgx_h100):
    result = synthesize(two_dgx_h100, collective, "rail-direct", size=MIB)
    assert result.report.ok and not result.report.violations
    assert set(result.report.modes) == {"in-place", "out-of-place"}
    assert_within_limits(result.algorithm)
    assert_executes(result.algorithm, modes=list(Mode), seed=5)


def test_the_allreduce_on_four_dgx_h100_verifies_in_both_forms_within_the_limits_and_equals_numpy():
    result = synthesize(build_cluster("dgx-h100", 4), "allreduce", "rail-direct", size=MIB)
    assert result.report.ok and not result.report.violations
    assert set(result.report.modes) == {"in-place", "out-of-place"}
    assert_within_limits(result.algorithm)
    assert_executes(result.algorithm, modes=list(Mode), seed=7)


@pytest.mark.parametrize("collective", RAIL_DIRECT_COLLECTIVES)
def test_rail_direct_equals_numpy_on_two_nodes_of_four_switch_gpus(collective):
    box = switch_nodes(2, 4)
    result = synthesize(box, collective, "rail-direct", size=MIB)
    assert result.report.ok and not result.report.violations
    assert_within_limits(result.algorithm)
    assert_executes(result.algorithm, modes=list(Mode), seed=6)


def test_rail_direct_sends_between_nodes_only_to_rail_peers(two_dgx_h100):
    hosts = switch_hosts(two_dgx_h100)
    assert hosts == [list(range(8)), list(range(8, 16))]
    for collective in RAIL_DIRECT_COLLECTIVES:
        algorithm = synthesize(two_dgx_h100, collective, "rail-direct", size=64 * MIB, timed=False).algorithm
        for program in algorithm.ranks:
            for tb in program.threadblocks:
                for peer in (tb.send, tb.recv):
                    if peer >= 0 and peer // 8 != program.rank // 8:
                        assert peer % 8 == program.rank % 8


@pytest.mark.parametrize("collective", RAIL_DIRECT_COLLECTIVES)
def test_auto_takes_rail_direct_at_64_mib_on_two_dgx_h100_as_its_file_simulates(collective, two_dgx_h100):
    result = synthesize(two_dgx_h100, collective, size=64 * MIB)
    assert result.strategy == "auto:rail-direct"
    assert result.time == pytest.approx(predict_time(result.algorithm, two_dgx_h100, 64 * MIB), rel=1e-2)


@pytest.mark.parametrize("collective", RAIL_DIRECT_COLLECTIVES)
def test_rail_direct_reaches_1_2x_nccl_at_64_mib_on_two_dgx_h100(collective, two_dgx_h100):
    from arborcc.tune.nccl import NcclBaseline

    size = 64 * MIB
    nccl = NcclBaseline(two_dgx_h100, fidelity_for(two_dgx_h100)).call(size, collective)
    assert not nccl.algorithm.startswith("nvls")
    result = synthesize(two_dgx_h100, collective, "rail-direct", size=size)
    assert result.time * 1.2 <= nccl.result.time


@pytest.mark.parametrize("collective", RAIL_DIRECT_COLLECTIVES)
def test_rail_direct_is_within_five_percent_of_the_port_limit_at_64_mib(collective, two_dgx_h100):
    """Each switch port carries (g - 1)/g of the buffer (g GPUs per node), twice for
    all-reduce: the network's share runs beside it."""
    size, g = 64 * MIB, 8
    fidelity = fidelity_for(two_dgx_h100)
    port = two_dgx_h100.link("n0.gpu0", "n0.nvswitch0")
    rate = port.bandwidth * fidelity.efficiency(port.kind)
    passes = 2 if collective == "allreduce" else 1
    floor = fidelity.launch_latency + PROTOCOL_MODELS["Simple"].base_latency + passes * size * (g - 1) / g / rate
    result = synthesize(two_dgx_h100, collective, "rail-direct", size=size)
    assert floor <= result.time <= 1.05 * floor


@pytest.mark.parametrize("topology,collective,reason", [
    (build_machine("dgx-h100"), "allgather", "one host"),
    (build_cluster("dgx1v", 2), "reducescatter", "one switch"),
], ids=["one-machine", "dgx1v-cluster"])
def test_rail_direct_refuses_where_it_does_not_apply_saying_why(topology, collective, reason):
    with pytest.raises(SynthesisError, match=reason):
        synthesize(topology, collective, "rail-direct", timed=False)


@pytest.mark.parametrize("collective,ranks_per_host,hosts,lanes", [
    ("reducescatter", 8, 2, (4, 4)), ("allgather", 8, 2, (4, 3)), ("allreduce", 8, 2, (2, 2)),
    ("reducescatter", 8, 4, (4, 1)), ("allgather", 2, 2, (30, 1)), ("allreduce", 2, 2, (15, 2)),
    ("reducescatter", 32, 2, (1, 1)), ("reducescatter", 33, 2, (0, 0)), ("allreduce", 17, 2, (0, 0)),
    ("allreduce", 8, 4, (4, 1)), ("allreduce", 8, 16, (2, 1)), ("allreduce", 30, 3, (1, 1)),
    ("allreduce", 32, 3, (0, 0))])
def test_lanes_fit_the_thread_blocks_and_channels(collective, ranks_per_host, hosts, lanes):
    assert lanes_for(collective, ranks_per_host, hosts, EXECUTOR.max_threadblocks_per_rank,
                     EXECUTOR.max_channels) == lanes


@settings(max_examples=12, deadline=None)
@given(st.sampled_from(RAIL_DIRECT_COLLECTIVES), st.integers(2, 3), st.integers(2, 4), st.integers(1, 3),
       st.integers(1, 3), st.integers(1, 3))
def test_any_host_lane_and_chunk_count_verifies_and_equals_numpy(collective, hosts, gpus, lanes, nic_lanes,
                                                                   per_lane):
    layout = [list(range(h * gpus, (h + 1) * gpus)) for h in range(hosts)]
    algorithm = BUILDERS[collective](layout, lanes, nic_lanes, per_lane, "rail-direct-test")
    report = verify_algorithm(algorithm, dialect=LEGACY.name)
    assert report.ok and not report.violations
    assert_executes(algorithm, modes=list(Mode), seed=hosts + gpus + lanes + nic_lanes + per_lane)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(RAIL_DIRECT_COLLECTIVES), st.integers(2, 5), st.integers(2, 4), st.integers(1, 4),
       st.integers(1, 4), st.integers(1, 6))
def test_the_steps_per_thread_block_known_before_building_are_the_built_programs(collective, hosts, gpus, lanes,
                                                                                 nic_lanes, per_lane):
    layout = [list(range(h * gpus, (h + 1) * gpus)) for h in range(hosts)]
    algorithm = BUILDERS[collective](layout, lanes, nic_lanes, per_lane, "rail-direct-test")
    built = max(len(tb.steps) for rank in algorithm.ranks for tb in rank.threadblocks)
    assert steps_per_threadblock(collective, hosts, lanes, nic_lanes, per_lane) == built


@pytest.mark.parametrize("collective", ["allgather", "reducescatter"])
def test_each_local_connection_carries_the_rail_peers_chunks_chunk_by_chunk(collective):
    """A local connection carries the blocks of the other hosts chunk by chunk, every
    host's chunk ``x`` before any host's ``x + 1``, the order they arrive over the network
    (all-gather) or in which their sums must leave over it (reduce-scatter)."""
    from arborcc.ir.model import Buffer

    hosts, gpus, lanes, per_lane = 4, 2, 1, 3
    k = lanes * per_lane
    layout = [list(range(h * gpus, (h + 1) * gpus)) for h in range(hosts)]
    algorithm = BUILDERS[collective](layout, lanes, 1, per_lane, "rail-direct-test")
    checked = 0
    for program in algorithm.ranks:
        host = program.rank // gpus
        for tb in program.threadblocks:
            if tb.send < 0 or tb.send // gpus != host:
                continue  # not a connection to a local peer
            remote = [(st.src_off % k, st.src_off // k // gpus) for st in tb.steps
                      if st.src_off // k // gpus != host and (collective == "reducescatter"
                                                                 or st.src_buf is Buffer.OUTPUT)]
            order = [(x, (h - host) % hosts) for x, h in remote]
            assert order == sorted(order) and len(order) == (hosts - 1) * per_lane
            checked += 1
    assert checked == hosts * gpus * (gpus - 1) * lanes


def test_the_most_chunks_that_fit_below_switch_directs_largest_count_are_tried():
    """Every count tried fits the steps per thread block; the most that fit is among them
    (8 on 8 hosts, where switch-direct's next count, 16, takes 128 steps)."""
    for collective in RAIL_DIRECT_COLLECTIVES:
        for hosts in (2, 8, 16):
            counts = chunk_counts(collective, hosts, 3, 1, EXECUTOR.max_steps_per_threadblock)
            assert counts == sorted(set(counts)) and counts[0] == 1
            assert all(steps_per_threadblock(collective, hosts, 3, 1, m) <= EXECUTOR.max_steps_per_threadblock
                       for m in counts)
            assert steps_per_threadblock(collective, hosts, 3, 1, counts[-1] + 1) > \
                EXECUTOR.max_steps_per_threadblock or counts[-1] == 64
    assert chunk_counts("allgather", 8, 3, 1, EXECUTOR.max_steps_per_threadblock) == [1, 4, 8]


def test_rail_direct_runs_on_the_shared_memory_runtime_as_numpy_computes():
    from tests.support.runtime_execution import RuntimeCase, runtime_failures

    box = switch_nodes(2, 2)
    cases = [RuntimeCase(f"{collective}-{mode.value}", synthesize(box, collective, "rail-direct", size=MIB).algorithm,
                         mode)
             for collective in RAIL_DIRECT_COLLECTIVES for mode in Mode]
    verdicts = runtime_failures(cases, box.num_ranks, timeout=120)
    assert verdicts and not any(verdicts.values()), verdicts
