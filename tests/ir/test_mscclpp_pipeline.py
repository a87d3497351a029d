"""``pipeline`` operations in MSCCL++ plans: the translation unrolls a pipeline into the
iterations MSCCL++'s executor runs (``handlePipeline``: the inner operations once per
unit of their buffers), each on its part, so the pipelined samples verify and run on
the reference executor (their verdicts: test_mscclpp_plans.py), and an iteration that
reads before it waits is found."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from arborcc.errors import ArborccError
from arborcc.ir.mscclpp.pipelines import PIPELINE_ITERATIONS, iteration
from arborcc.ir.mscclpp.plan import BufferRef, Operation, plan_from_document
from arborcc.ir.mscclpp.translate import normalize_plan, plan_to_algorithm
from arborcc.verify import verify_algorithm
from support.cli_runs import arborcc, refused

SAMPLES = Path(__file__).parent / "samples" / "mscclpp"
ALLTOALL = SAMPLES / "dsl__alltoall_pipeline_2.json"


def document(path: Path) -> dict:
    return json.loads(path.read_text())


def translate(doc: dict):
    return plan_to_algorithm(plan_from_document(doc, "plan.json"), "plan.json")


def test_a_pipeline_becomes_its_iterations_each_on_its_part_of_the_chunks():
    doc = document(SAMPLES / "official__executor-tests__reduce_nvls_pipeline.json")
    plan, places = normalize_plan(plan_from_document(doc, "plan.json"), "plan.json")
    tb = plan.gpus[0].threadblocks[0]
    assert plan.gpus[0].input_chunks == 2 * PIPELINE_ITERATIONS
    glres = [(o, op) for o, op in enumerate(tb.ops) if op.name == "glres"]
    assert [op.src[0].index for _, op in glres] == list(range(PIPELINE_ITERATIONS))  # chunk 0, part by part
    assert all(op.src[0].size == 1 for _, op in glres)
    assert {places[(0, 0, o)] for o, _ in glres} == {"gpus[0].threadblocks[0].ops[5].ops[0]"}
    assert not any(op.name == "pipeline" for op in tb.ops)


def test_a_pipeline_iteration_that_reads_before_it_waits_is_incorrect():
    doc = document(ALLTOALL)
    assert verify_algorithm(translate(doc)).ok
    for gpu in doc["gpus"]:  # the receivers copy out of scratch before their wait
        for tb in gpu["threadblocks"]:
            inner = tb["ops"][0].get("ops", []) if tb["ops"][0]["name"] == "pipeline" else []
            names = [op["name"] for op in inner]
            if "copy" in names and "wait" in names:
                c, w = names.index("copy"), names.index("wait")
                inner[c], inner[w] = inner[w], inner[c]
    assert not verify_algorithm(translate(doc)).ok


def test_a_pipeline_whose_last_put_no_signal_publishes_is_refused(tmp_path):
    doc = document(ALLTOALL)
    pipe = doc["gpus"][0]["threadblocks"][0]["ops"][5]
    names = [op["name"] for op in pipe["ops"]]
    p, s = names.index("put"), names.index("signal")
    pipe["ops"][p], pipe["ops"][s] = pipe["ops"][s], pipe["ops"][p]  # signal, then put: the put waits a round
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    refused(arborcc("verify", "plan.json", cwd=tmp_path), r"plan\.json", r"gpus\[0\]", r"signal")


def test_a_pipelined_plan_verifies_from_the_command_line(tmp_path):
    run = arborcc("verify", str(ALLTOALL), cwd=tmp_path)
    assert run.code == 0 and "OK (alltoall on 2 ranks" in run.out, run.err


def test_thread_blocks_that_acquire_each_others_semaphores_first_deadlock():
    doc = document(SAMPLES / "dsl__allreduce_pipeline.json")
    assert verify_algorithm(translate(doc)).ok
    for gpu in doc["gpus"]:  # tb 0 now waits for tb 1's release, which waits for tb 0's
        gpu["threadblocks"][0]["ops"][0]["ops"].insert(0, {"name": "sem_acquire", "semaphore_ids": [1]})
        inner = gpu["threadblocks"][2]["ops"][0]["ops"]
        gpu["threadblocks"][2]["ops"][0]["ops"] = [op for op in inner if op["name"] != "sem_acquire"]
    report = verify_algorithm(translate(doc))
    assert not report.ok and report.violations[0].kind == "deadlock"


def executor_parts(index: int, size: int, unit: int, iterations: int) -> list[tuple[int, int]]:
    """(start, length) each iteration of MSCCL++'s handlePipeline works on, in units:
    ``offset = i x unit``, ``min(size - offset, unit)``, nothing once past the end."""
    return [(index + i * unit, min(size - i * unit, unit)) for i in range(iterations) if i * unit < size]


@settings(max_examples=60, deadline=None, database=None)
@given(index=st.integers(0, 20), size=st.integers(1, 12), unit=st.integers(1, 12))
def test_each_iteration_works_on_the_part_the_executor_computes(index, size, unit):
    op = Operation("copy", src=(BufferRef("L", "i", -1, index, size),), dst=(BufferRef("L", "o", -1, index, size),))
    got = []
    for i in range(PIPELINE_ITERATIONS):
        part = iteration(op, i, unit)
        if part is not None:
            assert part.src[0].index == part.dst[0].index and part.src[0].size == part.dst[0].size
            got.append((part.src[0].index, part.src[0].size))
    assert got == executor_parts(index, size, unit, PIPELINE_ITERATIONS)


def test_a_put_with_signal_whose_part_is_empty_still_signals():
    op = Operation("pws", "port", (0,), src=(BufferRef("L", "i", -1, 0, 1),), dst=(BufferRef("R", None, 0, 0, 1),))
    assert iteration(op, 1, 1) == Operation("signal", "port", (0,))
    assert iteration(dataclasses.replace(op, name="put"), 1, 1) is None


def test_group_members_in_a_pipeline_each_take_their_part_in_the_first_iteration():
    doc = document(SAMPLES / "dsl__pipeline_test.json")
    tb = doc["gpus"][0]["threadblocks"][0]
    members = []
    for member in range(2):
        pipe = copy.deepcopy(tb)
        pipe["id"] = member
        pipe["ops"][0]["ops"][0]["tbg_info"] = {"tb_id": member, "tbg_size": 2}
        members.append(pipe)
    doc["gpus"][0]["threadblocks"] = members
    plan, _ = normalize_plan(plan_from_document(doc, "plan.json"), "plan.json")
    parts = [[(op.src[0].index, op.src[0].size) for op in t.ops] for t in plan.gpus[0].threadblocks]
    # the chunk in 2 x 2 parts: member k's half is [2k, 2k + 2), all of it in iteration 0
    assert parts == [[(0, 2)], [(2, 2)]]
    assert verify_algorithm(translate(doc)).ok


def pipeline_changes():
    """A random change to a pipeline: its iteration context or an inner buffer."""
    return st.tuples(st.sampled_from(["num_chunks", "unit_size", "index", "size"]), st.integers(0, 3),
                     st.integers(-1, 2**20))


@settings(max_examples=30, deadline=None, database=None)
@given(change=pipeline_changes(), sample=st.sampled_from([ALLTOALL, SAMPLES / "dsl__allreduce_pipeline.json"]))
def test_random_changes_to_pipelines_verify_or_are_refused(change, sample):
    what, which, value = change
    doc = document(sample)
    pipes = [op for g in doc["gpus"] for tb in g["threadblocks"] for op in tb["ops"] if op["name"] == "pipeline"]
    pipe = pipes[which % len(pipes)]
    if what in ("num_chunks", "unit_size"):
        pipe["iter_context"][what] = value
    else:
        refs = [b for op in pipe["ops"] for b in op.get("src_buff", []) + op.get("dst_buff", [])]
        if refs:
            refs[which % len(refs)][what] = value
    try:
        algo = translate(doc)
    except ArborccError as e:
        assert "\n" not in str(e) and str(e)
        return
    verify_algorithm(algo)  # a verdict, never an exception
