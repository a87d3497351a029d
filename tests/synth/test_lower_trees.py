"""Tree lowering: blocks pipelined in rounds, relays fused, versions that would deadlock
(in the runtimes' piece model) never returned."""

import pytest
from support.execution import assert_executes

from arborcc.ir.model import Op
from arborcc.synth.lower import PIPELINE_ROUNDS, transfer_blocks
from arborcc.synth.synthesis import synthesize
from arborcc.topology.allocation import induced
from arborcc.topology.machines import build_machine
from arborcc.verify.pieces import check_pieces, deadlock_free


def test_rounds_cut_every_block_and_emit_round_by_round():
    # tree 0: 5 chunks in pieces of 3 and 2; tree 1: 3 chunks in 2 and 1; round-major
    assert transfer_blocks([5, 3], rounds=2) == [(0, 0, 3), (1, 5, 2), (0, 3, 2), (1, 7, 1)]
    assert transfer_blocks([5, 3]) == [(0, 0, 5), (1, 5, 3)]
    # never more than 64 chunks, never empty pieces
    blocks = transfer_blocks([130, 1], rounds=2)
    assert [b[2] for b in blocks] == [64, 1, 64, 2] and sum(b[2] for b in blocks) == 131


def _steps(algo):
    return [st for p in algo.ranks for tb in p.threadblocks for st in tb.steps]


def test_dgx1v_allreduce_is_pipelined_and_fused():
    r = synthesize(build_machine("dgx1v"), "allreduce", "trees")
    algo = r.algorithm
    ops = {st.op for st in _steps(algo)}
    assert Op.RECV_REDUCE_SEND in ops and Op.RECV_COPY_SEND in ops  # relays forward as they receive
    counts = [st.count for st in _steps(algo) if st.op is not Op.NOP]
    assert max(counts) <= -(-max(r.counts) // PIPELINE_ROUNDS[0])  # 8 rounds per tree block
    assert not check_pieces(algo)[0]
    assert_executes(algo, elems=2)


@pytest.mark.parametrize("gpus", [("0", "1", "2", "6"), ("0", "3", "6", "7"), ("0", "1", "2", "3", "4")])
def test_allocations_that_deadlocked_at_large_sizes_are_free_of_deadlock(gpus):
    """Session 4: these all-reduces deadlocked in the simulator from 64 MiB on (steps of
    more pieces than FIFO slots) while the message-level verifier passed them."""
    topo = induced(build_machine("dgx1v"), [f"gpu{g}" for g in gpus])
    algo = synthesize(topo, "allreduce", "trees", 0).algorithm
    assert deadlock_free(algo)
    assert_executes(algo, elems=2)


def test_dgx1v_allreduce_simulates_at_large_sizes():
    from arborcc.sim.simulate import simulate

    topo = induced(build_machine("dgx1v"), ["gpu0", "gpu1", "gpu2", "gpu6"])
    r = synthesize(topo, "allreduce", "trees", 0)
    for size in (64 << 20, 512 << 20):
        assert simulate(r.algorithm, topo, size, "Simple", routes=r.routes).time > 0
