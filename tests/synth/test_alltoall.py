"""The three-step all-to-all: its pairing of hosts balances the NICs, its thread blocks
and channels keep the runtimes' limits, no thread block both sends and receives (so no
send waits on a FIFO its peer fills in the other direction, whatever the runtimes' piece
size), and the algorithm it builds is proved by the verifier (with its pieces check)
and runs right on the numpy reference executor."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arborcc.errors import SynthesisError
from arborcc.ir.limits import DEFAULT_SLOTS, check_dialect_limits, dialect_limits
from arborcc.lang.program import OWN_PROGRAM_OPERATIONS
from arborcc.limits import limit
from arborcc.synth import synthesize
from arborcc.synth.alltoall import HostPairing
from arborcc.synth.synthesis import OPERATIONS_PER_RANK_SQUARED, operations_budget
from arborcc.topology.cluster import build_cluster
from arborcc.topology.model import GB, Device, DeviceKind, LinkKind, TopologyBuilder
from arborcc.verify import verify_algorithm
from support.execution import assert_executes


def equal_hosts(hosts: int, per_host: int):
    """``hosts`` hosts of ``per_host`` GPUs, all NVLinked inside a host (100 GB/s), one
    12.5 GB/s NIC per GPU, every NIC on one switch: the NICs are the bottleneck."""
    b = TopologyBuilder(f"{hosts}x{per_host}")
    b.add_device(Device("switch", DeviceKind.NET_SWITCH, None, 0))
    for h in range(hosts):
        for i in range(per_host):
            b.add_device(Device(f"n{h}.gpu{i}", DeviceKind.GPU, h, i))
            b.add_device(Device(f"n{h}.nic{i}", DeviceKind.NIC, h, i))
            b.connect(f"n{h}.gpu{i}", f"n{h}.nic{i}", LinkKind.PCIE, 25 * GB)
            b.connect(f"n{h}.nic{i}", "switch", LinkKind.NETWORK, 12.5 * GB)
            for j in range(i):
                b.connect(f"n{h}.gpu{i}", f"n{h}.gpu{j}", LinkKind.NVLINK, 100 * GB)
    return b.build()


def relay_load(plan: HostPairing, host: int) -> list[int]:
    """Blocks each GPU of ``host`` sends to other hosts."""
    G = plan.per_host
    load = [len(plan.rails[host]) * G] * G
    for k in plan.relayed[host]:
        load[plan.handler(host, k)] += G * G
    return load


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 260), st.integers(1, 8))
def test_every_host_pair_is_relayed_or_railed_once_and_symmetric(hosts, per_host):
    plan = HostPairing(hosts, per_host)
    for m in range(hosts):
        assert sorted(plan.relayed[m] + plan.rails[m]) == [k for k in range(hosts) if k != m]
        for k in plan.relayed[m]:
            assert m in plan.relayed[k]
        for k in plan.rails[m]:
            assert m in plan.rails[k]
        load = relay_load(plan, m)
        assert max(load) == plan.pairs_per_gpu * per_host ** 2 + plan.rail_pairs * per_host
        if (hosts - 1) % per_host == 0 or hosts * ((hosts - 1) % per_host) % 2 == 0:
            assert len(set(load)) == 1  # every NIC carries the same share
            assert plan.nic_share() == pytest.approx(1.0)


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 160), st.integers(1, 8))
def test_in_host_messages_are_numbered_densely_within_the_limits(hosts, per_host):
    plan = HostPairing(hosts, per_host)
    try:
        C = plan.channels("executor")
    except SynthesisError:
        return  # too many host pairs per GPU for the executor's thread blocks
    lim = dialect_limits("executor")
    assert plan.thread_blocks(C) <= lim.max_threadblocks_per_rank
    for m in range(hosts):
        for a in range(per_host):
            for b in range(per_host):
                if a == b:
                    continue
                positions = [plan.message(m, "direct", 0, a, b)]
                positions += [plan.message(m, "row", k, a, b) for k in plan.relayed[m] if plan.handler(m, k) == b]
                positions += [plan.message(m, "scatter", k, a, b) for k in plan.relayed[m]
                              if plan.handler(m, k) == a]
                positions += [plan.message(m, "rail", k, a, b) for k in plan.rails[m]]
                assert sorted(positions) == list(range(len(positions)))
                assert len(positions) <= plan.in_host_messages()
    assert -(-plan.in_host_messages() // C) <= plan.steps_per_thread_block(C) <= lim.max_steps_per_threadblock


def test_1024_gpus_fit_the_executor_at_the_bound():
    plan = HostPairing(128, 8)
    C = plan.channels("executor")
    lim = dialect_limits("executor")
    assert (plan.pairs_per_gpu, plan.rail_pairs) == (15, 7)  # 7 x 8 + 15 x 64 blocks per NIC: balanced
    assert plan.nic_share() == pytest.approx(1.0)
    assert plan.thread_blocks(C) <= lim.max_threadblocks_per_rank
    assert plan.steps_per_thread_block(C) <= lim.max_steps_per_threadblock
    # over a DSL program's default budget, within synthesize's
    assert limit("operations").default < plan.operations() <= OPERATIONS_PER_RANK_SQUARED * 1024 ** 2


@pytest.mark.parametrize("hosts,per_host", [(9, 2), (12, 2), (7, 3), (20, 2)])
def test_three_step_is_verified_at_the_bound_within_the_limits_and_executes(hosts, per_host):
    t = equal_hosts(hosts, per_host)
    plan = HostPairing(hosts, per_host)
    # untimed: the program is the same (synthesize's timing only simulates it and picks its
    # protocol, Simple here either way), and nothing below reads its simulated time
    r = synthesize(t, "alltoall", "three-step", timed=False)
    assert verify_algorithm(r.algorithm, "executor").ok
    assert not check_dialect_limits(r.algorithm, "executor")
    C = plan.channels("executor")
    assert max(len(p.threadblocks) for p in r.algorithm.ranks) <= plan.thread_blocks(C)
    assert max(len(tb.steps) for p in r.algorithm.ranks for tb in p.threadblocks) <= plan.steps_per_thread_block(C)
    # the pieces rule: every connection is read by a thread block that only receives
    assert not [tb for p in r.algorithm.ranks for tb in p.threadblocks if tb.send >= 0 and tb.recv >= 0]
    assert r.ratio == pytest.approx(1.0), r.notes  # the NICs balanced (the bound is the NIC cut here)
    assert_executes(r.algorithm, seed=3, slots=DEFAULT_SLOTS)


def test_three_step_on_dgx_a100_hosts_reaches_the_bound():
    r = synthesize(build_cluster("dgx-a100", 12), "alltoall", "three-step")
    assert r.report.ok and r.ratio == pytest.approx(1.0)
    assert any("over all 8 rails" in n for n in r.notes)


def test_synthesis_budget_raises_the_operations_limit_only_when_the_user_set_none(monkeypatch):
    lim = limit("operations")
    monkeypatch.delenv(lim.variable, raising=False)
    with operations_budget(64):  # up to 1024 ranks, the budget of every program arborcc builds itself
        assert lim.value == OWN_PROGRAM_OPERATIONS
    with operations_budget(2048):
        assert lim.value == OPERATIONS_PER_RANK_SQUARED * 2048 ** 2
    assert lim.value == lim.default and lim.variable not in os.environ
    monkeypatch.setenv(lim.variable, "1000")
    with operations_budget(1024):
        assert lim.value == 1000
