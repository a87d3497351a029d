"""Deadlock in a plan's own semantics (arborcc.ir.mscclpp.deadlock): every sample's verdict;
hand-made plans that hang on a GPU (a dropped signal, a wait cycle, an acquire nothing
releases, a barrier a member never reaches, packets nothing writes) each reported at the
right operation; random mutations of correct plans reported or not, never an exception,
and the IR verifier's deadlock verdict on the translation never disagreeing the other way;
`arborcc verify` and the writer's self-check report it."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborcc.errors import IRFormatError
from arborcc.ir.load import load_algorithm
from arborcc.ir.mscclpp import rules
from arborcc.ir.mscclpp.deadlock import plan_deadlocks
from arborcc.ir.mscclpp.plan import plan_from_document, read_mscclpp_plan
from arborcc.ir.mscclpp.translate import PlanNotTranslatable, plan_to_algorithm
from arborcc.verify import verify_algorithm
from support.cli_runs import arborcc

SAMPLES = Path(__file__).parent / "samples" / "mscclpp"

#: samples that deadlock: the DSL's unit tests that read packets no operation writes
DEADLOCKED = {
    "dsl__reduce_copy_packet_test.json":
        "gpus[0].threadblocks[0].ops[0]: recpkt reads packets of s chunk 0 of rank 0",
    "dsl__reduce_copy_send_packet_test.json":
        "gpus[0].threadblocks[0].ops[0]: recspkt reads packets of s chunk 0 of rank 0",
}
#: correct plans to mutate (signals, waits, semaphores, barriers, port channels, packets)
MUTATED = ["official__execution-files__allreduce.json", "dsl__allreduce_2.json", "dsl__allgather_tbg.json",
           "dsl__allgather_2x4.json", "dsl__alltoall_2.json", "dsl__alltoall_pipeline_2.json"]


def sync(name: str, channel: int = 0, ctype: str = "memory") -> dict:
    return {"name": name, "channel_ids": [channel], "channel_type": ctype}


def gpu(rank: int, threadblocks: list[list[dict]], peers: tuple[int, ...] = (), semaphores: int = 0) -> dict:
    """Rank ``rank`` with a memory channel to each of ``peers`` (listed by every thread
    block) and one thread block per list of operations."""
    channels = [{"channel_type": "memory", "channel_ids": list(range(len(peers)))}] if peers else []
    return {"id": rank, "input_chunks": 1, "output_chunks": 1, "scratch_chunks": 1,
            "channels": [{"channel_type": "memory", "connected_to": list(peers)}] if peers else [],
            "remote_buffers": [], "semaphores": [{"init_value": 0}] * semaphores,
            "threadblocks": [{"id": t, "channels": channels, "ops": ops} for t, ops in enumerate(threadblocks)]}


def plan(*gpus: dict) -> dict:
    return {"name": "hand-made", "collective": "test", "protocol": "Simple", "inplace": False, "gpus": list(gpus)}


def deadlocks(doc: dict) -> list:
    return plan_deadlocks(plan_from_document(doc, "plan.json"), "plan.json")


# --- the samples ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLES.glob("*.json")))
def test_sample_deadlock_verdict(name):
    try:
        found = plan_deadlocks(read_mscclpp_plan(SAMPLES / name), name)
    except IRFormatError as e:  # the reader refuses it (tests/ir/test_mscclpp_plans.py): no plan to run
        assert not isinstance(e, PlanNotTranslatable)
        return
    if name in DEADLOCKED:
        assert found and all(v.kind == "deadlock" for v in found)
        want = f"{name}:{DEADLOCKED[name]}: no packet write can satisfy it (no operation writes them)"
        assert want in found[0].message
    else:
        assert found == [], found[:1]


@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLES.glob("*.json")))
def test_sample_verdict_agrees_with_the_ir_verifier_on_the_translation(name):
    """Where a sample translates, the IR verifier finds a deadlock exactly where the plan
    check does - except for packets nothing writes, which the translation reads as
    never-written scratch (the IR verifier calls that ``uninitialized``)."""
    try:
        algo = load_algorithm(SAMPLES / name)
    except IRFormatError:
        return  # refused or not translatable (tests/ir/test_mscclpp_plans.py)
    kinds = {v.kind for v in verify_algorithm(algo).violations}
    found = plan_deadlocks(read_mscclpp_plan(SAMPLES / name), name)
    if name in DEADLOCKED:
        assert found and "uninitialized" in kinds
    else:
        assert not found and "deadlock" not in kinds


# --- hand-made plans that hang --------------------------------------------------------


def handshake(first: list[str], second: list[str]) -> dict:
    """Two ranks, one memory channel pair, one thread block each running these operations."""
    return plan(gpu(0, [[sync(n) for n in first]], peers=(1,)), gpu(1, [[sync(n) for n in second]], peers=(0,)))


def test_a_handshake_does_not_deadlock():
    assert deadlocks(handshake(["signal", "wait"], ["signal", "wait"])) == []
    assert deadlocks(handshake(["signal", "wait"], ["wait", "signal"])) == []


def test_a_dropped_signal_is_reported_at_the_wait_it_leaves_unsatisfied():
    found = deadlocks(handshake(["signal", "wait"], ["wait"]))
    assert [v.kind for v in found] == ["deadlock"]
    assert found[0].message.startswith("plan.json:gpus[0].threadblocks[0].ops[1]: wait on memory channel 0 from "
                                       "rank 1: no signal can satisfy it")
    assert "rank 1 signals it 0 times" in found[0].message


def test_two_waits_before_their_signals_are_a_cycle_naming_both():
    found = deadlocks(handshake(["wait", "signal"], ["wait", "signal"]))
    assert [v.message.split(": ")[0] for v in found] == ["plan.json:gpus[0].threadblocks[0].ops[0]",
                                                         "plan.json:gpus[1].threadblocks[0].ops[0]"]
    # both ranks signal once: equal counts, which the translation's own check accepts
    assert all("signals it 1 time, 0 before it stops" in v.message for v in found)


def test_a_cycle_across_thread_blocks_is_reported():
    """Rank 0's two thread blocks each wait on the channel pair the other one's peer signals
    after its own wait: swapped, the waits wait on each other."""
    rank0 = gpu(0, [[sync("wait", 0), sync("signal", 1)], [sync("wait", 1), sync("signal", 0)]], peers=(1, 1))
    rank1 = gpu(1, [[sync("wait", 1), sync("signal", 0)], [sync("wait", 0), sync("signal", 1)]], peers=(0, 0))
    found = deadlocks(plan(rank0, rank1))
    assert len(found) == 4 and all("ops[0]: wait on memory channel" in v.message for v in found)
    # the same thread blocks with the signals first finish
    for g in (rank0, rank1):
        for tb in g["threadblocks"]:
            tb["ops"].reverse()
    assert deadlocks(plan(rank0, rank1)) == []


def test_a_wait_on_a_channel_the_peer_does_not_pair_is_reported():
    doc = plan(gpu(0, [[sync("wait", 1)]], peers=(1, 1)), gpu(1, [[sync("signal", 0)]], peers=(0,)))
    found = deadlocks(doc)
    assert "gpus[0].threadblocks[0].ops[0]: wait on memory channel 1 from rank 1: no signal can satisfy it " \
           "(rank 1 has no memory channel paired with it)" in found[0].message


def test_an_acquire_nothing_releases_is_reported():
    release = {"name": "sem_release", "semaphore_ids": [0]}
    acquire = {"name": "sem_acquire", "semaphore_ids": [0]}
    assert deadlocks(plan(gpu(0, [[{"name": "nop"}, release], [acquire]], semaphores=1))) == []
    found = deadlocks(plan(gpu(0, [[{"name": "nop"}], [acquire]], semaphores=1)))
    assert len(found) == 1 and found[0].message.startswith(
        "plan.json:gpus[0].threadblocks[1].ops[0]: sem_acquire of semaphore 0: no release can satisfy it")
    # init_value 1 lets one acquire through, not two
    doc = plan(gpu(0, [[acquire, acquire]], semaphores=1))
    doc["gpus"][0]["semaphores"] = [{"init_value": 1}]
    assert "threadblocks[0].ops[1]: sem_acquire" in deadlocks(doc)[0].message


def test_a_barrier_one_member_never_reaches_is_reported_at_both():
    barrier = {"name": "barrier", "barrier_id": 0, "num_threadblocks": 2}
    assert deadlocks(plan(gpu(0, [[barrier], [{"name": "nop"}, barrier]]))) == []
    # thread block 1 waits for a signal no one sends, so only thread block 0 reaches the barrier
    found = deadlocks(plan(gpu(0, [[barrier], [sync("wait"), barrier]], peers=(1,)), gpu(1, [[]], peers=(0,))))
    assert [v.message.split(": ")[0] for v in found] == ["plan.json:gpus[0].threadblocks[0].ops[0]",
                                                         "plan.json:gpus[0].threadblocks[1].ops[0]"]
    assert "barrier 0 waits for 2 thread blocks of rank 0; only 1 can reach it (thread blocks [0])" \
        in found[0].message


def test_a_packet_read_waits_for_the_packet_write_of_its_chunk():
    put = {"name": "ppkt", "src_buff": [{"type": "i", "index": 0, "size": 1}],
           "dst_buff": [{"buffer_id": 0, "index": 0, "size": 1}], "channel_type": "memory"}
    unpack = {"name": "upkt", "src_buff": [{"type": "s", "index": 0, "size": 1}],
              "dst_buff": [{"type": "o", "index": 0, "size": 1}]}
    rank0 = gpu(0, [[put]], peers=(1,))
    rank0["remote_buffers"] = [{"rank": 1, "type": "s", "access_channel_types": ["memory"]}]
    rank0["threadblocks"][0]["remote_buffer_refs"] = [{"access_channel_type": "memory", "remote_buffer_ids": [0]}]
    doc = plan(rank0, gpu(1, [[unpack]], peers=(0,)))
    doc["protocol"] = "LL"
    assert deadlocks(doc) == []
    doc["gpus"][0]["threadblocks"][0]["ops"] = [{"name": "nop"}]
    assert "gpus[1].threadblocks[0].ops[0]: upkt reads packets of s chunk 0 of rank 1: no packet write can " \
           "satisfy it (no operation writes them)" in deadlocks(doc)[0].message


def test_a_deadlock_of_signals_that_carry_no_data_is_one_the_translation_cannot_show():
    """Signal and wait that publish nothing have no IR form (the translation's IR holds
    sends and receives of data): the IR verifier passes the translation, the plan check
    does not - why the check runs on the plan itself."""
    doc = handshake(["wait", "signal"], ["wait", "signal"])
    assert verify_algorithm(plan_to_algorithm(plan_from_document(doc, "plan.json"), "plan.json")).ok
    assert deadlocks(doc)


# --- random mutations of correct plans ----------------------------------------------


def ops_named(doc: dict, names: tuple[str, ...]) -> list[tuple[int, int, int]]:
    return [(g, t, o) for g, gp in enumerate(doc["gpus"]) for t, tb in enumerate(gp["threadblocks"])
            for o, op in enumerate(tb["ops"]) if op["name"] in names]


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(MUTATED), data=st.data())
def test_a_dropped_signal_is_reported_and_a_dropped_wait_never_deadlocks(name, data):
    original = json.loads((SAMPLES / name).read_text())
    signals = ops_named(original, ("signal", "rlxsignal", "pws", "pwsf"))
    waits = ops_named(original, ("wait", "rlxwait"))
    for dropped, names in ((signals, "signal"), (waits, "wait")):
        if not dropped:
            continue
        g, t, o = data.draw(st.sampled_from(dropped), label=f"dropped {names}")
        doc = copy.deepcopy(original)
        del doc["gpus"][g]["threadblocks"][t]["ops"][o]
        found = deadlocks(doc)
        if names == "signal":  # its waits outnumber its signals now: the last of them never returns
            assert found and all(v.kind == "deadlock" for v in found)
            assert all("can satisfy it" in v.message or "never opens" in v.message for v in found)
        else:  # one wait fewer only lets waits return earlier
            assert found == []


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(MUTATED), data=st.data())
def test_any_operation_dropped_gets_an_answer_naming_stuck_operations(name, data):
    doc = json.loads((SAMPLES / name).read_text())
    g, t, o = data.draw(st.sampled_from(ops_named(doc, tuple(rules.OPERATIONS))), label="dropped")
    del doc["gpus"][g]["threadblocks"][t]["ops"][o]
    for v in deadlocks(doc):
        assert v.kind == "deadlock" and v.message.startswith("plan.json:gpus[")
        assert "can satisfy it" in v.message or "never opens" in v.message


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(MUTATED), data=st.data())
def test_signals_moved_later_deadlock_in_the_plan_whenever_they_do_in_the_translation(name, data):
    """Signals moved to the end of their thread blocks: the plan check answers (never an
    exception); when the plan still translates and the IR verifier finds a deadlock, so
    does the plan check (the converse need not hold: a signal that carries no data has no
    IR form)."""
    doc = json.loads((SAMPLES / name).read_text())
    signals = ops_named(doc, ("signal", "rlxsignal", "pws", "pwsf"))
    moved = data.draw(st.lists(st.sampled_from(signals), min_size=1, max_size=3, unique=True), label="moved")
    for g, t, o in sorted(moved, reverse=True):
        ops = doc["gpus"][g]["threadblocks"][t]["ops"]
        ops.append(ops.pop(o))
    parsed = plan_from_document(doc, "plan.json")
    found = plan_deadlocks(parsed, "plan.json")
    assert all(v.kind == "deadlock" for v in found)
    try:
        algo = plan_to_algorithm(parsed, "plan.json")
    except PlanNotTranslatable:
        return
    if any(v.kind == "deadlock" for v in verify_algorithm(algo).violations):
        assert found


# --- where it is reported --------------------------------------------------------------


def test_verify_reports_a_plan_deadlock_the_translation_cannot_read(tmp_path):
    (tmp_path / "plan.json").write_text(json.dumps(handshake(["signal", "wait"], ["wait"])))
    run = arborcc("verify", "plan.json", cwd=tmp_path)
    assert run.code == 1 and run.err == "", run.out + run.err
    assert run.out.startswith("plan.json: INCORRECT (MSCCL++ plan, not translated to the IR): ")
    assert "plan.json:gpus[0].threadblocks[0].ops[1]: wait on memory channel 0 from rank 1: no signal can satisfy " \
           "it" in run.out and run.out.rstrip().endswith("[deadlock]")


def test_verify_reports_a_plan_deadlock_the_translation_misses(tmp_path):
    (tmp_path / "plan.json").write_text(json.dumps(handshake(["wait", "signal"], ["wait", "signal"])))
    run = arborcc("verify", "plan.json", "--json", cwd=tmp_path)
    assert run.code == 1, run.out + run.err
    report = json.loads(run.out)
    assert not report["ok"] and [v["kind"] for v in report["violations"]] == ["deadlock", "deadlock"]
    assert "gpus[1].threadblocks[0].ops[0]: wait" in report["violations"][1]["message"]


def test_an_untranslatable_plan_that_does_not_deadlock_is_still_refused(tmp_path):
    run = arborcc("verify", str(SAMPLES / "dsl__switch_broadcast_test.json"), cwd=tmp_path)
    assert run.code == 2 and "writes into rank 1's buffer" in run.err


def test_the_writer_never_writes_a_plan_that_deadlocks(monkeypatch):
    """The self-check of ``--format mscclpp`` runs the plan check (here on a plan the IR
    verifier passes: its signals carry no data)."""
    from arborcc.verify.mscclpp_plan import mscclpp_plan_text
    from arborcc.ir.convert import ConversionError
    from arborcc.library import LIBRARY

    doc = handshake(["wait", "signal"], ["wait", "signal"])
    monkeypatch.setattr("arborcc.ir.mscclpp.writer.write_mscclpp_plan", lambda algo, mode: json.dumps(doc))
    with pytest.raises(ConversionError, match=r"deadlocks: .*gpus\[0\]\.threadblocks\[0\]\.ops\[0\]: wait on memory"):
        mscclpp_plan_text(LIBRARY["ring-allreduce"](ranks=2).algorithm, "out-of-place")


@pytest.mark.parametrize("name", ["ring-allreduce", "ring-allgather"])
def test_a_written_simple_ring_needs_two_slots(name):
    """With one slot per connection each rank reads its slot only in the step that writes
    the next rank's, which waits for the next rank to have read its own: around the ring,
    no one can. (The IR translation keeps the credits only as landing order, so the IR
    verifier passes it; `--format mscclpp` writes 8 slots and now checks the plan.)"""
    from arborcc.ir.aliasing import declared_modes
    from arborcc.ir.mscclpp.writer import plan_document
    from arborcc.library import LIBRARY

    algo = LIBRARY[name](ranks=3).algorithm
    for slots, stuck in ((1, True), (2, False)):
        doc = plan_document(algo, declared_modes(algo)[0], slots=slots)
        found = deadlocks(doc)
        assert bool(found) == stuck
        assert all("wait on memory channel" in v.message for v in found)


# --- credits: a slot overwritten before it is read ----------------------------------


def two_puts_into_one_slot(reads_between: bool) -> dict:
    """Rank 0 puts two chunks into rank 1's one scratch slot, signalling after each; rank 1
    copies the slot out after its waits - after each wait, or only after both."""
    put = [{"name": "put", "src_buff": [{"type": "i", "index": i, "size": 1}],
            "dst_buff": [{"buffer_id": 0, "index": 0, "size": 1}], "channel_type": "memory"} for i in (0, 1)]
    copy_out = [{"name": "copy", "src_buff": [{"type": "s", "index": 0, "size": 1}],
                 "dst_buff": [{"type": "o", "index": i, "size": 1}]} for i in (0, 1)]
    rank0 = gpu(0, [[put[0], sync("signal"), put[1], sync("signal")]], peers=(1,))
    rank0["remote_buffers"] = [{"rank": 1, "type": "s", "access_channel_types": ["memory"]}]
    rank0["threadblocks"][0]["remote_buffer_refs"] = [{"access_channel_type": "memory", "remote_buffer_ids": [0]}]
    rank1 = gpu(1, [[sync("wait"), copy_out[0], sync("wait"), copy_out[1]] if reads_between else
                    [sync("wait"), sync("wait"), copy_out[0], copy_out[1]]], peers=(0,))
    for g in (rank0, rank1):
        g["input_chunks"] = g["output_chunks"] = 2
    return plan(rank0, rank1)


def test_a_slot_overwritten_before_it_is_read_loses_the_message():
    from arborcc.ir.mscclpp.races import plan_races

    found = plan_races(plan_from_document(two_puts_into_one_slot(reads_between=False), "plan.json"), "plan.json")
    assert [v.kind for v in found] == ["unmatched"]
    assert "gpus[0].threadblocks[0].ops[0] (put) writes s chunk 0 of rank 1, which gpus[0].threadblocks[0].ops[2] " \
           "(put) overwrites before anything reads it: the message is lost" in found[0].message
    # read after each wait, the second put may land while the first copy still reads: a race
    found = plan_races(plan_from_document(two_puts_into_one_slot(reads_between=True), "plan.json"), "plan.json")
    assert [v.kind for v in found] == ["race"]


def test_verify_reports_a_lost_message(tmp_path):
    (tmp_path / "plan.json").write_text(json.dumps(two_puts_into_one_slot(reads_between=False)))
    run = arborcc("verify", "plan.json", cwd=tmp_path)
    assert run.code == 1 and "the message is lost" in run.out and "[unmatched]" in run.out, run.out + run.err
    assert "MSCCL dialect" not in run.out  # MSCCL XML's runtime limits do not apply to a plan
