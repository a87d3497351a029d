"""``arborcc simulate`` and ``arborcc compare``: tables, JSON rows, plots, errors."""

import json

import pytest

from arborcc.cli.main import main
from arborcc.ir.msccl_xml import write_msccl_xml
from arborcc.library.nccl_ring import ring_allreduce_algorithm


@pytest.fixture
def ring_xml(tmp_path):
    path = tmp_path / "ring.xml"
    path.write_text(write_msccl_xml(ring_allreduce_algorithm([[0, 1, 2, 3]]), "legacy"))
    return str(path)


def test_simulate_prints_an_nccl_tests_table(ring_xml, capsys):
    assert main(["simulate", ring_xml, "--machine", "dgx1v", "--gpus", "0,1,2,3", "--sizes", "1K:1M:32"]) == 0
    out = capsys.readouterr().out
    assert "algbw" in out and "busbw" in out and "# Avg bus bandwidth" in out
    assert len([l for l in out.splitlines() if l.strip() and not l.startswith("#")]) == 3  # 1K, 32K, 1M


def test_simulate_json_rows(ring_xml, capsys):
    assert main(["simulate", ring_xml, "--machine", "dgx1v", "--gpus", "0,1,2,3", "--sizes", "64K,4M",
                 "--json", "--critical-path", "--links"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["size"] for r in data["results"]] == [65536, 4 << 20]
    for r in data["results"]:
        assert {"size", "time_us", "algbw_gbps", "busbw_gbps"} <= set(r)
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 1.5, rel=1e-3)
    assert data["critical_path"]["transfers"] > 0 and data["links"]


def test_simulate_timeline_png(ring_xml, tmp_path, capsys):
    png = tmp_path / "t.png"
    assert main(["simulate", ring_xml, "--machine", "dgx1v", "--gpus", "0,1,2,3", "--sizes", "1M",
                 "--timeline", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_rank_mismatch_is_one_line(ring_xml, capsys):
    assert main(["simulate", ring_xml, "--machine", "dgx1v", "--sizes", "1M"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--gpus" in err


def test_bad_sizes_are_one_line(ring_xml, capsys):
    assert main(["simulate", ring_xml, "--machine", "dgx1v", "--gpus", "0,1,2,3", "--sizes", "1G:1K"]) == 2
    assert "--sizes" in capsys.readouterr().err


def test_compare_json_has_strategies_and_the_nccl_baselines(capsys, tmp_path):
    png = tmp_path / "c.png"
    assert main(["compare", "--machine", "dgx1v", "--gpus", "1,4,5,6", "--sizes", "1M,64M", "--json",
                 "--strategies", "trees,nccl-ring", "--plot", str(png)]) == 0
    data = json.loads(capsys.readouterr().out)
    names = {r["strategy"] for r in data["results"]}
    assert names == {"trees", "nccl-ring", "nccl", "nccl-model"}
    for r in data["results"]:
        assert {"strategy", "size", "time_us", "algbw_gbps", "busbw_gbps"} <= set(r)
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_compare_table(capsys):
    assert main(["compare", "--machine", "dgx1v", "--gpus", "0,1,2,3", "--sizes", "1K:1M:1024",
                 "--strategies", "ring"]) == 0
    out = capsys.readouterr().out
    assert "busbw" in out and "nccl" in out and "*" in out
