"""Races in a plan's own semantics (arborcc.ir.mscclpp.races): a put that lands while the
peer still reads the slot is found (and the IR translation, where a put lands when it is
made, shows it too); the plans arborcc writes have none, with few slots too; the samples'
verdicts; `arborcc verify` reports a plan race."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from arborcc.ir.aliasing import Mode, declared_modes
from arborcc.ir.model import Protocol
from arborcc.ir.mscclpp.deadlock import plan_deadlocks
from arborcc.ir.mscclpp.plan import plan_from_document, read_mscclpp_plan
from arborcc.ir.mscclpp.races import plan_races
from arborcc.ir.mscclpp.translate import plan_to_algorithm
from arborcc.ir.mscclpp.writer import plan_document
from arborcc.library import LIBRARY
from arborcc.verify import verify_algorithm
from support.cli_runs import arborcc

SAMPLES = Path(__file__).parent / "samples" / "mscclpp"


def put(i: int) -> dict:
    return {"name": "put", "src_buff": [{"type": "i", "index": i, "size": 1}],
            "dst_buff": [{"buffer_id": 0, "index": 0, "size": 1}], "channel_type": "memory"}


def sync(name: str) -> dict:
    return {"name": name, "channel_ids": [0], "channel_type": "memory"}


def copy_out(i: int) -> dict:
    return {"name": "copy", "src_buff": [{"type": "s", "index": 0, "size": 1}],
            "dst_buff": [{"type": "o", "index": i, "size": 1}]}


def slot_reused_without_credit() -> dict:
    """Rank 0 puts two chunks into rank 1's one scratch slot, signalling after each; rank 1
    copies each out after its wait - but nothing stops the second put from landing while
    rank 1 still copies the first."""
    nop = {"name": "nop"}
    return {
        "name": "no-credit", "collective": "custom", "protocol": "Simple", "inplace": False,
        "gpus": [
            {"id": 0, "input_chunks": 2, "output_chunks": 2, "scratch_chunks": 1,
             "channels": [{"channel_type": "memory", "connected_to": [1]}],
             "remote_buffers": [{"rank": 1, "type": "s", "access_channel_types": ["memory"]}],
             "threadblocks": [{"id": 0, "channels": [{"channel_type": "memory", "channel_ids": [0]}],
                               "remote_buffer_refs": [{"access_channel_type": "memory", "remote_buffer_ids": [0]}],
                               "ops": [put(0), nop, sync("signal"), put(1), nop, sync("signal")]}]},
            {"id": 1, "input_chunks": 2, "output_chunks": 2, "scratch_chunks": 1,
             "channels": [{"channel_type": "memory", "connected_to": [0]}], "remote_buffers": [],
             "threadblocks": [{"id": 0, "channels": [{"channel_type": "memory", "channel_ids": [0]}],
                               "ops": [sync("wait"), nop, copy_out(0), sync("wait"), nop, copy_out(1)]}]},
        ]}


def test_a_slot_reused_without_a_credit_is_a_race_in_the_plan_and_in_its_translation():
    plan = plan_from_document(slot_reused_without_credit(), "plan.json")
    report = verify_algorithm(plan_to_algorithm(plan, "plan.json"))  # the second put lands whenever it is made
    assert not report.ok and report.violations[0].kind == "race"
    races = plan_races(plan, "plan.json")
    assert races and races[0].kind == "race"
    text = str(races[0])
    assert "gpus[0].threadblocks[0].ops[3] (put) writes s chunk 0 of rank 1" in text
    assert "gpus[1].threadblocks[0].ops[2] (copy) reads" in text


@pytest.mark.parametrize("protocol", [Protocol.SIMPLE, Protocol.LL])
@pytest.mark.parametrize("name,params", [("ring-allreduce", dict(ranks=4)), ("ring-allreduce", dict(ranks=8)),
                                         ("allpairs-allreduce", dict(ranks=4)), ("ring-allgather", dict(ranks=4)),
                                         ("hd-allreduce", dict(ranks=4))])
def test_written_plans_have_no_races_even_with_two_slots(name, params, protocol):
    """(With one slot a Simple ring deadlocks - tests/ir/test_mscclpp_deadlock.py - and a
    plan that deadlocks has no order to find races in.)"""
    algo = dataclasses.replace(LIBRARY[name](**params).algorithm, protocol=protocol)
    plan = plan_from_document(plan_document(algo, declared_modes(algo)[0], slots=2), "plan.json")
    assert plan_deadlocks(plan, "plan.json") == [] and plan_races(plan, "plan.json") == []


#: the samples with a race in their own semantics (every other sample that reads has none)
RACY = {
    # the group members split rank 1's copy into scratch by chunk and rank 0's reads of it by half chunk
    "official__executor-tests__reduce_tbg.json": "(copy) writes s chunk 2 (chunks cut 2-fold",
    # each rank's put writes the chunk of the peer's input that the peer's own put reads
    "dsl__put_fuse_test.json": "(put) writes i chunk 0 of rank 0",
}


@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLES.glob("*.json")))
def test_sample_races(name):
    from arborcc.errors import InputError

    try:
        plan = read_mscclpp_plan(SAMPLES / name)
        races = plan_races(plan, name)
    except InputError:
        pytest.skip("refused or not translatable (tests/ir/test_mscclpp_plans.py)")
    if name in RACY:
        assert races and RACY[name] in str(races[0])
    else:
        assert races == []


def test_verify_reports_a_plan_race(tmp_path):
    (tmp_path / "plan.json").write_text(json.dumps(slot_reused_without_credit()))
    run = arborcc("verify", "plan.json", cwd=tmp_path)
    assert run.code == 1 and "INCORRECT" in run.out and "[race]" in run.out and "(put) writes s chunk 0" in run.out, \
        run.out + run.err


def test_verify_of_an_inplace_written_plan_finds_no_race(tmp_path):
    algo = LIBRARY["ring-allreduce"](ranks=3).algorithm
    (tmp_path / "p.json").write_text(json.dumps(plan_document(algo, Mode.INPLACE, slots=2)))
    run = arborcc("verify", "p.json", cwd=tmp_path)
    assert run.code == 0 and "OK (allreduce on 3 ranks" in run.out, run.out + run.err
