"""The simulator against closed-form times: one link, a pipelined chain, a ring, two
flows sharing a link, a switch, and the protocols' latencies and wire efficiency.

All with the ideal fidelity profile (nominal links, no compute or launch cost), so the
only costs are the ones the formulas name: bytes / bandwidth, the route latency, the
protocol's per-transfer latency and its base latency once per call.
"""

import math

import pytest
from hypothesis import given, settings, strategies as st

from arborcc.errors import VerificationError
from arborcc.ir.model import Op, ThreadBlock
from arborcc.sim.fidelity import IDEAL
from arborcc.library.nccl_ring import ring_allreduce_algorithm
from arborcc.sim.protocols import PROTOCOL_MODELS
from arborcc.sim.simulate import simulate
from arborcc.topology.model import GB

from sim_builders import (algorithm, chain_topology, forward_chain, full_topology, step, switch_topology,
                      two_channel_pair)

SIMPLE, LL = PROTOCOL_MODELS["Simple"], PROTOCOL_MODELS["LL"]
B = 10 * GB  #: link bandwidth of the test topologies
LAT = 1e-6  #: link latency of the test topologies


def one_send(chunks: int = 1):
    tbs = {0: [ThreadBlock(0, send=1, steps=[step(Op.SEND, 0, chunks)])],
           1: [ThreadBlock(0, recv=0, steps=[step(Op.RECV, 0, chunks)])]}
    return algorithm("one-send", 2, chunks, tbs)


@pytest.mark.parametrize("size", [8, 4096, 1 << 20, 5 << 20, 64 << 20])
def test_one_link(size):
    """size / B + latency + the protocol's costs, whether the transfer is one slice or many."""
    r = simulate(one_send(), chain_topology(2, 10, 1.0), size, "Simple", IDEAL)
    want = SIMPLE.base_latency + size / B + LAT + SIMPLE.hop_latency
    assert r.time == pytest.approx(want, rel=1e-9)
    assert r.algbw == pytest.approx(size / want)


@pytest.mark.parametrize("hops,size", [(1, 1 << 20), (3, 1 << 20), (3, 8 << 20), (5, 64 << 20)])
def test_chain_pipelines_slices(hops, size):
    """A chain of h hops cut into k slices of size/k: (k + h - 1) slice times, plus the
    latency of every hop once."""
    r = simulate(forward_chain(hops + 1, 1), chain_topology(hops + 1, 10, 1.0), size, "Simple", IDEAL, exact=True)
    k = math.ceil(size / SIMPLE.slice_bytes)
    want = SIMPLE.base_latency + (k + hops - 1) * (size / k) / B + hops * (LAT + SIMPLE.hop_latency)
    assert r.iterations == k
    assert r.time == pytest.approx(want, rel=1e-9)


def test_chain_of_many_chunks_pipelines_chunk_by_chunk():
    """Eight one-chunk steps down a chain pipeline like eight slices."""
    size, hops, chunks = 1 << 20, 4, 8
    r = simulate(forward_chain(hops + 1, chunks), chain_topology(hops + 1, 10, 1.0), size, "Simple", IDEAL)
    c = size / chunks
    want = SIMPLE.base_latency + (chunks + hops - 1) * c / B + hops * (LAT + SIMPLE.hop_latency)
    assert r.time == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("n,size", [(2, 1 << 16), (4, 1 << 20), (8, 1 << 20), (4, 64 << 20)])
def test_ring_allreduce(n, size):
    """NCCL's ring on a ring of links: every step moves one slice of one chunk and waits
    for the previous rank's, so each of the 2(n-1) steps per iteration costs
    slice / B + latency."""
    ring = list(range(n))
    b = chain_topology(n, 10, 1.0)
    topo = full_topology(n, 10, 1.0) if n > 2 else b
    r = simulate(ring_allreduce_algorithm([ring]), topo, size, "Simple", IDEAL, exact=True)
    chunk = size / n
    iters = max(1, math.ceil(chunk / SIMPLE.slice_bytes))
    want = SIMPLE.base_latency + iters * 2 * (n - 1) * (chunk / iters / B + LAT + SIMPLE.hop_latency)
    assert r.time == pytest.approx(want, rel=1e-9)
    assert r.busbw == pytest.approx(r.algbw * 2 * (n - 1) / n)


