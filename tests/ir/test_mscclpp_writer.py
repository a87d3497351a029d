"""The MSCCL++ plan writer: what it writes obeys MSCCL++'s parser rules (the reader is the
checker, arborcc.ir.mscclpp.rules), reads back to an algorithm that verifies and computes
what numpy computes, for Simple and LL, several thread blocks and channels, in and out of
place; the FIFO's back-pressure becomes scratch slots and semaphore credits within the
64 MB scratch budget; long thread blocks become continuations; the command line writes
plans and reads them."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborcc.errors import InputError
from arborcc.ir.aliasing import Mode, declared_modes
from arborcc.ir.convert import convert_for_mscclpp
from arborcc.ir.model import Protocol
from arborcc.ir.mscclpp import rules
from arborcc.ir.mscclpp.plan import plan_from_document
from arborcc.ir.mscclpp.translate import plan_to_algorithm
from arborcc.ir.mscclpp.writer import PlanWriteError, plan_document, write_mscclpp_plan
from arborcc.library import LIBRARY
from arborcc.verify import verify_algorithm
from support.cli_runs import arborcc, refused
from support.execution import assert_executes

CASES = [("ring-allreduce", dict(ranks=4)), ("ring-allreduce", dict(ranks=3, channels=2)),
         ("allpairs-allreduce", dict(ranks=4)), ("hd-allreduce", dict(ranks=4)),
         ("ring-allgather", dict(ranks=4)), ("ring-allgather", dict(ranks=4, inplace=True)),
         ("ring-reducescatter", dict(ranks=4)), ("twostep-alltoall", dict(nodes=2, gpus_per_node=2)),
         ("hierarchical-allreduce", dict(nodes=2, gpus_per_node=2)), ("ring-allreduce", dict(ranks=4, instances=2))]


def library(index: int, protocol: Protocol = Protocol.SIMPLE):
    name, params = CASES[index]
    return dataclasses.replace(LIBRARY[name](**params).algorithm, protocol=protocol)


def read_back(text: str):
    return plan_to_algorithm(plan_from_document(json.loads(text), "plan.json"), "plan.json")


def operations(doc: dict):
    return [op for g in doc["gpus"] for tb in g["threadblocks"] for op in tb["ops"]]


@pytest.mark.parametrize("protocol", [Protocol.SIMPLE, Protocol.LL])
@pytest.mark.parametrize("index", range(len(CASES)))
def test_written_plans_follow_mscclpp_rules_and_compute_the_collective(index, protocol):
    algo = library(index, protocol)
    for mode in declared_modes(algo):
        for slots in (8, 1):
            text = write_mscclpp_plan(convert_for_mscclpp(algo), mode, slots=slots)
            doc = json.loads(text)
            assert doc["protocol"] == protocol.value and doc["inplace"] == (mode is Mode.INPLACE)
            assert all(op["name"] in rules.OPERATIONS for op in operations(doc))
            assert all(len(tb["ops"]) <= rules.MAX_OPERATIONS_PER_THREADBLOCK
                       for g in doc["gpus"] for tb in g["threadblocks"])
            back = read_back(text)  # the reader checks every rule of MSCCL++'s parser
            report = verify_algorithm(back, modes=(mode,))
            assert report.ok, report.violations[:1]
            assert_executes(back, modes=(mode,))


def test_simple_sends_are_puts_with_signals_and_receives_are_waits():
    doc = plan_document(library(0), Mode.INPLACE)
    for g in doc["gpus"]:
        for tb in g["threadblocks"]:
            ops = [op["name"] for op in tb["ops"]]
            for i, name in enumerate(ops):
                if name in ("put", "res"):
                    assert ops[i + 1:i + 3] == ["nop", "signal"]
                if name == "wait":
                    assert ops[i + 1] == "nop"
    assert doc["gpus"][0]["channels"] == [{"channel_type": "memory", "connected_to": [1]},
                                          {"channel_type": "memory", "connected_to": [3]}]


def test_ll_plans_use_packets_and_no_signals():
    doc = plan_document(library(0, Protocol.LL), Mode.INPLACE)
    names = Counter(op["name"] for op in operations(doc))
    assert names["ppkt"] > 0 and names["signal"] == names["wait"] == 0
    assert doc["use_double_scratch_buffer"] is True


def test_few_slots_become_semaphore_credits():
    algo = library(0)
    for slots, credits in ((1, True), (64, False)):
        names = Counter(op["name"] for op in operations(plan_document(algo, Mode.INPLACE, slots=slots)))
        messages = names["put"] + names["res"]  # each published by one signal and awaited by one wait
        assert names["signal"] == names["wait"]
        assert (names["wait"] > messages) == credits  # the rest are credits


def test_the_plan_scratch_fits_mscclpp_64_mb_at_its_largest_size():
    for protocol, factor in ((Protocol.SIMPLE, 1), (Protocol.LL, 4)):
        doc = plan_document(library(0, protocol), Mode.INPLACE)
        for g in doc["gpus"]:
            chunk = doc["max_message_size"] // g["input_chunks"]
            assert chunk * g["scratch_chunks"] * factor <= rules.SCRATCH_BYTES
        assert doc["max_message_size"] > 0


def test_an_algorithm_whose_scratch_cannot_fit_at_its_smallest_size_is_refused():
    algo = dataclasses.replace(library(0), min_bytes=2**40)
    with pytest.raises(PlanWriteError) as e:
        plan_document(algo, Mode.INPLACE)
    assert "64 MB scratch" in str(e.value) and "\n" not in str(e.value)


def test_long_thread_blocks_become_continuations_that_read_back_as_one():
    algo = LIBRARY["ring-allreduce"](ranks=8).algorithm  # 8-rank ring: thread blocks of 14+ steps
    doc = plan_document(algo, Mode.INPLACE, slots=1)
    assert len(doc["gpus"][0]["threadblocks"]) > len(algo.ranks[0].threadblocks)
    assert all(len(tb["ops"]) <= rules.MAX_OPERATIONS_PER_THREADBLOCK
               for g in doc["gpus"] for tb in g["threadblocks"])
    back = read_back(json.dumps(doc))
    assert verify_algorithm(back, modes=(Mode.INPLACE,)).ok


def channels_between(algo) -> dict[tuple[int, int], int]:
    """(sender, receiver) -> the channels the algorithm needs between them: its highest
    channel index plus one (the runtime numbers a pair's channels from 0, at most 32)."""
    out: dict[tuple[int, int], int] = {}
    for prog in algo.ranks:
        for tb in prog.threadblocks:
            for pair in ([(prog.rank, tb.send)] if tb.send >= 0 else []) + ([(tb.recv, prog.rank)] if tb.recv >= 0
                                                                               else []):
                out[pair] = max(out.get(pair, 0), tb.channel + 1)
    return out


def assert_no_more_channels_than_written(back, written) -> None:
    needed, had = channels_between(back), channels_between(written)
    assert {pair: n for pair, n in needed.items() if n > had.get(pair, 0)} == {}


@pytest.mark.parametrize("protocol", [Protocol.SIMPLE, Protocol.LL])
@pytest.mark.parametrize("index", range(len(CASES)))
def test_a_read_back_plan_has_no_more_channels_between_two_ranks_than_the_algorithm_written(index, protocol):
    """Credits travel back on the channel pair of the data they free room for: a
    channel that only signals is no connection of the algorithm read back."""
    written = convert_for_mscclpp(library(index, protocol))
    for mode in declared_modes(written):
        for slots in (8, 1):
            back = read_back(write_mscclpp_plan(written, mode, slots=slots))
            assert_no_more_channels_than_written(back, written)


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(["ring-allreduce", "ring-allgather", "ring-reducescatter", "allpairs-allreduce"]),
       ranks=st.integers(2, 5), channels=st.integers(1, 2), ll=st.booleans(), slots=st.integers(1, 4))
