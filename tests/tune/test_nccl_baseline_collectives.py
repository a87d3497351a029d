"""The NCCL baseline covers every collective NCCL runs, with NCCL's own choices."""

import math

import pytest

from arborcc.errors import SynthesisError
from arborcc.topology.machines import build_machine
from arborcc.tune.compare import compare
from arborcc.tune.nccl import COLLECTIVES, NcclBaseline


@pytest.fixture(scope="module")
def dgx_h100():
    return NcclBaseline(build_machine("dgx-h100"))


@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "reduce", "broadcast", "allreduce"])
def test_compare_has_an_nccl_line_for_every_nccl_collective(collective):
    cmp = compare(build_machine("dgx1v"), collective, [1 << 10, 1 << 24], strategies=["trees"])
    assert {"nccl", "nccl-model"} <= set(cmp.names())
    for name in ("nccl", "nccl-model"):
        assert all(math.isfinite(b) and b > 0 for b in cmp.busbw(name))
    assert not any(s.startswith("nccl:") for s in cmp.skipped)


def test_compare_says_why_a_collective_has_no_nccl_line():
    cmp = compare(build_machine("dgx1v"), "alltoall", [1 << 20])
    assert any(s.startswith("nccl:") and "alltoall" in s for s in cmp.skipped)


@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "reduce", "broadcast"])
def test_nvls_is_all_reduce_only(dgx_h100, collective):
    assert ("nvls", "Simple") in dgx_h100.options("allreduce")
    assert all(a == "ring" for a, _ in dgx_h100.options(collective))
    assert dgx_h100.call(1 << 30, collective).algorithm == "ring"


def test_protocol_follows_nccls_model_small_ll_large_simple(dgx_h100):
    assert dgx_h100.call(1 << 10, "allgather").protocol == "LL"
    assert dgx_h100.call(1 << 30, "allgather").protocol == "Simple"


def test_small_calls_use_fewer_channels(dgx_h100):
    assert dgx_h100.call(1 << 10, "reducescatter").channels < dgx_h100.call(1 << 30, "reducescatter").channels


def test_the_baseline_refuses_a_collective_nccl_does_not_run(dgx_h100):
    with pytest.raises(SynthesisError, match="not gather"):
        dgx_h100.call(1 << 20, "gather")
    assert "gather" not in COLLECTIVES
