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


@pytest.mark.parametrize("suffix", [".yaml", ".json", ".xml"])
def test_export_then_read_back_gives_the_same_topology(tmp_path, capsys, suffix):
    path = tmp_path / f"a100{suffix}"
    assert main(["topo", "export", "--machine", "dgx-a100", "-o", str(path)]) == 0
    original = run_json(capsys, "topo", "show", "--machine", "dgx-a100", "--json")
    again = run_json(capsys, "topo", "show", "--file", str(path), "--json")
    assert again["gpus"] == original["gpus"]
    key = lambda l: (l["src"], l["dst"])  # noqa: E731
    if suffix == ".xml":
        # NCCL XML carries no NVLink bandwidth: the reader uses NCCL's per-generation
        # lane numbers (20 GB/s for sm80) instead of the machine's nominal 25
        for l in again["links"]:
            if l["kind"] == "nvlink":
                assert l["bandwidth_gbps"] == pytest.approx(20 * l["count"])
                l["bandwidth_gbps"] = 25 * l["count"]
    assert sorted(again["links"], key=key) == sorted(original["links"], key=key)


def test_export_of_an_allocation_to_stdout_is_yaml(capsys):
    assert main(["topo", "export", "--gpus", "1,4,5,6"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("arborcc_topology: 1") and "gpu1" in out and "gpu0" not in out


def test_bad_file_writes_nothing_and_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("arborcc_topology: 1\nname: x\ndevices:\n  - {id: gpu0, kind: gpu}\n"
                   "links:\n  - {src: gpu0, dst: gpu9, kind: nvlink, bandwidth_gbps: 25}\n")
    out = tmp_path / "out.yaml"
    assert main(["topo", "export", "--file", str(bad), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml:6" in err and "gpu9 is not defined" in err
    assert not out.exists()


def test_detect_without_nvml_is_a_clear_error(capsys):
    """Commands that need the GPUs refuse; ``topo show`` shows the CPUs and says why no GPU."""
    assert main(["topo", "export", "--detect"]) == 2
    err = capsys.readouterr().err
    assert "NVML" in err or "nvidia-ml-py" in err
    assert main(["topo", "show", "--detect"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("CPUs (sysfs /sys/devices/system): ") and "GPUs (NVML): none detected: " in out
