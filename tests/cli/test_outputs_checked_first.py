"""Output flags of simulate, compare, tune, synth and bench are checked before the work:
an image output (``--timeline``, ``--plot``, ``--trees-png``) with a suffix no image
format has, ``-``, a directory or a path under a file, and a ``tune -o`` that is not a
folder, are one line and exit status 2 with nothing simulated; missing folders are
created as for ``-o``. In process (``main``), with the work itself replaced by a
function that fails the test if it is reached."""

from __future__ import annotations

import json

import pytest

from arborcc.cli.main import main
from arborcc.ir.msccl_xml import write_msccl_xml
from arborcc.library.nccl_ring import ring_allreduce_algorithm
from support.cli_runs import arborcc, refused

pytest.importorskip("matplotlib")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
#: the function each command's work starts with (module, attribute)
WORK = {
    "simulate": ("arborcc.sim.simulate", "simulate"),
    "compare": ("arborcc.tune.compare", "compare"),
    "tune": ("arborcc.tune.search", "tune"),
    "synth": ("arborcc.synth", "synthesize"),
    "bench": ("arborcc.bench.cli", "run_backend"),
}
#: modules that import one of those functions by name when they are loaded
BINDERS = ("arborcc.bench.cli", "arborcc.tune.compare", "arborcc.tune.search", "arborcc.tune.plan_writer",
           "arborcc.tune.nccl", "arborcc.sim.timeline", "arborcc.synth.synthesis")


@pytest.fixture
def ring_xml(tmp_path):
    path = tmp_path / "ring.xml"
    path.write_text(write_msccl_xml(ring_allreduce_algorithm([[0, 1, 2, 3]]), "legacy"))
    return str(path)


@pytest.fixture
def no_work(monkeypatch):
    """Make every command's work fail the test: a refusal must come before it."""
    import importlib

    def forbid(*args, **kwargs):
        raise AssertionError("the work started before the outputs were checked")

    for module in BINDERS:  # loaded first, so that none of them binds the stand-in for good
        importlib.import_module(module)
    for module, name in WORK.values():
        monkeypatch.setattr(importlib.import_module(module), name, forbid)


def command(name: str, ring: str, flag: str, path: str) -> list[str]:
    small = ["--machine", "dgx1v", "--gpus", "0,1,2,3"]
    return {
        "simulate": ["simulate", ring, *small, "--sizes", "1M", flag, path],
        "compare": ["compare", *small, "--sizes", "1M", "--strategies", "ring", flag, path],
        "synth": ["synth", *small, flag, path],
        "bench": ["bench", "-b", "4K", "-e", "4K", "--no-membw", flag, path],
    }[name]


IMAGE_FLAGS = [("simulate", "--timeline"), ("compare", "--plot"), ("synth", "--trees-png"), ("bench", "--plot")]


def one_line_refusal(capsys, code: int, *needles: str) -> str:
    captured = capsys.readouterr()
    assert code == 2, captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.mark.parametrize("name, flag", IMAGE_FLAGS)
@pytest.mark.parametrize("suffix", [".txt", ".jpgx", ".xml"])
def test_an_image_output_with_an_unknown_suffix_is_refused_before_the_work(tmp_path, ring_xml, capsys, no_work,
                                                                           name, flag, suffix):
    path = str(tmp_path / f"out{suffix}")
    code = main(command(name, ring_xml, flag, path))
    one_line_refusal(capsys, code, flag, f"'{suffix}'", ".png, .svg or .pdf")
    assert not (tmp_path / f"out{suffix}").exists()


@pytest.mark.parametrize("name, flag", IMAGE_FLAGS)
def test_an_image_output_naming_a_directory_is_refused_before_the_work(tmp_path, ring_xml, capsys, no_work,
                                                                       name, flag):
    (tmp_path / "plots").mkdir()
    code = main(command(name, ring_xml, flag, str(tmp_path / "plots")))
    one_line_refusal(capsys, code, "plots: is a directory")
    assert list((tmp_path / "plots").iterdir()) == [] and not (tmp_path / "plots.png").exists()


@pytest.mark.parametrize("name, flag", IMAGE_FLAGS)
def test_an_image_output_under_a_file_is_refused_before_the_work(tmp_path, ring_xml, capsys, no_work, name, flag):
    (tmp_path / "afile").write_text("x")
    code = main(command(name, ring_xml, flag, str(tmp_path / "afile" / "p.png")))
    one_line_refusal(capsys, code, "afile is a file")


@pytest.mark.parametrize("name, flag", IMAGE_FLAGS)
def test_an_image_output_to_standard_output_is_refused_before_the_work(ring_xml, capsys, no_work, name, flag):
    one_line_refusal(capsys, main(command(name, ring_xml, flag, "-")), flag, "not to standard output")


