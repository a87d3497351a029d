"""NCCL's alpha-beta cost model: by hand, and on the rings and trees NCCL would build."""

import pytest

from arborcc.errors import InputError
from arborcc.sim.nccl_model import nccl_estimate
from arborcc.synth.double_binary_tree import double_binary_tree
from arborcc.synth.nccl_rings import nccl_rings
from arborcc.topology.allocation import induced
from arborcc.topology.cluster import build_cluster
from arborcc.topology.machines import build_machine

GB = 1e9


def test_ring_allreduce_by_hand():
    n_bytes = 1 << 20
    est = nccl_estimate("allreduce", "ring", "Simple", n_bytes, ranks=8, nodes=1, intra_link="nvlink",
                        bus_bandwidth=150 * GB)
    lat = (8.4 + 2 * 7 * 3.4) * 1e-6
    algbw = 150 * GB * 8 / 14
    assert est.latency == pytest.approx(lat)
    assert est.algorithm_bandwidth == pytest.approx(algbw)
    assert est.time == pytest.approx(lat + n_bytes / algbw)
    ll = nccl_estimate("allreduce", "ring", "LL", n_bytes, ranks=8, nodes=1, intra_link="nvlink",
                       bus_bandwidth=150 * GB)
    assert ll.latency == pytest.approx((6.6 + 14 * 0.6) * 1e-6)
    assert ll.bus_bandwidth == pytest.approx(75 * GB)
    ag = nccl_estimate("allgather", "ring", "LL128", n_bytes, ranks=8, nodes=1, intra_link="nvlink",
                       bus_bandwidth=150 * GB)
    assert ag.latency == pytest.approx((14 + 7 * 1.9) * 1e-6)
    assert ag.algorithm_bandwidth == pytest.approx(150 * GB * 0.92 * 8 / 7)
    bc = nccl_estimate("broadcast", "ring", "Simple", n_bytes, ranks=8, nodes=1, intra_link="nvlink",
                       bus_bandwidth=150 * GB)
    assert bc.algorithm_bandwidth == pytest.approx(150 * GB)


def test_dgx1v_rings_give_the_hand_computed_prediction():
    # six NVLink rings of one 25 GB/s lane each: bus bandwidth 150 GB/s
    est = nccl_rings(build_machine("dgx1v")).nccl_estimate("allreduce", "Simple", 1 << 20)
    assert est.bus_bandwidth == pytest.approx(150 * GB)
    assert est.latency == pytest.approx((8.4 + 2 * 7 * 3.4) * 1e-6)


def test_multi_node_latency_terms_by_hand():
    t = build_cluster("dgx-a100", 4)
    ring = nccl_rings(t).nccl_estimate("allreduce", "LL", 0)
    # 2(32-1) = 62 steps, 2(4-1) = 6 of them between nodes
    assert ring.latency == pytest.approx((6.6 + 56 * 0.6 + 6 * 2.7) * 1e-6)
    dbt = double_binary_tree(t)
    tree = dbt.nccl_estimate("Simple", 0)
    assert tree.latency == pytest.approx((8.4 + 2 * (7 * 4.0 + 2 * 14)) * 1e-6)
    big = dbt.nccl_estimate("Simple", 1 << 30)
    assert big.algorithm_bandwidth == pytest.approx(big.bus_bandwidth / 2)


def test_pcie_ring_uses_pcie_hop_latency():
    s = nccl_rings(induced(build_machine("dgx1v"), ["gpu1", "gpu4", "gpu5", "gpu6"]))
    assert s.nccl_estimate("allreduce", "Simple", 0).latency == pytest.approx((8.4 + 6 * 5.7) * 1e-6)


def test_one_rank_costs_nothing():
    est = nccl_estimate("allreduce", "ring", "LL", 1e6, ranks=1, nodes=1, intra_link="nvlink", bus_bandwidth=GB)
    assert est.time == 0.0


@pytest.mark.parametrize("collective, algorithm, protocol, message", [
    ("allgather", "tree", "LL", "allreduce only"),
    ("allreduce", "ring", "LL64", "unknown protocol"),
    ("alltoall", "ring", "LL", "unknown collective"),
    ("allreduce", "butterfly", "LL", "unknown algorithm"),
])
def test_model_rejects_bad_requests(collective, algorithm, protocol, message):
    with pytest.raises(InputError, match=message):
        nccl_estimate(collective, algorithm, protocol, 1024, ranks=8, nodes=1, intra_link="nvlink",
                      bus_bandwidth=GB)
    with pytest.raises(InputError, match="not a job"):
        nccl_estimate("allreduce", "ring", "LL", 1024, ranks=2, nodes=3, intra_link="nvlink", bus_bandwidth=GB)