def test_random_library_algorithms_round_trip(name, ranks, channels, ll, slots):
    params = {"ranks": ranks}
    if "channels" in {p.name for p in LIBRARY[name].params}:
        params["channels"] = channels
    algo = dataclasses.replace(LIBRARY[name](**params).algorithm, protocol=Protocol.LL if ll else Protocol.SIMPLE)
    mode = declared_modes(algo)[0]
    try:
        back = read_back(write_mscclpp_plan(convert_for_mscclpp(algo), mode, slots=slots))
    except InputError as e:  # a refusal is one line naming the algorithm
        assert "\n" not in str(e) and algo.name in str(e)
        return
    assert verify_algorithm(back, modes=(mode,)).ok
    assert_executes(back, modes=(mode,))
    assert_no_more_channels_than_written(back, convert_for_mscclpp(algo))


# ------------------------------------------------------------------------- command line
def test_synth_writes_a_plan_that_verify_reads(tmp_path):
    run = arborcc("synth", "--machine", "dgx1v", "--gpus", "0,1,2", "--collective", "allgather",
                  "--strategy", "trees", "--format", "mscclpp", "-o", "plan.json", cwd=tmp_path)
    assert run.code == 0, run.err
    doc = json.loads((tmp_path / "plan.json").read_text())
    assert doc["collective"] == "allgather" and len(doc["gpus"]) == 3
    run = arborcc("verify", "plan.json", cwd=tmp_path)
    assert run.code == 0 and "OK (allgather on 3 ranks" in run.out and "MSCCL++'s limits" in run.out, run.out


def test_compile_and_convert_write_plans_both_ways(tmp_path):
    run = arborcc("compile", "ring-allreduce", "--ranks", "4", "--format", "mscclpp", "-o", "ring.json",
                  cwd=tmp_path)
    assert run.code == 0, run.err
    assert json.loads((tmp_path / "ring.json").read_text())["protocol"] == "Simple"
    run = arborcc("convert", "ring.json", "--format", "xml", "-o", "ring.xml", cwd=tmp_path)
    assert run.code == 0 and (tmp_path / "ring.xml").read_text().startswith("<algo"), run.err
    run = arborcc("compile", "ring-allgather", "--ranks", "4", "--outofplace", "-o", "ag.xml", cwd=tmp_path)
    assert run.code == 0, run.err
    run = arborcc("convert", "ag.xml", "--format", "mscclpp", "--outofplace", "-o", "oop.json", cwd=tmp_path)
    assert run.code == 0, run.err
    assert json.loads((tmp_path / "oop.json").read_text())["inplace"] is False


def test_a_plan_for_a_call_form_the_algorithm_lacks_is_refused(tmp_path):
    run = arborcc("compile", "ring-allgather", "--ranks", "4", "--outofplace", "-o", "ag.xml", cwd=tmp_path)
    assert run.code == 0, run.err
    refused(arborcc("convert", "ag.xml", "--format", "mscclpp", "--inplace", "-o", "p.json", cwd=tmp_path),
            r"ag\.xml")
    assert not (tmp_path / "p.json").exists()


def test_every_step_that_moves_data_has_an_mscclpp_form_in_both_protocols():
    from arborcc.ir.model import Op
    from arborcc.ir.mscclpp.writer import PACKET_OPERATIONS, SIMPLE_OPERATIONS

    moving = {op for op in Op if op.sends or op.receives}
    assert set(SIMPLE_OPERATIONS) == moving
    assert set(PACKET_OPERATIONS) == moving
