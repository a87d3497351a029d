"""NCCL's ring all-gather, reduce-scatter and reduce kernels as IR: each proved by the
verifier and run against the numpy reference, in every call mode it declares."""

import numpy as np
import pytest

from arborcc.errors import SynthesisError
from arborcc.ir.aliasing import declared_modes
from arborcc.ir.reference import make_inputs, reference, run
from arborcc.library.nccl_ring import RING_COLLECTIVES, ring_algorithm
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
