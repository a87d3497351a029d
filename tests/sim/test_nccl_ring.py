"""NCCL's ring kernel as IR: proved by the verifier and run against the numpy reference."""

import numpy as np
import pytest

from arborcc.errors import SynthesisError
from arborcc.ir.reference import make_inputs, reference, run
from arborcc.library.nccl_ring import ring_allreduce_algorithm
from arborcc.verify import verify_algorithm


@pytest.mark.parametrize("rings", [[[0, 1]], [[0, 1, 2]], [[0, 2, 1, 3], [3, 1, 2, 0]], [list(range(8))] * 3])
def test_ring_kernel_is_a_correct_allreduce(rings):
    algo = ring_allreduce_algorithm(rings)
    report = verify_algorithm(algo, "legacy")
    assert report.ok, report.violations[:3]
    inputs = make_inputs(algo, elems=len(rings) * len(rings[0]) * 3, seed=0)
    for out, want in zip(run(algo, inputs), reference(algo, inputs)):
        np.testing.assert_allclose(out, want, rtol=1e-6)


def test_ring_kernel_shape():
    n = 5
    algo = ring_allreduce_algorithm([list(range(n))])
    ops = [s.op.value for s in algo.ranks[0].threadblocks[0].steps]
    assert ops == ["s"] + ["rrs"] * (n - 2) + ["rrcs"] + ["rcs"] * (n - 2) + ["r"]


def test_ring_kernel_rejects_a_non_ring():
    with pytest.raises(SynthesisError, match="exactly once"):
        ring_allreduce_algorithm([[0, 1, 1]])


@pytest.mark.parametrize("rings,root", [([[0, 1]], 1), ([[0, 1, 2, 3]], 2), ([[0, 2, 1, 3], [3, 1, 2, 0]], 3)])
def test_ring_broadcast_is_a_correct_broadcast(rings, root):
    from arborcc.library.nccl_ring import ring_broadcast_algorithm

    algo = ring_broadcast_algorithm(rings, root)
    report = verify_algorithm(algo, "legacy")
    assert report.ok, report.violations[:3]
    inputs = make_inputs(algo, elems=len(rings) * 4, seed=1)
    for out, want in zip(run(algo, inputs), reference(algo, inputs)):
        if want is not None:
            np.testing.assert_allclose(out, want, rtol=1e-6)
