"""The size flags of simulate, compare, tune (``--sizes``) and synth (``--size``) read
:mod:`arborcc.sizes`' one syntax: infinite, overflowing and empty sizes are one line
naming the flag, exit status 2; ``64M`` and ``1GB`` (= ``1G``) work."""

from __future__ import annotations

import json

import pytest

from arborcc.cli.main import main
from arborcc.ir.msccl_xml import write_msccl_xml
from arborcc.library.nccl_ring import ring_allreduce_algorithm

SMALL = ["--machine", "dgx1v", "--gpus", "0,1,2,3"]


@pytest.fixture
def ring_xml(tmp_path):
    path = tmp_path / "ring.xml"
    path.write_text(write_msccl_xml(ring_allreduce_algorithm([[0, 1, 2, 3]]), "legacy"))
    return str(path)


def sizes_command(name: str, ring: str, sizes: str) -> list[str]:
    return {"simulate": ["simulate", ring, *SMALL],
            "compare": ["compare", *SMALL, "--strategies", "ring"],
            "tune": ["tune", *SMALL, "--strategies", "ring"]}[name] + [f"--sizes={sizes}"]


@pytest.mark.parametrize("name", ["simulate", "compare", "tune"])
@pytest.mark.parametrize("sizes, problem", [
    ("inf", "not a size: 'inf'"),
    ("1K:inf", "not a size: 'inf'"),
    ("1:1e400", "'1e400' is over the largest size"),
    ("", "no size given"),
    ("nan", "not a size: 'nan'"),
    ("1K:1M:1", "the factor must be a finite number greater than 1"),
])
def test_sizes_that_are_not_sizes_are_one_line_naming_the_flag(ring_xml, capsys, name, sizes, problem):
    code = main(sizes_command(name, ring_xml, sizes))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("arborcc: error: --sizes: ") and problem in err[0], err


@pytest.mark.parametrize("name", ["simulate", "compare", "tune"])
def test_a_sweep_gives_a_row_per_size(ring_xml, capsys, name):
    assert main(sizes_command(name, ring_xml, "1K:1M:32") + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    if name == "tune":
        sizes = {r["size"] for b in out["buckets"] for r in b["results"]}
    else:
        sizes = {r["size"] for r in out["results"]}
    assert sizes == {1024, 32768, 1 << 20}


def synth_json(capsys, tmp_path, size: str) -> tuple[dict, str]:
    out = tmp_path / f"{size}.xml"
    assert main(["synth", *SMALL, "--strategy", "binary-trees", "--size", size, "-o", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    for key in ("synth_seconds", "output"):
        summary.pop(key)
    return summary, out.read_text()


def test_synth_size_64m_works(tmp_path, capsys):
    summary, text = synth_json(capsys, tmp_path, "64M")
    assert summary["ok"] and text.startswith("<algo")


def test_synth_size_1gb_is_1g(tmp_path, capsys):
    assert synth_json(capsys, tmp_path, "1GB") == synth_json(capsys, tmp_path, "1G")


def test_synth_size_below_and_above_mxnets_threshold_differ(tmp_path, capsys):
    """--size reaches the strategy: binary-trees uses one tree below 40 MB (so the two
    tests above compare something that depends on the size)."""
    small, _ = synth_json(capsys, tmp_path, "1M")
    large, _ = synth_json(capsys, tmp_path, "1G")
    assert small["trees"] != large["trees"]


@pytest.mark.parametrize("size, problem", [("inf", "not a size"), ("1e400", "over the largest size"),
                                           ("", "not a size"), ("0", "at least 1 byte")])
def test_synth_size_that_is_not_a_size_is_one_line(capsys, size, problem):
    assert main(["synth", *SMALL, f"--size={size}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--size" in err[0] and problem in err[0], err
