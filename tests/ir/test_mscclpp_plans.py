"""Every MSCCL++ plan of tests/ir/samples/mscclpp (the official ones and what MSCCL++'s DSL
writes) gets a verdict: correct for the calls it claims (then it runs on the reference
executor and on the shared-memory runtime with results equal to numpy), incorrect, refused
at reading (a rule MSCCL++'s own parser enforces), or not translatable (naming what
has no IR form)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from arborcc.errors import IRFormatError
from arborcc.ir.load import load_algorithm
from arborcc.ir.mscclpp.translate import PlanNotTranslatable
from arborcc.verify import verify_algorithm
from support.cli_runs import arborcc, refused
from support.execution import assert_executes

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


def _run_plan(name: str):
    from arborcc.runtime.communicator import Communicator

    algo = load_algorithm(SAMPLES / name)
    comm = Communicator.from_env()
    try:
        x = np.arange(4096, dtype=np.float32) + 1000 * comm.rank
        comm.run_algorithm(algo, x)  # in place, as the plans claim
        return x
    finally:
        comm.close()


@pytest.mark.parametrize("name,ranks", [("official__execution-files__allreduce.json", 2),
                                        ("official__execution-files__allreduce_packet.json", 2),
                                        ("dsl__allreduce_pkt_4.json", 4),
                                        ("official__executor-tests__reduce_nvls.json", 2),  # NVLS
                                        ("official__execution-files__allreduce_pipeline.json", 4)])  # NVLS, pipelined
def test_plans_run_on_the_shared_memory_runtime(name, ranks):
    from arborcc.runtime.launch import run_ranks

    results = run_ranks(_run_plan, ranks, (name,), timeout=180)
    want = sum(np.arange(4096, dtype=np.float32) + 1000 * r for r in range(ranks))
    for got in results:
        np.testing.assert_array_equal(got, want)
