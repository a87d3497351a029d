"""`arborcc synth` through the real entry point."""

import json

import pytest

from arborcc.cli.main import main
from arborcc.ir.load import load_algorithm
from support.execution import assert_executes
from arborcc.verify import verify_algorithm


def test_synth_json_has_the_contract_keys_and_writes_a_verified_file(tmp_path, capsys, monkeypatch):
    # the trees at full precision over every link (their candidates, which the file runs
    # faster, reach less of the bound: tests/synth/test_trees_as_written.py, as do the same
    # trees used both ways: tests/synth/test_same_trees_allreduce.py)
    monkeypatch.setattr("arborcc.synth.strategies.trees.PIPELINED_MARGIN", 0.0)
    out = tmp_path / "algo.xml"
    assert main(["synth", "--machine", "dgx1v", "--gpus", "1,4,5,6", "--collective", "allreduce",
                 "--strategy", "trees", "-o", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    for key in ("bound_gbps", "algbw_gbps", "trees", "strategy"):
        assert key in summary
    assert summary["algbw_gbps"] >= 0.99 * summary["bound_gbps"]
    algo = load_algorithm(out)
    assert algo.num_ranks == 4 and verify_algorithm(algo, "executor").ok
    assert_executes(algo)


def test_synth_text_and_show_trees(capsys):
    assert main(["synth", "--machine", "dgx1v", "--collective", "broadcast", "--links", "nvlink",
                 "--strategy", "trees", "--show-trees"]) == 0
    out = capsys.readouterr().out
    bound = next(l for l in out.splitlines() if l.strip().startswith("bound"))
    assert "150.00 GB/s" in bound
    assert out.count("root gpu0") == 6 and "gpu0 -[nvlink x2]->" in out


def test_synth_json_output_file(tmp_path, capsys):
    out = tmp_path / "algo.json"
    assert main(["synth", "--machine", "dgx-a100", "--strategy", "nccl-ring", "-o", str(out)]) == 0
    assert load_algorithm(out).collective == "allreduce"


@pytest.mark.parametrize("argv,msg", [
    (["synth", "--collective", "broadcast", "--strategy", "ring"], "allreduce only"),
    (["synth", "--gpus", "3", "--collective", "allreduce"], "at least 2"),
    (["synth", "--collective", "broadcast", "--root", "9"], "root 9 is not a rank"),
])
def test_synth_bad_requests_exit_2_with_one_line(capsys, argv, msg, tmp_path):
    assert main(argv + ["-o", str(tmp_path / "x.xml")]) == 2
    err = capsys.readouterr().err
    assert msg in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.xml").exists()


@pytest.mark.parametrize("collective", ["gather", "scatter"])
def test_synth_gather_and_scatter_write_verified_files(tmp_path, capsys, collective):
    out = tmp_path / "algo.xml"
    assert main(["synth", "--machine", "dgx1v", "--gpus", "1,4,5,6", "--collective", collective,
                 "--root", "2", "-o", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["collective"] == collective and summary["ratio"] >= 0.99
    algo = load_algorithm(out)
    assert algo.collective == collective and verify_algorithm(algo, "executor").ok
    assert_executes(algo)


def test_synth_size_selects_mxnets_single_tree(capsys):
    assert main(["synth", "--machine", "dgx1v", "--strategy", "binary-trees", "--size", "1MiB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["trees"] == 1
    assert main(["synth", "--machine", "dgx1v", "--strategy", "binary-trees", "--size", "1.5GB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["trees"] == 8


@pytest.mark.parametrize("size", ["12x", "MB", "0", "-4KB", "1e400", "nan"])
def test_synth_rejects_bad_sizes(capsys, size):
    assert main(["synth", "--machine", "dgx1v", f"--size={size}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("arborcc synth: --size: ") and len(err.splitlines()) == 1


def test_synth_inplace_writes_a_file_verified_in_place(tmp_path, capsys):
    out = tmp_path / "reduce.xml"
    assert main(["synth", "--machine", "dgx1v", "--gpus", "1,4,5,6", "--collective", "reduce",
                 "--strategy", "trees", "--inplace", "-o", str(out), "--json"]) == 0
    assert "in-place" in json.loads(capsys.readouterr().out)["modes"]
    algo = load_algorithm(out)
    assert algo.inplace and verify_algorithm(algo, "executor").ok


def test_synth_inplace_refused_when_the_verifier_cannot_prove_it(tmp_path, capsys):
    # (the trees all-gather is proved in place; the trees broadcast is not)
    out = tmp_path / "broadcast.xml"
    assert main(["synth", "--machine", "dgx1v", "--gpus", "1,4,5,6", "--collective", "broadcast",
                 "--strategy", "trees", "--inplace", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no in-place form" in err and "out-of-place only" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_synth_beyond_the_measured_scale_warns_with_the_estimate(capsys, monkeypatch):
    # the measured scale made small, so that a 4-GPU synthesis is beyond it: the warning
    # comes first, then the synthesis runs as usual
    import arborcc.cli.synth as synth_cli

    monkeypatch.setattr(synth_cli, "MEASURED_RANKS", 3)
    assert main(["synth", "--machine", "dgx1v", "--gpus", "1,4,5,6", "--collective", "allgather"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("arborcc: warning: 4 ranks is beyond the 3") and "expect minutes" in err[0]
