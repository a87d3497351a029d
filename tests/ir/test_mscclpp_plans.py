"""Every MSCCL++ plan of tests/ir/samples/mscclpp (the official ones and what MSCCL++'s DSL
writes) gets a verdict: correct for the calls it claims (then it runs on the reference
executor and on the shared-memory runtime with results equal to numpy), incorrect, refused
at reading (a rule MSCCL++'s own parser enforces), or not translatable (naming what
has no IR form)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborcc.errors import InputError, IRFormatError
from arborcc.ir.aliasing import Mode, declared_modes
from arborcc.ir.load import load_algorithm
from arborcc.ir.mscclpp.translate import PlanNotTranslatable
from arborcc.verify import verify_algorithm
from support.cli_runs import arborcc
from support.execution import assert_executes
from support.runtime_execution import RuntimeCase, case_id, compare_results, runtime_failures

SAMPLES = Path(__file__).parent / "samples" / "mscclpp"

#: file -> verdict: "correct", "correct-custom" (no postcondition: deadlock and races
#: checked), "incorrect-custom", "refused: FIELD", "untranslated: OPERATION"
VERDICTS = {
    "dsl__allgather.json": "correct",
    "dsl__allgather_2x4.json": "correct",
    "dsl__allgather_nvls_zero_copy_2.json": "correct",  # NVLS: gstore
    "dsl__allgather_nvls_zero_copy_4.json": "correct",
    "dsl__allgather_nvls_zero_copy_pkt_2.json": "correct",  # NVLS: gstorepkt
    "dsl__allgather_nvls_zero_copy_pkt_4.json": "correct",
    "dsl__allgather_nvls_zero_copy_pkt_8.json": "correct",
    "dsl__allgather_pkt_2.json": "correct",
    "dsl__allgather_pkt_2x2.json": "correct",
    "dsl__allgather_pkt_2x4.json": "correct",
    "dsl__allgather_pkt_4.json": "correct",
    "dsl__allgather_pkt_rppkt_2.json": "correct",
    "dsl__allgather_pkt_rppkt_4.json": "correct",
    "dsl__allgather_pkt_rppkt_8.json": "correct",
    "dsl__allgather_tbg.json": "correct",  # barriers and thread-block groups
    "dsl__allreduce_2.json": "correct",
    "dsl__allreduce_naivy_2.json": "correct",
    "dsl__allreduce_naivy_4.json": "correct",
    "dsl__allreduce_naivy_8.json": "correct",
    "dsl__allreduce_nvls_zero_copy_2.json": "correct",  # NVLS: glres
    # NVLS in a pipeline whose thread blocks hand each other the data by semaphores
    "dsl__allreduce_pipeline.json": "correct",
    "dsl__allreduce_pkt_2.json": "correct",
    "dsl__allreduce_pkt_4.json": "correct",
    "dsl__alltoall_2.json": "correct",
    "dsl__alltoall_4.json": "correct",
    "dsl__alltoall_pipeline_2.json": "correct",
    # the DSL's unit tests of single operations: many declare no input and no output
    # chunks, which MSCCL++'s executor refuses ("Output or Input chunks must be greater than 0")
    "dsl__barrier_test.json": "refused: gpus[0]",
    "dsl__copy_packet_test.json": "correct-custom",
    "dsl__copy_test.json": "correct-custom",
    "dsl__flush_fuse_test.json": "refused: gpus[0]",
    "dsl__flush_test.json": "refused: gpus[0]",
    "dsl__get_fuse_test.json": "correct-custom",
    "dsl__get_test.json": "correct-custom",
    "dsl__pipeline_test.json": "correct-custom",
    # each rank's put writes the input chunk the peer's own put reads, unordered: a race
    "dsl__put_fuse_test.json": "incorrect-custom",
    "dsl__put_packet_test.json": "correct-custom",
    "dsl__put_test.json": "correct-custom",
    "dsl__put_with_signal_and_flush_test.json": "correct-custom",
    "dsl__put_with_signal_test.json": "correct-custom",
    "dsl__read_put_packet_test.json": "refused: gpus[0]",
    "dsl__read_reduce_fuse_test.json": "correct-custom",
    "dsl__read_reduce_send_test.json": "correct-custom",
    "dsl__read_reduce_test.json": "correct-custom",
    # they read packets no operation writes: on a GPU they would wait for the flags forever
    "dsl__reduce_copy_packet_test.json": "incorrect-custom",
    "dsl__reduce_copy_send_packet_test.json": "incorrect-custom",
    "dsl__reduce_fuse_test.json": "correct-custom",
    "dsl__reduce_packets_fuse_test.json": "refused: gpus[0]",
    "dsl__reduce_packets_test.json": "refused: gpus[0]",
    "dsl__reduce_send_packet_test.json": "refused: gpus[0]",
    "dsl__reduce_send_test.json": "correct-custom",
    "dsl__reduce_test.json": "correct-custom",
    "dsl__reducescatter_2x2.json": "correct",
    "dsl__reducescatter_2x4.json": "correct",
    "dsl__reducescatter_pkt_2x2.json": "correct",
    "dsl__reducescatter_pkt_2x4.json": "correct",
    "dsl__relaxed_signal_wait_fuse_test.json": "refused: gpus[0]",
    "dsl__relaxed_signal_wait_test.json": "refused: gpus[0]",
    "dsl__semaphore.json": "refused: gpus[0]",
    "dsl__send_recv_2x2.json": "correct-custom",
    "dsl__send_recv_2x4.json": "correct-custom",
    "dsl__signal_wait_fuse_test.json": "refused: gpus[0]",
    "dsl__signal_wait_test.json": "refused: gpus[0]",
    # its gstore writes into rank 1's buffer and no signal publishes it
    "dsl__switch_broadcast_test.json": "untranslated: writes into rank 1's buffer",
    # the DSL writes an operation ("glre") that MSCCL++'s parser does not know
    "dsl__switch_reduce_test.json": "refused: gpus[0].threadblocks[0].ops[0].name",
    "dsl__tbg_copy_test.json": "correct-custom",
    "dsl__tbg_reduce_fuse_test.json": "correct-custom",
    # its res writes into rank 1's buffer and no signal follows
    "dsl__tbg_reduce_send_test.json": "untranslated: writes into rank 1's buffer",
    "dsl__tbg_reduce_test.json": "correct-custom",
    "dsl__unpack_packet_test.json": "correct-custom",
    "official__execution-files__allreduce.json": "correct",
    "official__execution-files__allreduce_packet.json": "correct",
    "official__execution-files__allreduce_pipeline.json": "correct",  # in place with output_chunks 0
    "official__executor-tests__reduce.json": "correct",
    "official__executor-tests__reduce_nvls.json": "correct",
    "official__executor-tests__reduce_nvls_pipeline.json": "correct",
    "official__executor-tests__reduce_pack.json": "correct",
    "official__executor-tests__reduce_pack_tbg.json": "correct",
    # the group members split rank 1's 2-chunk copy into scratch by chunk and rank 0's 1-chunk
    # reads by half chunk: rank 0's thread block 1 reads half of what rank 1's thread block 0
    # copies, but waits only for rank 1's thread block 1 (a race on a GPU too)
    "official__executor-tests__reduce_tbg.json": "incorrect",
    "official__executor-tests__transfer_pack.json": "correct",
    "official__executor-tests__transfer_pack_tbg.json": "correct",
}


def test_every_sample_has_a_verdict():
    assert sorted(p.name for p in SAMPLES.glob("*.json")) == sorted(VERDICTS)


@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_sample_verdict(name):
    want = VERDICTS[name]
    path = SAMPLES / name
    if want.startswith("untranslated: "):
        with pytest.raises(PlanNotTranslatable) as e:
            load_algorithm(path)
        assert e.value.problem.startswith(want.split(": ", 1)[1]) and str(path) in str(e.value)
        return
    if want.startswith("refused: "):
        with pytest.raises(IRFormatError) as e:
            load_algorithm(path)
        assert not isinstance(e.value, PlanNotTranslatable) and e.value.place == want.split(": ", 1)[1]
        return
    algo = load_algorithm(path)
    assert (algo.collective == "custom") == want.endswith("-custom")
    report = verify_algorithm(algo)
    assert report.ok == want.startswith("correct"), report.violations[:1]
    if report.ok and algo.collective != "custom":
        assert_executes(algo)


def test_the_plans_inplace_claim_is_kept():
    algo = load_algorithm(SAMPLES / "official__execution-files__allreduce.json")
    assert (algo.inplace, algo.outofplace, algo.num_ranks, algo.chunks_per_loop) == (True, False, 2, 16)
    oop = load_algorithm(SAMPLES / "dsl__alltoall_2.json")
    assert oop.collective == "alltoall"


def test_verify_and_show_read_a_plan(tmp_path):
    plan = str(SAMPLES / "official__execution-files__allreduce_packet.json")
    run = arborcc("verify", plan, cwd=tmp_path)
    assert run.code == 0 and "OK (allreduce on 2 ranks" in run.out, run.err
    run = arborcc("show", plan, cwd=tmp_path)
    assert run.code == 0 and "allreduce_pkt: allreduce on 2 ranks" in run.out and "LL" in run.out, run.err


@lru_cache(maxsize=None)
def loaded(name: str):
    return load_algorithm(SAMPLES / name)


#: every plan the verifier proves correct (for the calls it claims)
CORRECT = sorted(name for name, verdict in VERDICTS.items() if verdict.startswith("correct"))


def runtime_cases(num_ranks: int) -> list[RuntimeCase]:
    """Every correct plan of ``num_ranks`` ranks, in every mode it claims."""
    return [RuntimeCase(name, loaded(name), mode) for name in CORRECT if loaded(name).num_ranks == num_ranks
            for mode in declared_modes(loaded(name))]


@pytest.fixture(scope="module")
def runtime_verdicts():
    """Per rank count, the verdicts of one launch that runs every correct plan of that
    many ranks (or the exception that launch raised), made when first asked."""
    launched: dict[int, object] = {}

    def verdicts(num_ranks: int) -> dict[str, str]:
        if num_ranks not in launched:
            try:
                launched[num_ranks] = runtime_failures(runtime_cases(num_ranks), num_ranks, timeout=300)
            except Exception as e:  # every plan of that rank count fails with it
                launched[num_ranks] = e
        if isinstance(launched[num_ranks], Exception):
            raise launched[num_ranks]
        return launched[num_ranks]
    return verdicts


@pytest.mark.parametrize("name", CORRECT)
def test_correct_plan_runs_on_the_shared_memory_runtime(name, runtime_verdicts):
    """The runtime runs every correct plan (all collectives and custom ones), in every call
    form it claims, with every rank's result equal to numpy's (custom: to the reference
    executor's buffers). One launch per rank count runs all of them."""
    algo = loaded(name)
    modes = declared_modes(algo)
    assert modes, f"{name} claims no call form"
    verdicts = runtime_verdicts(algo.num_ranks)
    for mode in modes:
        case = case_id(RuntimeCase(name, algo, mode))
        assert verdicts[case] == "", f"{case}: {verdicts[case]}"


def test_the_runtime_runs_plans_of_every_collective_and_rank_count():
    """What the runtime test covers (docs/mscclpp.md gives these numbers)."""
    collectives = {loaded(name).collective for name in CORRECT}
    assert collectives == {"allreduce", "allgather", "reducescatter", "alltoall", "custom"}
    assert sorted({loaded(name).num_ranks for name in CORRECT}) == [1, 2, 4, 8]
    assert sum(len(runtime_cases(n)) for n in (1, 2, 4, 8)) == len(CORRECT) == 61


def _reference_buffers(case: RuntimeCase, elems: int, seed: int) -> list[dict]:
    """What a correct runtime leaves in every rank's call buffers: the reference executor's."""
    from arborcc.ir.aliasing import layouts
    from arborcc.ir.model import Buffer
    from arborcc.ir.reference import execute, make_inputs

    inputs = make_inputs(case.algo, elems, seed)
    out = []
    for lay, bufs in zip(layouts(case.algo, case.mode), execute(case.algo, inputs, mode=case.mode)):
        call = {b: np.full(lay.size(b) * elems, np.nan) for b in (Buffer.INPUT, Buffer.OUTPUT)}
        for b in (Buffer.INPUT, Buffer.OUTPUT):
            where, first = lay.placement[b]
            call[where][first * elems:first * elems + bufs[b].size] = bufs[b].ravel()
        out.append(call)
    return out


@pytest.mark.parametrize("name", ["official__execution-files__allreduce_packet.json", "dsl__reducescatter_2x2.json",
                                  "dsl__reduce_fuse_test.json", "dsl__put_test.json"])
def test_a_rank_result_that_differs_from_numpy_is_reported(name):
    from arborcc.ir.model import Buffer

    case = RuntimeCase(name, loaded(name), declared_modes(loaded(name))[0])
    good = _reference_buffers(case, 4, 0)
    assert compare_results(case, [(True, b) for b in good], 4, 0) == ""
    last = case.algo.num_ranks - 1
    bad = _reference_buffers(case, 4, 0)
    where = Buffer.INPUT if case.algo.collective in ("reducescatter", "custom") else Buffer.OUTPUT
    where = where if bad[last][where].size else Buffer.INPUT
    bad[last][where][np.flatnonzero(~np.isnan(bad[last][where]))[-1]] += 1.0
    problem = compare_results(case, [(True, b) for b in bad], 4, 0)
    assert problem.startswith(f"rank {last}: {where.value} elements") and "differ from numpy" in problem
    failed = compare_results(case, [(True, b) for b in good[:-1]] + [(False, "CommunicationError: gone")], 4, 0)
    assert failed == f"rank {last}: CommunicationError: gone"


def test_a_custom_plans_buffers_are_its_declared_chunks():
    """A custom collective's buffers hold the chunks its programs declare (more than the
    chunks per loop, or none): the count comes from them, and a buffer shorter is refused."""
    from arborcc.runtime.lowering import algorithm_call

    algo = loaded("dsl__reduce_fuse_test.json")  # 1 rank, 2 chunks per loop, input 3 chunks, output 2
    assert algorithm_call(algo, 0, 12, 8, 1000, 9000, recv_elements=8) == (8, Mode.OUTOFPLACE)
    with pytest.raises(InputError) as e:
        algorithm_call(algo, 0, 11, 8, 1000, 9000, count=8, recv_elements=8)
    assert e.value.source == "send" and "3 send chunks of 4 elements" in str(e.value)
    with pytest.raises(InputError) as e:
        algorithm_call(algo, 0, 12, 8, 1000, 9000, recv_elements=7)
    assert e.value.source == "recv"
    put = loaded("dsl__put_test.json")  # 2 ranks, input 2 chunks, no output chunks
    assert algorithm_call(put, 1, 8, 8, 1000, 9000, recv_elements=0) == (8, Mode.OUTOFPLACE)


def _in_place_addresses(algo, rank: int, count: int) -> tuple[int, int]:
    """(send, recv) addresses of an in-place call of ``count`` elements per rank block
    (8-byte elements), as the collective places its buffers."""
    from arborcc.runtime.lowering import in_place_alias

    kind, blocks = in_place_alias(algo.collective, algo.num_ranks, rank, algo.effective_root)
    base = 1 << 20
    if kind == "input_in_output":
        return base + blocks * count * 8, base
    if kind == "output_in_input":
        return base, base + blocks * count * 8
    return base, base


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(CORRECT), data=st.data(), send=st.integers(0, 300), recv=st.integers(0, 300),
       count=st.one_of(st.none(), st.integers(-3, 80), st.sampled_from([True, 2.5, "8"])))
