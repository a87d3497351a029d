"""``arborcc convert``, ``arborcc compile --inplace/--outofplace`` and the modes
``arborcc verify`` names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.execution import assert_executes

from arborcc.cli.main import main
from arborcc.ir.aliasing import Mode, declared_modes
from arborcc.ir.load import load_algorithm
from arborcc.ir.msccl_xml import write_msccl_xml
from arborcc.library import ring_allreduce
from arborcc.verify import verify_algorithm

SAMPLES = Path(__file__).parents[1] / "ir" / "samples" / "msccl-tools"
#: deadlocks once the runtimes cut its 4-chunk exchanges into pieces (Simple, large buffers)
PIECES_DEADLOCK = "legacy__allgather_recursive_doubling_8_1.xml"
LEGACY = sorted(p for p in SAMPLES.glob("legacy__*.xml") if "custom" not in p.name and "alltonext" not in p.name
                and "pipeline" not in p.name and p.name != PIECES_DEADLOCK)


@pytest.mark.parametrize("path", LEGACY, ids=lambda p: p.stem)
def test_every_legacy_file_converts_to_a_verified_executor_file(path, tmp_path, capsys):
    out = tmp_path / "out.xml"
    assert main(["convert", str(path), "-o", str(out)]) == 0
    assert "for the executor runtimes" in capsys.readouterr().out
    head = out.read_text().splitlines()[0]
    assert 'outofplace="' in head and 'minBytes="0"' in head and 'maxBytes="0"' in head
    assert main(["verify", str(out), "--dialect", "executor"]) == 0
    assert declared_modes(load_algorithm(out)) == declared_modes(load_algorithm(path))


def test_convert_spreads_long_thread_blocks_over_channels(tmp_path, capsys):
    legacy = tmp_path / "ring.xml"
    legacy.write_text(write_msccl_xml(ring_allreduce(40).algorithm, "legacy"))  # 79 steps per thread block
    assert main(["verify", str(legacy), "--dialect", "executor"]) == 2  # lacks the executors' attributes
    limits = verify_algorithm(load_algorithm(legacy), "executor").violations
    assert limits and all(v.kind == "limit" for v in limits) and "79 steps; at most 64" in str(limits[0])
    out = tmp_path / "ring-executor.xml"
    assert main(["convert", str(legacy), "-o", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["channels_before"] == 1 and summary["channels"] == 2 and summary["modes"] == ["in-place"]
    assert main(["verify", str(out), "--dialect", "executor"]) == 0
    assert_executes(load_algorithm(out))


def test_convert_says_why_it_cannot_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out.xml"
    custom = SAMPLES / "legacy__alltonext_forward_2_1.xml"
    assert main(["convert", str(custom), "-o", str(out)]) == 2
    assert "the executor runtimes have no collective 'custom'" in capsys.readouterr().err
    wrong = SAMPLES / "legacy__pipeline_a100_ring_8_1_1.xml"
    assert main(["convert", str(wrong), "-o", str(out)]) == 2
    assert "cannot be converted: the algorithm is not correct in-place" in capsys.readouterr().err
    # partners send each other 4 chunks before receiving on one thread block: 8 Simple
    # slices for a FIFO of 4 once a step is cut into one piece per chunk
    assert main(["convert", str(SAMPLES / PIECES_DEADLOCK), "-o", str(out)]) == 2
    assert "steps cut into pieces" in capsys.readouterr().err
    in_place = SAMPLES / "legacy__allreduce_a100_ring_4_1_1.xml"
    assert main(["convert", str(in_place), "--outofplace", "-o", str(out)]) == 2
    assert "not correct out-of-place" in capsys.readouterr().err
    assert not out.exists()
    assert main(["convert", str(custom), "--dialect", "legacy", "-o", str(out)]) == 0  # custom stays legacy


def test_convert_to_the_legacy_dialect_and_back(tmp_path):
    executor = SAMPLES / "executor__reducescatter_allpairs_4.xml"
    legacy, again = tmp_path / "l.xml", tmp_path / "e.xml"
    assert main(["convert", str(executor), "--dialect", "legacy", "-o", str(legacy)]) == 0
    assert 'coll="reduce_scatter"' in legacy.read_text().splitlines()[0]
    assert main(["convert", str(legacy), "-o", str(again)]) == 0
    assert again.read_text() == executor.read_text()


def test_compile_claims_and_the_inplace_options(tmp_path, capsys):
    out = tmp_path / "a.xml"
    assert main(["compile", "ring-allreduce", "--ranks", "4", "--outofplace", "-o", str(out)]) == 0
    assert declared_modes(load_algorithm(out)) == (Mode.OUTOFPLACE, Mode.INPLACE)  # correct in both
    assert main(["compile", "ring-allgather", "--ranks", "4", "--outofplace", "-o", str(out)]) == 0
    assert declared_modes(load_algorithm(out)) == (Mode.OUTOFPLACE,)  # in place its own-block copy races
    assert main(["compile", "ring-allgather", "--ranks", "4", "--inplace", "-o", str(out)]) == 0
    assert declared_modes(load_algorithm(out)) == (Mode.INPLACE,)
    capsys.readouterr()
    assert main(["compile", "twostep-alltoall", "--inplace", "-o", str(tmp_path / "b.xml")]) == 2
    assert "has no in-place form" in capsys.readouterr().err
    assert not (tmp_path / "b.xml").exists()


def test_verify_names_the_modes(tmp_path, capsys):
    path = SAMPLES / "legacy__allreduce_a100_ring_4_1_1.xml"
    assert main(["verify", str(path)]) == 0
    assert "allreduce on 4 ranks, 28 steps, in-place)" in capsys.readouterr().out
    both = tmp_path / "both.xml"
    both.write_text(path.read_text().replace('inplace="1"', 'inplace="1" outofplace="1"'))
    assert main(["verify", str(both), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["modes"] == ["out-of-place", "in-place"] and report["failed_modes"] == ["out-of-place"]
    assert report["violations"][0]["message"].startswith("out-of-place call: declares 0 output chunks")