def test_two_flows_share_a_link_fairly():
    """Two equal transfers at once on one link: each gets half, both end at 2S / B."""
    size = 1 << 20  # two chunks of 512 KiB
    r = simulate(two_channel_pair(), chain_topology(2, 10, 1.0), size, "Simple", IDEAL, record=True)
    want = SIMPLE.base_latency + size / B + LAT + SIMPLE.hop_latency
    assert r.time == pytest.approx(want, rel=1e-9)
    rates = {round(rate / GB, 6) for _, _, _, rate in r.flow_segments}
    assert rates == {5.0}


def test_unequal_flows_get_the_link_back_when_one_ends():
    """Transfers of 1 and 2 chunks start together: both at B/2 until the short one ends
    at 2c/B, then the long one alone at B for its last chunk: 3c / B in all."""
    tbs = {0: [ThreadBlock(0, send=1, channel=0, steps=[step(Op.SEND, 0, 1)]),
               ThreadBlock(1, send=1, channel=1, steps=[step(Op.SEND, 1, 2)])],
           1: [ThreadBlock(0, recv=0, channel=0, steps=[step(Op.RECV, 0, 1)]),
               ThreadBlock(1, recv=0, channel=1, steps=[step(Op.RECV, 1, 2)])]}
    algo = algorithm("unequal", 2, 3, tbs)
    c = 100_000
    r = simulate(algo, chain_topology(2, 10, 1.0), 3 * c, "Simple", IDEAL, record=True)
    assert r.time == pytest.approx(SIMPLE.base_latency + 3 * c / B + LAT + SIMPLE.hop_latency, rel=1e-9)
    rates = sorted({round(rate / GB, 6) for _, _, _, rate in r.flow_segments})
    assert rates == [5.0, 10.0]


def test_a_thread_blocks_next_transfer_is_not_ended_by_its_previous_ones_stale_finish():
    """Transfers of 1 chunk (channel 0) and 2 + 2 chunks (channel 1, two steps) on one
    link: both at B/2 until 2c/B, then the first 2-chunk step alone at B, done at 3c/B
    (its finish expected at 4c/B while it ran at B/2 is stale), then the second alone
    at B until 5c/B. The second step must not end at the first step's stale 4c/B."""
    tbs = {0: [ThreadBlock(0, send=1, channel=0, steps=[step(Op.SEND, 0, 1)]),
               ThreadBlock(1, send=1, channel=1, steps=[step(Op.SEND, 1, 2), step(Op.SEND, 3, 2)])],
           1: [ThreadBlock(0, recv=0, channel=0, steps=[step(Op.RECV, 0, 1)]),
               ThreadBlock(1, recv=0, channel=1, steps=[step(Op.RECV, 1, 2), step(Op.RECV, 3, 2)])]}
    algo = algorithm("stale-finish", 2, 5, tbs)
    c = 100_000
    r = simulate(algo, chain_topology(2, 10, 1.0), 5 * c, "Simple", IDEAL, record=True)
    assert r.time == pytest.approx(SIMPLE.base_latency + 5 * c / B + LAT + SIMPLE.hop_latency, rel=1e-9)
    moved = sum((end - start) * rate for _, start, end, rate in r.flow_segments)
    assert moved == pytest.approx(5 * c, rel=1e-9)


