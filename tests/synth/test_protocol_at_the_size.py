"""``synthesize`` writes each algorithm with the protocol fastest at the size it ranks at
(LL, LL128, Simple; LL and Simple only where the format cannot name LL128), and the time
it reports is that file's simulated time."""

import json
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings, strategies as st

from arborcc.cli.main import main
from arborcc.ir.model import Protocol
from arborcc.sim.protocols import PROTOCOL_NAMES
from arborcc.sim.simulate import predict_time
from arborcc.synth.synthesis import synthesize
from arborcc.topology.allocation import induced
from arborcc.topology.machines import build_machine


def test_synth_at_one_mebibyte_writes_ll_where_ll_is_faster_and_reports_the_files_time(tmp_path, capsys):
    topology_args = ["--machine", "dgx1v"]
    path = tmp_path / "allgather.xml"
    assert main(["synth", *topology_args, "--collective", "allgather", "--size", "1MiB", "-o", str(path),
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert ET.parse(path).getroot().get("proto") == "LL"
    assert main(["simulate", str(path), *topology_args, "--sizes", "1MiB", "--protocol", "Simple", "--json"]) == 0
    [simple] = json.loads(capsys.readouterr().out)["results"]
    assert main(["simulate", str(path), *topology_args, "--sizes", "1MiB", "--json"]) == 0
    [as_written] = json.loads(capsys.readouterr().out)["results"]
    assert as_written["protocol"] == "LL" and as_written["time_us"] < simple["time_us"]
    assert summary["time_us"] == pytest.approx(as_written["time_us"], rel=0.01)


def test_synth_at_a_large_size_keeps_simple_where_it_is_faster():
    topology = build_machine("dgx1v")
    result = synthesize(topology, "allgather", "nccl-ring", size=256 << 20)
    assert result.algorithm.protocol is Protocol.SIMPLE
    assert result.time < predict_time(result.algorithm, topology, 256 << 20, "LL")


def test_a_format_without_ll128_gets_the_fastest_protocol_it_can_name():
    topology = build_machine("dgx1v")
    free = synthesize(topology, "reduce", "nccl-ring", size=64 << 20)
    assert free.algorithm.protocol is Protocol.LL128  # the fastest here
    bound = synthesize(topology, "reduce", "nccl-ring", size=64 << 20, protocols=("LL", "Simple"))
    assert bound.algorithm.protocol is Protocol.SIMPLE
    assert bound.time == pytest.approx(predict_time(bound.algorithm, topology, 64 << 20), rel=1e-9)


def test_synth_mscclpp_plan_never_names_ll128(tmp_path, capsys):
    path = tmp_path / "reduce.json"
    assert main(["synth", "--machine", "dgx1v", "--collective", "reduce", "--strategy", "nccl-ring",
                 "--size", "64MiB", "--format", "mscclpp", "-o", str(path), "--json"]) == 0
    capsys.readouterr()
    assert "LL128" not in path.read_text()


@settings(max_examples=4, deadline=None)
@given(gpus=st.lists(st.integers(0, 7), min_size=2, max_size=8, unique=True),
       collective=st.sampled_from(["allreduce", "allgather", "reducescatter", "broadcast", "reduce"]),
       size=st.integers(1, 256 << 20))
def test_the_written_protocol_is_the_fastest_at_the_size(gpus, collective, size):
    topology = induced(build_machine("dgx1v"), [f"gpu{g}" for g in sorted(gpus)])
    result = synthesize(topology, collective, "trees", size=size)
    assert result.time == pytest.approx(predict_time(result.algorithm, topology, size), rel=1e-9)
    others = {p: predict_time(result.algorithm, topology, size, p) for p in PROTOCOL_NAMES}
    assert result.time <= min(others.values()) * (1 + 1e-9), (result.algorithm.protocol, others)
