"""`arborcc topo ...` and `arborcc demo` through the real entry point."""

import json
import subprocess
import sys

import pytest

from arborcc.cli.main import main


def run_json(capsys, *argv):
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_topo_show_json_carries_gpus_and_links(capsys):
    out = run_json(capsys, "topo", "show", "--machine", "dgx1v", "--gpus", "1,4,5,6", "--json")
    assert out["gpus"] == ["gpu1", "gpu4", "gpu5", "gpu6"]
    nv = {(l["src"], l["dst"]): l for l in out["links"] if l["kind"] == "nvlink"}
    assert nv[("gpu1", "gpu5")]["count"] == 2 and nv[("gpu1", "gpu5")]["bandwidth_gbps"] == 50
    assert ("gpu1", "gpu4") not in nv
    assert out["matrix"]["gpu1"]["gpu4"] == "SYS"


def test_topo_show_text_matrix_first_row(capsys):
    assert main(["topo", "show", "--machine", "dgx1v"]) == 0
    row = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("GPU0 "))
    # the reference's nvidia-smi row for DGX-1V (GPUs then the 4 NICs)
    assert row.split() == "GPU0 X NV1 NV1 NV2 NV2 SYS SYS SYS PIX SYS PHB SYS".split()


def test_topo_classes_json_counts(capsys):
    assert run_json(capsys, "topo", "classes", "--machine", "dgx1v", "--min-gpus", "3", "--max-gpus", "8",
                    "--json")["count"] == 46
    out = run_json(capsys, "topo", "classes", "--machine", "dgx1p", "--json")
    assert out["count"] == 14 and len(out["classes"]) == 14


def test_bandwidth_override_flags(capsys):
    out = run_json(capsys, "topo", "show", "--machine", "dgx-a100", "--nvlink-gbps", "20", "--json")
    link = next(l for l in out["links"] if l["src"] == "gpu0" and l["dst"] == "nvswitch0")
    assert link["bandwidth_gbps"] == 240


def test_cluster_flag(capsys):
    out = run_json(capsys, "topo", "show", "--machine", "dgx-a100", "--nodes", "2", "--json")
    assert len(out["gpus"]) == 16 and out["matrix"]["n0.gpu0"]["n1.gpu0"] == "NET"


@pytest.mark.parametrize("argv,msg", [
    (["topo", "show", "--machine", "nope"], "unknown machine"),
    (["topo", "show", "--gpus", "0,8"], "GPU 8 does not exist"),
    (["topo", "show", "--nvlink-gbps", "-3"], "must be positive"),
    (["topo", "show", "--machine", "hierarchy:4@x"], "FANOUT@GBPS"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, msg):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert msg in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_console_script_reports_errors_without_traceback():
    p = subprocess.run([sys.executable, "-m", "arborcc.cli.main", "topo", "show", "--gpus", "x"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr and "--gpus" in p.stderr


def test_demo_runs_on_the_default(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "dgx1v[1,4,5,6]" in out and "46 classes" in out
