"""``arborcc simulate`` times only algorithms the verifier proves correct: a file it
rejects (offsets outside the buffers, a call it claims but is wrong in, a wrong
postcondition) is one line naming the file, saying it is not correct and why (the
verifier's first finding), exit status 2, nothing simulated; a file the reader cannot
take (a negative count) is refused by the reader. ``--instances`` is bounded by the
channels MSCCL has."""

from __future__ import annotations

import re

import pytest

from arborcc.cli.main import main
from arborcc.ir.msccl_xml import write_msccl_xml
from arborcc.library.nccl_ring import ring_allreduce_algorithm
from support.cli_runs import arborcc, refused

TWO_GPUS = ["--machine", "dgx1v", "--gpus", "0,1", "--sizes", "1M"]


def ring_text() -> str:
    """NCCL's 2-rank ring all-reduce worked in its input buffer alone: correct in place,
    wrong out of place (the output is never written)."""
    text = write_msccl_xml(ring_allreduce_algorithm([[0, 1]]), "legacy")
    return text.replace('buf="o"', 'buf="i"').replace('outofplace="1"', 'outofplace="0"')


def test_the_ring_in_its_input_is_correct_in_place_only(tmp_path, capsys):
    (tmp_path / "algo.xml").write_text(ring_text())
    assert main(["verify", str(tmp_path / "algo.xml")]) == 0
    assert 'outofplace="0"' in ring_text() and 'buf="o"' not in ring_text()


#: name -> (how the valid 2-rank ring is broken, what the refusal says)
BROKEN = {
    # within the reader's chunk limit, outside the buffer: the verifier's finding
    "offset-outside-the-buffer": (lambda t: t.replace('srcoff="1"', 'srcoff="30000"', 1),
                                  r"not a correct algorithm.*outside its 2 chunks \[bounds\]"),
    # beyond any buffer arborcc can address: the reader's
    "offset-10^30": (lambda t: t.replace('srcoff="1"', 'srcoff="' + "1" + "0" * 30 + '"', 1),
                     r"srcoff: expected .*chunk offset.*got a 31-digit number"),
    "claims-out-of-place": (lambda t: t.replace('inplace="1" outofplace="0"', 'inplace="0" outofplace="1"', 1),
                            r"not a correct algorithm out-of-place.*\[postcondition\]"),
    "wrong-postcondition": (lambda t: t.replace('dstoff="0"', 'dstoff="1"', 1),
                            r"not a correct algorithm in-place.*misses chunk 0.*\[postcondition\]"),
    "negative-count": (lambda t: t.replace('cnt="1"', 'cnt="-3"', 1), r"attribute cnt: expected a chunk count.*got -3"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_simulate_refuses_an_algorithm_the_verifier_rejects(tmp_path, capsys, no_simulation, case):
    breaking, pattern = BROKEN[case]
    text = breaking(ring_text())
    assert text != ring_text()
    (tmp_path / "algo.xml").write_text(text)
    code = main(["simulate", str(tmp_path / "algo.xml"), *TWO_GPUS])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err
    assert lines[0].startswith(f"arborcc: error: {tmp_path / 'algo.xml'}:"), lines[0]
    assert re.search(pattern, lines[0]), lines[0]


def test_simulate_refuses_an_incorrect_algorithm_as_a_command(tmp_path):
    (tmp_path / "algo.xml").write_text(BROKEN["claims-out-of-place"][0](ring_text()))
    refused(arborcc("simulate", "algo.xml", *TWO_GPUS, cwd=tmp_path),
            r"^arborcc: error: algo\.xml: not a correct algorithm out-of-place, nothing simulated: ")


def test_simulate_still_times_a_correct_algorithm(tmp_path, capsys):
    (tmp_path / "algo.xml").write_text(ring_text())
    assert main(["simulate", str(tmp_path / "algo.xml"), *TWO_GPUS, "--json"]) == 0
    assert '"time_us"' in capsys.readouterr().out


@pytest.mark.parametrize("count", ["0", "-1", "33", "1000000000", "x"])
def test_simulate_instances_outside_1_to_32_are_refused(tmp_path, capsys, count):
    (tmp_path / "algo.xml").write_text(ring_text())
    code = main(["simulate", str(tmp_path / "algo.xml"), *TWO_GPUS, f"--instances={count}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--instances" in err[0], err


def test_simulate_instances_whose_channels_exceed_msccls_are_refused(tmp_path, capsys):
    two_channels = ring_allreduce_algorithm([[0, 1], [1, 0]])
    assert two_channels.num_channels == 2
    (tmp_path / "algo.xml").write_text(write_msccl_xml(two_channels, "legacy"))
    assert main(["simulate", str(tmp_path / "algo.xml"), *TWO_GPUS, "--instances", "16"]) == 0
    capsys.readouterr()
    assert main(["simulate", str(tmp_path / "algo.xml"), *TWO_GPUS, "--instances", "17"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("arborcc: error: --instances: 17 instances of 2 channels"), err
