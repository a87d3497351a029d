"""The MSCCL++ execution-plan reader: every rule of MSCCL++'s parser (arborcc.ir.mscclpp.rules)
is checked, and a plan that breaks one is refused in one line naming the file and the field;
random damage to a plan ends in a plan or in that one line, never another exception."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborcc.errors import InputError, IRFormatError
from arborcc.ir.mscclpp import rules
from arborcc.ir.mscclpp.plan import plan_from_document, read_mscclpp_plan
from support.cli_runs import arborcc, refused

SAMPLES = Path(__file__).parent / "samples" / "mscclpp"
ALLREDUCE = SAMPLES / "official__execution-files__allreduce.json"
PACKET = SAMPLES / "official__execution-files__allreduce_packet.json"


def plan_doc(path: Path = ALLREDUCE) -> dict:
    return json.loads(path.read_text())


def refusal(doc) -> str:
    with pytest.raises(IRFormatError) as e:
        plan_from_document(doc, "plan.json")
    text = str(e.value)
    assert text.startswith("plan.json") and "\n" not in text
    return text


def test_the_official_plans_read_with_their_fields():
    plan = read_mscclpp_plan(ALLREDUCE)
    assert (plan.name, plan.collective, plan.protocol, plan.inplace, plan.num_ranks) == \
        ("allreduce", "allreduce", "Simple", True, 2)
    gpu = plan.gpus[0]
    assert (gpu.input_chunks, gpu.output_chunks, gpu.scratch_chunks) == (16, 16, 0)
    assert gpu.channel_peers("memory") == [1] * 8
    assert [op.name for op in gpu.threadblocks[0].ops] == ["rlxsignal", "rlxwait", "nop", "rres", "nop", "signal",
                                                           "wait"]
    rres = gpu.threadblocks[0].ops[3]
    assert [(b.kind, b.type, b.index, b.size) for b in rres.src] == [("L", "i", 0, 1), ("R", "i", 0, 1)]
    packet = read_mscclpp_plan(PACKET)
    assert packet.protocol == "LL" and packet.use_double_scratch_buffer


@pytest.mark.parametrize("field", ["name", "collective", "protocol", "inplace", "gpus"])
def test_a_missing_required_top_level_field_is_named(field):
    doc = plan_doc()
    del doc[field]
    assert f"missing required field {field!r}" in refusal(doc)


@pytest.mark.parametrize("field", ["id", "input_chunks", "output_chunks", "scratch_chunks", "channels",
                                   "remote_buffers", "threadblocks"])
def test_a_missing_required_gpu_field_is_named(field):
    doc = plan_doc()
    del doc["gpus"][1][field]
    assert f"plan.json:gpus[1]: missing required field {field!r}" in refusal(doc)


def test_a_missing_operation_name_is_named():
    doc = plan_doc()
    del doc["gpus"][0]["threadblocks"][2]["ops"][3]["name"]
    assert "gpus[0].threadblocks[2].ops[3]: missing required field 'name'" in refusal(doc)


def test_an_unknown_operation_is_refused_with_the_known_ones():
    doc = plan_doc()
    doc["gpus"][0]["threadblocks"][0]["ops"][3]["name"] = "glre"
    text = refusal(doc)
    assert "ops[3].name: unknown operation 'glre'" in text and "rres" in text


def test_a_gpu_out_of_its_place_is_refused():
    doc = plan_doc()
    doc["gpus"][1]["id"] = 0
    assert "gpus[1].id: is 0, but MSCCL++ reads gpus[1] as rank 1" in refusal(doc)


def test_an_unknown_protocol_is_refused():
    doc = plan_doc()
    doc["protocol"] = "LL128"
    assert "protocol: expected one of Simple, LL" in refusal(doc)


def test_an_unknown_buffer_type_is_refused():
    doc = plan_doc()
    doc["gpus"][0]["threadblocks"][0]["ops"][3]["src_buff"][0]["type"] = "x"
    assert "src_buff[0].type: expected one of i, o, s" in refusal(doc)


def test_a_chunk_range_outside_its_buffer_is_refused():
    doc = plan_doc()
    doc["gpus"][0]["threadblocks"][0]["ops"][3]["src_buff"][0]["index"] = 16
    assert "chunks 16..16 lie outside rank 0's i buffer (16 chunks)" in refusal(doc)


def test_a_remote_chunk_range_is_checked_against_the_peer():
    doc = plan_doc()
    doc["gpus"][0]["threadblocks"][0]["ops"][3]["src_buff"][1]["size"] = 17
    assert "lie outside rank 1's i buffer" in refusal(doc)


def test_an_operation_channel_beyond_the_thread_block_is_refused():
    doc = plan_doc()
    doc["gpus"][0]["threadblocks"][0]["ops"][0]["channel_ids"] = [1]
    assert "ops[0].channel_ids[0]: expected one of thread block 0's memory channels from 0 to 0" in refusal(doc)


def test_a_thread_block_channel_beyond_the_rank_is_refused():
    doc = plan_doc()
    doc["gpus"][0]["threadblocks"][0]["channels"][0]["channel_ids"] = [8]
    assert "threadblocks[0].channels[0].channel_ids[0]: expected one of rank 0's memory channels" in refusal(doc)


def test_a_remote_buffer_id_beyond_the_thread_block_refs_is_refused():
    doc = plan_doc()
    doc["gpus"][0]["threadblocks"][0]["ops"][3]["src_buff"][1]["buffer_id"] = 1
    assert "src_buff[1].buffer_id: expected an index into thread block 0's memory remote buffers" in refusal(doc)


def test_a_channel_to_the_rank_itself_is_refused():
    doc = plan_doc()
    doc["gpus"][0]["channels"][0]["connected_to"][0] = 0
    assert "connected_to[0]: rank 0 cannot have a channel to itself" in refusal(doc)


def test_buffer_lists_of_the_wrong_kind_are_refused():
    doc = plan_doc()
    op = doc["gpus"][0]["threadblocks"][0]["ops"][3]
    op["src_buff"] = op["src_buff"][:1]  # rres without a peer's buffer
    assert "src_buff: rres: expected a local buffer" in refusal(doc)


def test_more_operations_than_the_device_plan_holds_are_refused():
    doc = plan_doc()
    doc["gpus"][0]["threadblocks"][0]["ops"] = [{"name": "nop"}] * (rules.MAX_OPERATIONS_PER_THREADBLOCK + 1)
    assert "65 operations" in refusal(doc) and "MAX_OPERATION" in refusal(doc)


def test_more_channels_per_operation_than_mscclpp_holds_are_refused():
    doc = plan_doc()
    doc["gpus"][0]["threadblocks"][0]["ops"][0]["channel_ids"] = [0] * 9
    assert "ops[0].channel_ids: 9 entries; MSCCL++ allows at most 8" in refusal(doc)


def test_max_message_size_below_min_is_refused():
    doc = plan_doc()
    doc["min_message_size"], doc["max_message_size"] = 100, 10
    assert "max_message_size: 10 is below min_message_size 100" in refusal(doc)


def test_no_input_and_no_output_chunks_is_refused_as_mscclpp_does():
    doc = plan_doc()
    doc["gpus"][0]["input_chunks"] = doc["gpus"][0]["output_chunks"] = 0
    assert "Output or Input chunks must be greater than 0" in refusal(doc)


def test_thread_block_ids_given_twice_are_refused():
    doc = plan_doc()
    doc["gpus"][0]["threadblocks"][1]["id"] = 0
    assert "threadblocks[1].id: thread block id 0 given twice" in refusal(doc)


def test_the_command_line_refuses_a_broken_plan_in_one_line(tmp_path):
    doc = plan_doc()
    del doc["gpus"][1]["threadblocks"][3]["ops"][5]["channel_ids"]
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    refused(arborcc("verify", "plan.json", cwd=tmp_path),
            r"plan\.json:gpus\[1\]\.threadblocks\[3\]\.ops\[5\]: missing required field 'channel_ids'")


# ------------------------------------------------------------------------- random damage
def paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from paths(v, prefix + (i,))


HOSTILE = [None, True, -1, 0, 1, 7, 2**40, 2**64, -2**63, 3.5, "", "x", "i", "memory", "switch", "nop", "put",
           [], [0], [1, 1], {}, {"type": "i", "index": 0, "size": 1}, {"buffer_id": 0, "index": 0, "size": 1}]


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), edits=st.integers(1, 3), sample=st.sampled_from([ALLREDUCE, PACKET]),
       value=st.sampled_from(HOSTILE), delete=st.booleans())
def test_damaged_plans_give_a_plan_or_one_line(seed, edits, sample, value, delete):
    from arborcc.ir.mscclpp.translate import plan_to_algorithm

    doc = plan_doc(sample)
    rng = random.Random(seed)
    for _ in range(edits):
        where = rng.choice([p for p in paths(doc) if p])
        parent = doc
        for key in where[:-1]:
            parent = parent[key]
        if delete:
            del parent[where[-1]]
        else:
            parent[where[-1]] = copy.deepcopy(value)
    try:
        plan_to_algorithm(plan_from_document(doc, "plan.json"), "plan.json")
    except InputError as e:
        assert str(e).startswith("plan.json") and "\n" not in str(e)