def test_switch_shares_only_the_common_port():
    """Through a switch, ranks 0 and 1 both sending to rank 2 share the switch's port to
    rank 2 (each B/2); a ring of sends 0->1->2->0 shares nothing (each B)."""
    size = 1 << 20
    fan_in = {0: [ThreadBlock(0, send=2, steps=[step(Op.SEND, 0)])],
              1: [ThreadBlock(0, send=2, steps=[step(Op.SEND, 1)])],
              2: [ThreadBlock(0, recv=0, steps=[step(Op.RECV, 0)]), ThreadBlock(1, recv=1, steps=[step(Op.RECV, 1)])]}
    r = simulate(algorithm("fan-in", 3, 2, fan_in), switch_topology(3, 10, 1.0), size, "Simple", IDEAL)
    c = size / 2
    assert r.time == pytest.approx(SIMPLE.base_latency + 2 * c / B + 2 * LAT + SIMPLE.hop_latency, rel=1e-9)
    rotate = {k: [ThreadBlock(0, send=(k + 1) % 3, steps=[step(Op.SEND, k)]),
                  ThreadBlock(1, recv=(k - 1) % 3, steps=[step(Op.RECV, (k - 1) % 3)])] for k in range(3)}
    r = simulate(algorithm("rotate", 3, 3, rotate), switch_topology(3, 10, 1.0), size, "Simple", IDEAL)
    c = size / 3
    assert r.time == pytest.approx(SIMPLE.base_latency + c / B + 2 * LAT + SIMPLE.hop_latency, rel=1e-9)


@pytest.mark.parametrize("protocol", ["LL", "LL128", "Simple"])
def test_protocol_latency_and_wire_efficiency(protocol):
    """A tiny message costs the protocol's base and per-transfer latency; a large one
    moves at the wire rate times the protocol's payload share."""
    p = PROTOCOL_MODELS[protocol]
    topo = chain_topology(2, 10, 1.0)
    tiny = simulate(one_send(), topo, 8, protocol, IDEAL)
    assert tiny.time == pytest.approx(p.base_latency + LAT + p.hop_latency + 8 / (B * p.wire_efficiency), rel=1e-9)
    size = 256 << 20
    big = simulate(one_send(), topo, size, protocol, IDEAL)
    assert big.time == pytest.approx(p.base_latency + LAT + p.hop_latency + size / (B * p.wire_efficiency), rel=1e-9)


def test_ll_is_faster_than_simple_for_small_messages_only():
    topo = chain_topology(2, 10, 1.0)
    small = {p: simulate(one_send(), topo, 1024, p, IDEAL).time for p in ("LL", "Simple")}
    large = {p: simulate(one_send(), topo, 64 << 20, p, IDEAL).time for p in ("LL", "Simple")}
    assert small["LL"] < small["Simple"]
    assert large["Simple"] < large["LL"]


def test_reduction_costs_time_at_the_reduction_bandwidth():
    """A reduce along a chain with reductions at R B/s: every slice costs slice/B +
    slice/R at each relay, so the pipeline's period is their sum."""
    from arborcc.ir.model import Buffer, Step

    def rrs_chain(n):
        tbs = {0: [ThreadBlock(0, send=1, steps=[step(Op.SEND)])],
               n - 1: [ThreadBlock(0, recv=n - 2, steps=[Step(Op.RECV_REDUCE_COPY, Buffer.INPUT, 0, Buffer.INPUT, 0)])]}
        for r in range(1, n - 1):
            tbs[r] = [ThreadBlock(0, send=r + 1, recv=r - 1,
                                  steps=[Step(Op.RECV_REDUCE_SEND, Buffer.INPUT, 0, Buffer.INPUT, 0)])]
        return algorithm("reduce-chain", n, 1, tbs, "reduce")

    red = 40 * GB
    fid = IDEAL.with_changes(reduce_bandwidth=red)
    size = 64 << 20
    r = simulate(rrs_chain(4), chain_topology(4, 10, 0.0), size, "Simple", fid, exact=True)
    k = size // SIMPLE.slice_bytes
    s = size / k
    # relays 1 and 2 reduce then send (s/R + s/B per slice); rank 3 reduces what arrives
    period = s / red + s / B
    want = SIMPLE.base_latency + s / B + (k - 1) * period + 2 * (s / red + s / B) + s / red + 3 * SIMPLE.hop_latency
    assert r.time == pytest.approx(want, rel=1e-6)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 6), exp=st.integers(10, 28), proto=st.sampled_from(["LL", "LL128", "Simple"]))
