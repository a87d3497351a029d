"""Files written by the public GC3 tools (samples/msccl-tools, see its README): the right
verdict on every one, in the mode each claims; their in-place runs on the reference
executor equal numpy; hand-made wrong variants are rejected with the right violation;
conversion between the dialects keeps their meaning."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import numpy as np
import pytest
from support.execution import alltonext_reference, assert_executes

from arborcc.ir.aliasing import Mode, declared_modes, with_modes
from arborcc.ir.convert import ConversionError, convert_for_dialect
from arborcc.ir.load import load_algorithm
from arborcc.ir.model import Op
from arborcc.ir.msccl_xml import read_msccl_xml, write_msccl_xml
from arborcc.ir.reference import make_inputs, run
from arborcc.verify import claiming_supported_modes, verify_algorithm

SAMPLES = Path(__file__).parent / "samples" / "msccl-tools"
FILES = sorted(SAMPLES.glob("*.xml"))
#: the tool's own Check() rejects this program's algorithm too (see the README)
WRONG = {"legacy__pipeline_a100_ring_8_1_1.xml"}
#: the seven files of the project's reference material and the calls they are for
REFERENCE = {
    "legacy__allreduce_a100_ring_4_1_1.xml": ["in-place"],
    "legacy__allgather_ring_4_1_1.xml": ["in-place"],
    "legacy__alltoall_allpairs_4_1.xml": ["out-of-place"],
    "executor__allreduce_a100_ring_4_2_1.xml": ["in-place"],
    "executor__allgather_ring_4_1_2.xml": ["in-place"],
    "executor__allgather_recursive_doubling_4_1.xml": ["in-place"],
    "executor__reducescatter_allpairs_4.xml": ["in-place"],
}


def _alltonext_backward(inputs):
    """What the tools' alltonext_backward leaves: rank r holds rank r+1's input."""
    return [inputs[r + 1].copy() for r in range(len(inputs) - 1)] + [None]


def _rank0_to_all(inputs):
    """What the tools' simple/custom_collective leaves: every other rank holds rank 0's input."""
    return [None] + [inputs[0].copy() for _ in inputs[1:]]


#: the numpy results of the custom collectives of the tools' examples (by program)
CUSTOM_RESULTS = {"alltonext_forward": alltonext_reference, "alltonext_backward": _alltonext_backward,
                  "simple_custom_collective": _rank0_to_all}


def _dialect(path: Path) -> str:
    return path.name.split("__")[0]


def _load(name: str):
    path = SAMPLES / name
    return load_algorithm(path, dialect=_dialect(path))


def test_the_reference_samples_are_all_here():
    assert set(REFERENCE) <= {p.name for p in FILES}


#: correct as messages, but partners send each other 4 chunks before receiving on one
#: thread block: in Simple on large buffers the runtimes cut that into 4 pieces of 2
#: FIFO slices each, for a FIFO of 4 - a deadlock (verify/pieces.py)
PIECES_DEADLOCK = {"legacy__allgather_recursive_doubling_8_1.xml"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_public_tool_file_gets_the_right_verdict(path):
    algo = load_algorithm(path, dialect=_dialect(path))  # with the dialect's required attributes
    report = verify_algorithm(algo, _dialect(path))
    if path.name in PIECES_DEADLOCK:
        assert not report.ok and report.violations[0].kind == "deadlock"
        assert "steps cut into pieces" in report.violations[0].message
        report = verify_algorithm(algo, _dialect(path), pieces=False)
    if path.name in WRONG:
        assert not report.ok and report.failed_modes == ["in-place"]
        assert report.violations[0].kind == "postcondition"
        assert str(report.violations[0]).startswith("rank 0: in-place call: output chunk 0 misses chunk 0 of ranks")
    else:
        assert report.ok, report.summary()
        assert report.postcondition_checked == (algo.collective != "custom")
    if path.name in REFERENCE:
        assert report.modes == REFERENCE[path.name]


@pytest.mark.parametrize("path", [p for p in FILES if p.name not in WRONG], ids=lambda p: p.stem)
def test_correct_files_run_on_the_reference_executor_in_their_modes(path):
    algo = load_algorithm(path)
    expected = CUSTOM_RESULTS.get(re.sub(r"(_\d+)+$", "", path.stem.split("__")[1]))
    if algo.collective == "custom" and expected is None:
        pytest.fail(f"no numpy result written for the custom collective of {path.name}")
    assert_executes(algo, expected)  # every claimed mode, in-place ones on aliased buffers


def test_in_place_runs_really_alias_the_buffers():
    # the in-place all-reduce ring writes only 'i' and declares 0 output chunks: run
    # out-of-place (separate buffers) its result buffer stays empty (NaN)
    algo = _load("legacy__allreduce_a100_ring_4_1_1.xml")
    assert declared_modes(algo) == (Mode.INPLACE,)
    inputs = make_inputs(algo, elems=2, seed=4)
    assert all(np.allclose(out, sum(inputs)) for out in run(algo, inputs, mode=Mode.INPLACE))
    assert all(np.isnan(out).all() for out in run(algo, inputs, mode=Mode.OUTOFPLACE))


# --- hand-made wrong variants -----------------------------------------------------------
def test_a_dropped_receive_breaks_its_connection():
    algo = copy.deepcopy(_load("legacy__allreduce_a100_ring_4_1_1.xml"))
    tb = algo.ranks[1].threadblocks[0]
    i = next(i for i, st in enumerate(tb.steps) if st.op.receives)
    del tb.steps[i]
    report = verify_algorithm(algo)
    assert not report.ok
    assert any(v.kind == "connection" and "sending steps but" in v.message for v in report.violations)


def test_a_dropped_message_leaves_a_wrong_result():
    algo = copy.deepcopy(_load("legacy__alltoall_allpairs_4_1.xml"))
    # drop one message whole: rank 0's last send to rank 1 and rank 1's last receive from 0
    sender = next(tb for tb in algo.ranks[0].threadblocks if tb.send == 1)
    receiver = next(tb for tb in algo.ranks[1].threadblocks if tb.recv == 0 and tb.channel == sender.channel)
    assert not any(st.has_dep for st in sender.steps + receiver.steps)  # nothing waits on their steps
    del sender.steps[max(i for i, st in enumerate(sender.steps) if st.op is Op.SEND)]
    received = receiver.steps.pop(max(i for i, st in enumerate(receiver.steps) if st.op is Op.RECV))
    report = verify_algorithm(algo)
    assert [v.kind for v in report.violations] == ["postcondition"]
    assert str(report.violations[0]).startswith(
        f"rank 1: out-of-place call: output chunk {received.dst_off} is uninitialized (never written)")


def test_an_out_of_place_file_claimed_in_place_races_on_the_aliased_buffer():
    algo = with_modes(_load("legacy__alltoall_allpairs_4_1.xml"), (Mode.OUTOFPLACE, Mode.INPLACE))
    report = verify_algorithm(algo)
    assert report.modes == ["out-of-place", "in-place"] and report.failed_modes == ["in-place"]
    assert report.violations[0].kind == "race"
    assert "in-place call: race: reads input chunk 0 = output chunk 0" in str(report.violations[0])


def test_an_in_place_file_claimed_out_of_place_is_refused_for_that_call():
    algo = with_modes(_load("legacy__allgather_ring_4_1_1.xml"), (Mode.OUTOFPLACE, Mode.INPLACE))
    report = verify_algorithm(algo)
    assert report.failed_modes == ["out-of-place"]
    assert str(report.violations[0]) == ("rank 0: out-of-place call: declares 0 input chunks but allgather on 4 "
                                         "ranks with 4 chunks per loop has 1")


@pytest.mark.parametrize("name, modes", [("legacy__allreduce_a100_ring_4_1_1.xml", (Mode.INPLACE,)),
                                         ("legacy__alltoall_allpairs_4_1.xml", (Mode.OUTOFPLACE,)),
                                         ("legacy__simple_custom_collective_1.xml", (Mode.OUTOFPLACE, Mode.INPLACE))])
def test_claims_are_rewritten_to_exactly_the_calls_the_verifier_proves(name, modes):
    unclaimed = with_modes(_load(name), ())  # claims nothing: every mode must be proved
    assert declared_modes(claiming_supported_modes(unclaimed)) == modes


def test_a_missing_dependency_makes_a_race():
    algo = copy.deepcopy(_load("executor__reducescatter_allpairs_4.xml"))
    tb = algo.ranks[0].threadblocks[0]  # waits (nop steps) for the receives, then reduces
    tb.steps = [st for st in tb.steps if st.op is not Op.NOP]
    for st in tb.steps:
        st.dep = None
    kinds = {v.kind for v in verify_algorithm(algo).violations}
    assert {"race", "uninitialized"} <= kinds


# --- legacy <-> executor ----------------------------------------------------------------
@pytest.mark.parametrize("path", [p for p in FILES if p.name not in WRONG], ids=lambda p: p.stem)
def test_round_trips_between_the_dialects_keep_the_meaning(path):
    algo = load_algorithm(path)
    other = "executor" if _dialect(path) == "legacy" else "legacy"
    if algo.collective == "custom" and other == "executor":
        with pytest.raises(ConversionError, match="no collective 'custom'"):
            convert_for_dialect(algo, other)
        return
    there = read_msccl_xml(write_msccl_xml(convert_for_dialect(algo, other), other), dialect=other)
    back = read_msccl_xml(write_msccl_xml(convert_for_dialect(there, _dialect(path)), _dialect(path)),
                          dialect=_dialect(path))
    for version, dialect in ((there, other), (back, _dialect(path))):
        report = verify_algorithm(version, dialect, pieces=path.name not in PIECES_DEADLOCK)
        assert report.ok, report.summary()
        assert declared_modes(version) == declared_modes(algo)
    if algo.collective == "custom":
        return
    inputs = make_inputs(algo, elems=3, seed=7)
    for mode in declared_modes(algo):
        want = run(algo, inputs, mode=mode)
        for version in (there, back):
            assert all(np.array_equal(a, b) for a, b in zip(run(version, inputs, mode=mode), want))
