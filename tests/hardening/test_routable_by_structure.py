"""check_routable's answer for every rank pair (one search per rank plus what each entry
device reaches inside its host) is the per-pair answer of Topology.can_route, on random
small clusters: same verdict, same first pair named."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborcc.errors import SynthesisError
from arborcc.synth.flowgraph import check_routable
from arborcc.topology.model import Device, DeviceKind, Link, LinkKind, TopologyBuilder

KINDS = (DeviceKind.GPU, DeviceKind.GPU, DeviceKind.NIC, DeviceKind.PCIE_SWITCH, DeviceKind.CPU)


@st.composite
def small_clusters(draw):
    hosts = draw(st.integers(1, 3))
    b = TopologyBuilder("random")
    ids = []
    for h in range(hosts):
        kinds = draw(st.lists(st.sampled_from(KINDS), min_size=2, max_size=5))
        for i, kind in enumerate(kinds):
            ids.append(b.add_device(Device(f"h{h}-{kind.value}{i}", kind, h, index=i)).id)
    for i in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from((DeviceKind.NET_SWITCH, DeviceKind.NET_SWITCH, DeviceKind.GPU)))
        ids.append(b.add_device(Device(f"net-{kind.value}{i}", kind, None, index=i)).id)
    pairs = draw(st.lists(st.tuples(st.sampled_from(ids), st.sampled_from(ids), st.sampled_from((1e9, 2e9, 5e9))),
                          max_size=3 * len(ids)))
    for a, c, bw in pairs:
        if a != c:
            b.add_link(Link(a, c, LinkKind.PCIE, bw), merge=True)
    gpus = [d for d in ids if "-gpu" in d]
    if len(gpus) < 2:
        return None
    ranks = draw(st.permutations(gpus))[:draw(st.integers(2, len(gpus)))]
    return b.build(ranks=ranks)


def first_unroutable_pair(topology):
    for a in topology.ranks:
        for b in topology.ranks:
            if a != b and not topology.can_route(a, b):
                return a, b
    return None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_clusters())
def test_check_routable_agrees_with_every_pair_routed(topology):
    if topology is None:
        return
    expected = first_unroutable_pair(topology)
    if expected is None:
        check_routable(topology)
        return
    with pytest.raises(SynthesisError) as error:
        check_routable(topology)
    assert f"GPUs {expected[0]} and {expected[1]} cannot" in str(error.value)


def test_check_routable_names_the_first_pair_without_a_route():
    b = TopologyBuilder("two islands")
    for h in range(2):
        b.add_device(Device(f"g{h}", DeviceKind.GPU, h, index=0))
        b.add_device(Device(f"sw{h}", DeviceKind.PCIE_SWITCH, h, index=0))
        b.connect(f"g{h}", f"sw{h}", LinkKind.PCIE, 1e9)
    b.add_device(Device("g2", DeviceKind.GPU, 0, index=1))
    b.connect("g2", "sw0", LinkKind.PCIE, 1e9)
    topology = b.build(ranks=["g0", "g2", "g1"])
    with pytest.raises(SynthesisError, match="GPUs g0 and g1 cannot reach each other"):
        check_routable(topology)