def test_extrapolated_time_matches_every_iteration_simulated(n, exp, proto):
    """Ring and chain: the steady-period shortcut gives the exact answer."""
    topo = full_topology(n, 10, 1.0) if n > 2 else chain_topology(2, 10, 1.0)
    for algo in (ring_allreduce_algorithm([list(range(n))]), forward_chain(n, 2)):
        fast = simulate(algo, topo, 1 << exp, proto, IDEAL)
        exact = simulate(algo, topo, 1 << exp, proto, IDEAL, exact=True)
        assert fast.time == pytest.approx(exact.time, rel=1e-9)


def test_instances_run_side_by_side_on_shares_of_the_links():
    """n instances on 1/n of the data each: the same as one copy on links of 1/n the
    capacity; for a latency-free bandwidth-bound ring that is the same total time."""
    topo = full_topology(4, 10, 0.0)
    algo = ring_allreduce_algorithm([[0, 1, 2, 3]])
    one = simulate(algo, topo, 64 << 20, "Simple", IDEAL)
    four = simulate(algo, topo, 64 << 20, "Simple", IDEAL, instances=4)
    assert four.instances == 4
    assert four.time == pytest.approx(one.time, rel=0.02)


def test_an_algorithm_that_cannot_finish_is_reported():
    """A receive with no matching send: one line naming the stuck thread block."""
    tbs = {0: [ThreadBlock(0, send=1, steps=[step(Op.SEND), step(Op.RECV)], recv=1)],
           1: [ThreadBlock(0, recv=0, send=0, steps=[step(Op.RECV), step(Op.RECV)])]}
    with pytest.raises(VerificationError, match="receives"):
        simulate(algorithm("stuck", 2, 1, tbs), chain_topology(2), 1024, "Simple", IDEAL)


def test_dependency_deadlock_is_reported():
    tbs = {0: [ThreadBlock(0, steps=[step(Op.NOP, dep=(1, 0))]), ThreadBlock(1, steps=[step(Op.NOP, dep=(0, 0))])],
           1: []}
    with pytest.raises(VerificationError, match="deadlock"):
        simulate(algorithm("cycle", 2, 1, tbs), chain_topology(2), 1024, "Simple", IDEAL)


def test_size_must_be_positive():
    from arborcc.errors import InputError

    with pytest.raises(InputError, match="positive"):
        simulate(one_send(), chain_topology(2), 0, "Simple", IDEAL)


def test_critical_path_adds_up_to_the_time():
    r = simulate(forward_chain(4, 1), chain_topology(4, 10, 1.0), 8 << 20, "Simple", IDEAL, record=True)
    cp = r.critical_path
    assert cp.end == pytest.approx(r.time, rel=1e-9)
    s = cp.summary()
    assert s["launch"] + s["transfer"] + s["latency"] + s["compute"] + s["waiting"] == pytest.approx(r.time)
    assert s["transfers"] == 8 + 2  # the first slice down 3 hops, then the other 7 on the last hop



def test_a_step_of_more_slices_than_fifo_slots_waits_for_its_receiver():
    """Two ranks that each send a whole step to the other before receiving: fine while a
    step fits the connection's FIFO (one slice-sized piece), a deadlock once the runtime
    cuts it into more slices than the FIFO holds (16 one-slice pieces, 4 Simple slots)."""
    k = 16
    tbs = {r: [ThreadBlock(0, send=1 - r, recv=1 - r, steps=[step(Op.SEND, 0, k), step(Op.RECV, 0, k)])]
           for r in (0, 1)}
    algo = algorithm("cross-send", 2, k, tbs)
    topo = chain_topology(2)
    small = simulate(algo, topo, k * 1024, "Simple", IDEAL)
    assert small.time > 0
    with pytest.raises(VerificationError, match="waits forever"):
        simulate(algo, topo, k * SIMPLE.slice_bytes, "Simple", IDEAL)
