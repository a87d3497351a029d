"""NCCL's ring all-gather, reduce-scatter and reduce kernels as IR: each proved by the
verifier and run against the numpy reference, in every call mode it declares."""

import numpy as np
import pytest

from arborcc.errors import SynthesisError
from arborcc.ir.aliasing import declared_modes
from arborcc.ir.reference import make_inputs, reference, run
from arborcc.library.nccl_ring import DEALINGS, RING_COLLECTIVES, ring_algorithm, ring_steps_per_threadblock
from arborcc.verify import verify_algorithm

RINGS = [[[0, 1]], [[0, 1, 2]], [[0, 2, 1, 3], [3, 1, 2, 0]], [[4, 0, 3, 1, 2]] * 2, [list(range(8))] * 3]


def check(algo, seed):
    report = verify_algorithm(algo, "legacy")
    assert report.ok, report.violations[:3]
    for mode in declared_modes(algo):
        inputs = make_inputs(algo, elems=3, seed=seed)
        for out, want in zip(run(algo, inputs, mode=mode), reference(algo, inputs)):
            if want is not None:
                np.testing.assert_allclose(out, want, rtol=1e-6)


@pytest.mark.parametrize("collective", RING_COLLECTIVES)
@pytest.mark.parametrize("rings", RINGS)
def test_ring_kernel_is_a_correct_collective(collective, rings):
    check(ring_algorithm(collective, rings), seed=len(rings[0]))


@pytest.mark.parametrize("root", [0, 2, 3])
def test_ring_reduce_is_correct_for_every_root(root):
    check(ring_algorithm("reduce", [[0, 2, 1, 3], [3, 1, 2, 0]], root), seed=root)


def test_ring_reduce_flows_from_the_rank_after_the_root_to_the_root():
    algo = ring_algorithm("reduce", [[2, 0, 3, 1]], root=3)
    first = [rp.rank for rp in algo.ranks if rp.threadblocks[0].recv == -1]
    last = [rp.rank for rp in algo.ranks if rp.threadblocks[0].send == -1]
    assert first == [1] and last == [3]


def test_ring_allgather_moves_n_minus_one_blocks_per_rank():
    n = 6
    algo = ring_algorithm("allgather", [list(range(n))])
    ops = [s.op.value for s in algo.ranks[0].threadblocks[0].steps]
    assert ops == ["s"] + ["rcs"] * (n - 2) + ["r"]


def test_ring_kernel_of_a_collective_nccl_lacks_is_refused():
    with pytest.raises(SynthesisError, match="no ring kernel for alltoall"):
        ring_algorithm("alltoall", [[0, 1]])


LANE_COLLECTIVES = ["allreduce", "allgather", "reducescatter"]


@pytest.mark.parametrize("dealing", DEALINGS)
@pytest.mark.parametrize("collective", LANE_COLLECTIVES)
@pytest.mark.parametrize("rings,lanes", [([[0, 2, 1, 3], [3, 1, 2, 0]], 2), ([[4, 0, 3, 1, 2]], 2),
                                         ([list(range(8))] * 2, 3), ([list(range(6))], 6)])
def test_ring_kernel_dealt_over_data_lanes_is_a_correct_collective(collective, rings, lanes, dealing):
    algo = ring_algorithm(collective, rings, data_lanes=lanes, dealing=dealing)
    check(algo, seed=lanes)
    whole = ring_algorithm(collective, rings)
    n = len(rings[0])
    for rank, dealt in zip(whole.ranks, algo.ranks):
        assert len(dealt.threadblocks) == lanes * len(rings)
        assert {tb.channel for tb in dealt.threadblocks} == set(range(lanes * len(rings)))
        assert sum(len(tb.steps) for tb in dealt.threadblocks) == sum(len(tb.steps) for tb in rank.threadblocks)
    longest = max(len(tb.steps) for rank in algo.ranks for tb in rank.threadblocks)
    assert longest == ring_steps_per_threadblock(collective, n, lanes)
    assert max(len(tb.steps) for rank in whole.ranks for tb in rank.threadblocks) == \
        ring_steps_per_threadblock(collective, n)


def test_ring_kernels_with_one_step_per_thread_block_take_no_data_lanes():
    with pytest.raises(SynthesisError, match="takes no data lanes"):
        ring_algorithm("broadcast", [[0, 1, 2]], data_lanes=2)
    with pytest.raises(SynthesisError, match="1 to 3 data lanes, not 4"):
        ring_algorithm("allreduce", [[0, 1, 2]], data_lanes=4)


def test_ring_positions_go_to_lanes_interleaved_or_in_contiguous_runs():
    def lanes_of_chunks(dealing):  # rank 0's thread blocks: the input chunks each lane's steps read
        algo = ring_algorithm("reducescatter", [list(range(6))], data_lanes=3, dealing=dealing)
        return [sorted({st.src_off for st in tb.steps}) for tb in algo.ranks[0].threadblocks]
    assert lanes_of_chunks("interleaved") == [[0, 3], [1, 4], [2, 5]]
    assert lanes_of_chunks("contiguous") == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(SynthesisError, match="would leave one empty"):
        ring_algorithm("allreduce", [list(range(6))], data_lanes=4, dealing="contiguous")
    with pytest.raises(SynthesisError, match="unknown dealing 'striped'"):
        ring_algorithm("allreduce", [list(range(6))], data_lanes=2, dealing="striped")
