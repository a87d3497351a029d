"""TopologyBuilder validation: every bad input is one TopologyError naming the place."""

import math

import pytest

from arborcc.errors import TopologyError
from arborcc.topology.model import GB, Device, DeviceKind, Link, LinkKind, TopologyBuilder


def builder():
    b = TopologyBuilder("t", source="t.yaml")
    b.add_device(Device("gpu0", DeviceKind.GPU, 0, 0))
    b.add_device(Device("gpu1", DeviceKind.GPU, 0, 1))
    return b


def test_undefined_endpoint_names_file_place_and_device():
    with pytest.raises(TopologyError) as e:
        builder().add_link(Link("gpu0", "gpu9", LinkKind.NVLINK, GB), place=12)
    assert str(e.value) == "t.yaml:12: link gpu0->gpu9: gpu9 is not defined"


@pytest.mark.parametrize("bw", [0, -1.0, math.nan, math.inf])
def test_bad_bandwidth(bw):
    with pytest.raises(TopologyError, match="bandwidth must be a positive number"):
        builder().add_link(Link("gpu0", "gpu1", LinkKind.NVLINK, bw))


def test_duplicate_device_and_link():
    b = builder()
    with pytest.raises(TopologyError, match="duplicate device id gpu0"):
        b.add_device(Device("gpu0", DeviceKind.GPU))
    b.add_link(Link("gpu0", "gpu1", LinkKind.NVLINK, GB))
    with pytest.raises(TopologyError, match="duplicate link gpu0->gpu1"):
        b.add_link(Link("gpu0", "gpu1", LinkKind.NVLINK, GB))


def test_merge_adds_lanes():
    b = builder()
    b.add_link(Link("gpu0", "gpu1", LinkKind.NVLINK, GB), merge=True)
    b.add_link(Link("gpu0", "gpu1", LinkKind.NVLINK, GB), merge=True)
    t = b.build()
    assert t.link("gpu0", "gpu1").count == 2 and t.link("gpu0", "gpu1").bandwidth == 2 * GB


def test_bad_count_latency_self_link():
    b = builder()
    with pytest.raises(TopologyError, match="count must be an integer"):
        b.add_link(Link("gpu0", "gpu1", LinkKind.NVLINK, GB, count=0))
    with pytest.raises(TopologyError, match="latency must be"):
        b.add_link(Link("gpu0", "gpu1", LinkKind.NVLINK, GB, latency=-1))
    with pytest.raises(TopologyError, match="itself"):
        b.add_link(Link("gpu0", "gpu0", LinkKind.NVLINK, GB))


def test_ranks_must_be_gpus_once():
    b = builder()
    b.add_device(Device("cpu0", DeviceKind.CPU))
    with pytest.raises(TopologyError, match="rank cpu0 is a cpu"):
        b.build(ranks=["gpu0", "cpu0"])
    with pytest.raises(TopologyError, match="listed twice"):
        b.build(ranks=["gpu0", "gpu0"])
    assert b.build(ranks=["gpu1", "gpu0"]).ranks == ("gpu1", "gpu0")


def test_no_gpu():
    b = TopologyBuilder("empty")
    b.add_device(Device("cpu0", DeviceKind.CPU))
    with pytest.raises(TopologyError, match="no GPU"):
        b.build()