@pytest.mark.parametrize("name, flag", [("simulate", "--timeline"), ("compare", "--plot")])
@pytest.mark.parametrize("file, magic", [("p.png", PNG_MAGIC), ("p.svg", b"<?xml"), ("p.pdf", b"%PDF")])
def test_an_image_output_into_missing_folders_creates_them(tmp_path, ring_xml, capsys, name, flag, file, magic):
    path = tmp_path / "new" / "sub" / file
    assert main(command(name, ring_xml, flag, str(path))) == 0, capsys.readouterr().err
    assert path.read_bytes().startswith(magic)
    assert f"wrote {path}" in capsys.readouterr().out


def test_an_image_output_without_a_suffix_is_png_under_exactly_that_name(tmp_path, ring_xml, capsys):
    assert main(command("simulate", ring_xml, "--timeline", str(tmp_path / "timeline"))) == 0
    assert (tmp_path / "timeline").read_bytes().startswith(PNG_MAGIC)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ring.xml", "timeline"]


def test_synth_trees_drawing_takes_the_format_of_its_suffix(tmp_path, capsys):
    path = tmp_path / "trees.svg"
    assert main(["synth", "--machine", "dgx1v", "--gpus", "0,1,2,3", "--strategy", "trees",
                 "--trees-png", str(path)]) == 0
    assert path.read_bytes().startswith(b"<?xml")


@pytest.mark.parametrize("target", ["file", "/dev/null", "-", "under-a-file"])
def test_tune_output_that_is_not_a_folder_is_refused_before_any_simulation(tmp_path, capsys, no_work, target):
    (tmp_path / "plan.json").write_text("{}")
    path = {"file": str(tmp_path / "plan.json"), "under-a-file": str(tmp_path / "plan.json" / "plan")}.get(target,
                                                                                                          target)
    code = main(["tune", "--machine", "dgx1v", "--gpus", "0,1,2,3", "--sizes", "1M", "-o", path])
    line = one_line_refusal(capsys, code)
    assert ("folder" in line) and (path in line or "-o" in line)
    assert (tmp_path / "plan.json").read_text() == "{}"


def test_tune_output_into_a_missing_folder_creates_it(tmp_path, capsys):
    plan = tmp_path / "new" / "plan"
    assert main(["tune", "--machine", "dgx1v", "--gpus", "0,1,2,3", "--sizes", "1M", "--strategies", "ring",
                 "--instances", "1", "-o", str(plan)]) == 0
    index = json.loads((plan / "plan.json").read_text())
    assert [e["file"] for e in index["algorithms"]] and all((plan / e["file"]).is_file() for e in index["algorithms"])


def test_tune_onto_dev_null_is_one_line_as_a_command(tmp_path):
    refused(arborcc("tune", "--machine", "dgx1v", "--gpus", "0,1,2,3", "--sizes", "1K:1G", "-o", "/dev/null",
                    cwd=tmp_path), r"^arborcc: error: /dev/null: is not a folder")


def test_an_unknown_plot_suffix_is_one_line_as_a_command(tmp_path):
    refused(arborcc("compare", "--machine", "dgx1v", "--gpus", "0,1,2,3", "--sizes", "1K:1G", "--plot", "out.txt",
                    cwd=tmp_path), r"^arborcc: error: --plot: out\.txt: '\.txt' is not an image suffix")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("held", ["plan.json", "allreduce-0-ring-x1-Simple.xml", "mine.XML"])
def test_tune_output_into_a_folder_holding_a_plan_is_refused_before_any_simulation(tmp_path, capsys, no_work, held):
    """An MSCCL runtime loads every .xml file of its folder: the old files would be chosen among the new."""
    (tmp_path / "plan").mkdir()
    (tmp_path / "plan" / held).write_text("old")
    code = main(["tune", "--machine", "dgx1v", "--gpus", "0,1,2,3", "--sizes", "1M", "-o", str(tmp_path / "plan")])
    line = one_line_refusal(capsys, code, f"{tmp_path / 'plan'}: already holds", held, "new or empty folder")
    assert (tmp_path / "plan" / held).read_text() == "old" and line


def test_tune_output_into_an_empty_or_unrelated_folder_is_written(tmp_path, capsys):
    (tmp_path / "plan").mkdir()
    (tmp_path / "plan" / "notes.txt").write_text("mine")
    assert main(["tune", "--machine", "dgx1v", "--gpus", "0,1,2,3", "--sizes", "1M", "--strategies", "ring",
                 "--instances", "1", "-o", str(tmp_path / "plan")]) == 0
    assert (tmp_path / "plan" / "plan.json").is_file() and (tmp_path / "plan" / "notes.txt").read_text() == "mine"
