"""Instances: the copies are still the collective (verifier and numpy reference), and
simulating them equals simulating one copy with the instances shortcut."""

import numpy as np
import pytest

from arborcc.errors import SynthesisError
from arborcc.library import LIBRARY
from arborcc.ir.reference import make_inputs, reference, run
from arborcc.sim.fidelity import IDEAL
from arborcc.library.nccl_ring import ring_allreduce_algorithm, ring_broadcast_algorithm
from arborcc.sim.simulate import simulate
from arborcc.topology.machines import build_machine
from arborcc.tune.instances import with_instances
from arborcc.verify import verify_algorithm


def algorithms():
    yield ring_allreduce_algorithm([[0, 1, 2, 3]])
    yield ring_broadcast_algorithm([[0, 1, 2, 3], [0, 2, 1, 3]], root=2)
    yield LIBRARY["ring-allgather"](ranks=4).algorithm
    yield LIBRARY["ring-reducescatter"](ranks=4).algorithm
    yield LIBRARY["allpairs-allreduce"](ranks=4).algorithm
    yield LIBRARY["hd-allreduce"](ranks=4).algorithm


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("algo", list(algorithms()), ids=lambda a: a.name)
def test_instances_stay_correct(algo, n):
    inst = with_instances(algo, n)
    assert inst.chunks_per_loop == algo.chunks_per_loop * n
    report = verify_algorithm(inst, "legacy")
    assert report.ok, report.violations[:3]
    inputs = make_inputs(inst, elems=inst.chunks_per_loop * 2, seed=3)
    for out, want in zip(run(inst, inputs), reference(inst, inputs)):
        if want is not None:
            np.testing.assert_allclose(out, want, rtol=1e-6)


@pytest.mark.parametrize("size", [1 << 16, 1 << 22, 1 << 26])
def test_simulating_copies_equals_the_instances_shortcut(size):
    """n identical copies sharing links max-min fairly = one copy on 1/n of every link
    (the copies share every port, so this also exercises the max-min recomputation)."""
    topo = build_machine("dgx-a100")
    algo = ring_allreduce_algorithm([list(range(8))])
    copies = simulate(with_instances(algo, 4), topo, size, "Simple", IDEAL)
    shortcut = simulate(algo, topo, size, "Simple", IDEAL, instances=4)
    assert copies.time == pytest.approx(shortcut.time, rel=1e-4)  # equal up to rounding of the shared rates


def test_too_many_channels_is_refused():
    algo = ring_allreduce_algorithm([list(range(4))] * 16)
    with pytest.raises(SynthesisError, match="channels"):
        with_instances(algo, 4)
