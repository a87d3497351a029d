"""``arborcc synth`` reports one time per algorithm: the simulated time of the file it
writes, as ``arborcc simulate FILE`` runs it (each pair's own route: MSCCL XML names no
relay), at ``--size`` or the stated default, next to NCCL's."""

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from arborcc.cli.main import main
from arborcc.synth.result import RANKING_SIZE


def synth_json(capsys, *args: str) -> dict:
    assert main(["synth", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def simulated_us(capsys, path, topology_args: list[str], size: int) -> float:
    assert main(["simulate", str(path), *topology_args, "--sizes", str(size), "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)["results"]
    return row["time_us"]


CASES = [
    (["--machine", "dgx1v", "--gpus", "1,4,5,6"], ["--collective", "allreduce", "--size", "64MiB"], "xml"),
    # a cluster at 1M: its synthesis and simulation at the 64M default took a minute
    (["--machine", "dgx-a100", "--nodes", "2"], ["--collective", "allreduce", "--size", "1M"], "json"),
    # the stated default size (64M)
    (["--machine", "dgx1v", "--gpus", "1,4,5,6"], ["--collective", "allreduce"], "json"),
    (["--machine", "dgx1v"], ["--collective", "broadcast", "--size", "1M"], "xml"),
    (["--machine", "dgx1v", "--gpus", "0,1,2,3"], ["--collective", "allgather", "--strategy", "trees",
                                                   "--size", "4M"], "xml"),
]


@pytest.mark.parametrize("topology_args,synth_args,fmt", CASES)
def test_synth_time_equals_simulate_of_the_written_file(tmp_path, capsys, topology_args, synth_args, fmt):
    path = tmp_path / f"algo.{fmt}"
    summary = synth_json(capsys, *topology_args, *synth_args, "-o", str(path))
    got = simulated_us(capsys, path, topology_args, summary["size"])
    assert summary["time_us"] == pytest.approx(got, rel=0.01)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(gpus=st.lists(st.integers(0, 7), min_size=2, max_size=8, unique=True),
       collective=st.sampled_from(["allreduce", "allgather", "reducescatter", "broadcast", "reduce"]),
       size=st.integers(1 << 10, 256 << 20))
def test_synth_time_equals_simulate_of_the_file_at_random_allocations(tmp_path, capsys, gpus, collective, size):
    topology_args = ["--machine", "dgx1v", "--gpus", ",".join(map(str, sorted(gpus)))]
    path = tmp_path / "algo.xml"
    summary = synth_json(capsys, *topology_args, "--collective", collective, "--size", str(size), "-o", str(path))
    assert summary["size"] == size
    assert summary["time_us"] == pytest.approx(simulated_us(capsys, path, topology_args, size), rel=0.01)
    assert summary["nccl_time_us"] > 0


def test_synth_without_a_size_names_the_default_it_ranked_at(capsys):
    assert main(["synth", "--machine", "dgx1v", "--gpus", "1,4,5,6"]) == 0
    out = capsys.readouterr().out
    [line] = [line for line in out.splitlines() if line.strip().startswith("simulated")]
    assert f"a call of {RANKING_SIZE} bytes" in line and "no --size given: 64M" in line
    summary = synth_json(capsys, "--machine", "dgx1v", "--gpus", "1,4,5,6")
    assert summary["size"] == RANKING_SIZE and summary["size_is_default"]


def test_synth_says_when_nccl_is_faster_in_simulation(capsys):
    # NCCL all-reduces in the NVSwitch (NVLS) on DGX H100, which an MSCCL file cannot express
    args = ["--machine", "dgx-h100", "--collective", "allreduce", "--size", "64M"]
    summary = synth_json(capsys, *args)
    assert summary["time_us"] > summary["nccl_time_us"]
    assert main(["synth", *args]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("vs NCCL")]
    assert "slower than NCCL in simulation at 64M" in line


def test_synth_says_how_much_faster_than_nccl_where_it_is(capsys):
    summary = synth_json(capsys, "--machine", "dgx1v", "--gpus", "1,4,5,6", "--size", "64M")
    assert summary["time_us"] < summary["nccl_time_us"]
    assert main(["synth", "--machine", "dgx1v", "--gpus", "1,4,5,6", "--size", "64M"]) == 0
    out = capsys.readouterr().out
    assert "slower than NCCL" not in out
    assert f"{summary['nccl_time_us'] / summary['time_us']:.2f}x faster than NCCL" in out


def test_synth_says_what_relays_the_file_cannot_express_would_gain(capsys, monkeypatch):
    # Blink's fragmented allocation: the trees at full precision relay gpu4 -> gpu5 over
    # PCIe, the XML cannot
    monkeypatch.setattr("arborcc.synth.strategies.trees.PIPELINED_MARGIN", 0.0)
    args = ("--machine", "dgx1v", "--gpus", "1,4,5,6", "--size", "64M", "--strategy", "trees")
    summary = synth_json(capsys, *args)
    assert summary["planned_time_us"] < summary["time_us"]
    [note] = [n for n in summary["notes"] if n.startswith("planned")]
    assert "cannot express" in note and f"as written {summary['time_us']:.1f} us" in note
    # by default the trees on the runtime's routes replace them there: the file runs as
    # planned, faster than the relaying trees as written
    monkeypatch.undo()
    routed = synth_json(capsys, *args)
    assert routed["planned_time_us"] is None
    assert any("on the runtime's routes" in n for n in routed["notes"]), routed["notes"]
    assert routed["time_us"] < summary["time_us"]