def test_a_plans_call_runs_inside_its_buffers_or_is_refused(name, data, send, recv, count):
    """Any buffer lengths and count given to run_algorithm: accepted only where every chunk
    the rank's program reads or writes lies inside its buffer, else refused naming the
    count, the send or the receive buffer (or the plan, for a call form it does not claim)."""
    from arborcc.runtime.lowering import algorithm_call, chunk_start, chunks_per_block, lower_rank

    algo = loaded(name)
    rank = data.draw(st.integers(0, algo.num_ranks - 1), label="rank")
    if algo.collective == "custom":
        addresses = (1 << 20, 1 << 30)
    else:
        blocks = count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else send
        addresses = _in_place_addresses(algo, rank, blocks)
    try:
        got, mode = algorithm_call(algo, rank, send, 8, *addresses, count=count, recv_elements=recv)
    except InputError as e:
        assert e.source in ("count", "send", "recv", algo.name), e
        return
    per_block = chunks_per_block(algo)
    lowered = lower_rank(algo, rank, mode)
    lengths = {0: send, 1: recv}
    for code, src_buf, src_chunk, dst_buf, dst_chunk, chunks, *_ in lowered.steps:
        for buf, first in ((src_buf, src_chunk), (dst_buf, dst_chunk)):
            if buf in lengths and chunks and got // per_block:
                end = chunk_start(first + chunks - 1, per_block, got) + got // per_block
                assert end <= lengths[buf], f"buffer {buf} has {lengths[buf]} elements, the plan reaches {end}"
