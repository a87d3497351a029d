"""Every library algorithm: postcondition on the trace, verified IR, and a numpy run that
matches the collective's reference, for several sizes, instances and channels."""

import pytest

from arborcc.errors import InputError
from arborcc.library import LIBRARY, hd_allreduce
from arborcc.verify import check_algorithm
from support.ir_checks import thread_block_rule_violations
from support.execution import alltonext_reference, assert_executes


def cases():
    for R in (2, 3, 4, 8):
        for inst in (1, 2):
            for ch in (1, 2):
                yield "ring-allreduce", dict(ranks=R, channels=ch, instances=inst)
                yield "ring-allgather", dict(ranks=R, channels=ch, instances=inst)
                yield "ring-reducescatter", dict(ranks=R, channels=ch, instances=inst)
            yield "allpairs-allreduce", dict(ranks=R, instances=inst)
            if R & (R - 1) == 0:
                yield "hd-allreduce", dict(ranks=R, instances=inst)
    for R in (1, 3, 4):
        for ip in (True, False):
            yield "ring-allreduce", dict(ranks=R, inplace=ip)
            yield "ring-allgather", dict(ranks=R, inplace=ip)
            yield "ring-reducescatter", dict(ranks=R, inplace=ip)
            yield "allpairs-allreduce", dict(ranks=R, inplace=ip)
    yield "hd-allreduce", dict(ranks=4, inplace=False)
    for N, G in ((1, 3), (2, 1), (2, 2), (2, 3), (3, 2)):
        for inst in (1, 2):
            yield "hierarchical-allreduce", dict(nodes=N, gpus_per_node=G, instances=inst)
            yield "twostep-alltoall", dict(nodes=N, gpus_per_node=G, instances=inst)
            yield "alltonext", dict(nodes=N, gpus_per_node=G, instances=inst)
        yield "hierarchical-allreduce", dict(nodes=N, gpus_per_node=G, parallel=2)


CASES = list(cases())


@pytest.mark.parametrize("name, params", CASES, ids=[f"{n}-" + "-".join(f"{k}{v}" for k, v in p.items())
                                                      for n, p in CASES])
def test_library_algorithm(name, params):
    algo, prog = LIBRARY[name](**params)
    assert prog.check(), prog.check_errors
    assert thread_block_rule_violations(algo) == []
    custom = algo.collective == "custom"
    check_algorithm(algo, "legacy" if custom else "executor")
    assert_executes(algo, alltonext_reference if custom else None)


def test_every_library_entry_is_covered():
    assert {name for name, _ in CASES} == set(LIBRARY)


def test_registry_describes_parameters():
    for name, spec in LIBRARY.items():
        assert spec.name == name
        assert spec.params and all(p.help for p in spec.params)
        built = spec(**{p.name: p.default for p in spec.params})  # defaults compile
        assert built.algorithm.num_ranks == built.program.num_ranks


def test_hd_allreduce_needs_power_of_two():
    with pytest.raises(InputError, match="power-of-two number of ranks, got 6"):
        hd_allreduce(6)


def test_library_rejects_bad_parameters():
    with pytest.raises(InputError, match="ranks must be an integer >= 1"):
        LIBRARY["ring-allreduce"](ranks=0)
    with pytest.raises(InputError, match="channels must be at most 32"):
        LIBRARY["ring-allreduce"](ranks=4, channels=33)


@pytest.mark.parametrize("name, params", [
    ("ring-allreduce", dict(ranks=4, inplace=True)), ("ring-allreduce", dict(ranks=4, inplace=False)),
    ("ring-allgather", dict(ranks=4, inplace=False)), ("ring-reducescatter", dict(ranks=4, inplace=False)),
    ("allpairs-allreduce", dict(ranks=3, inplace=False)), ("twostep-alltoall", dict(nodes=2, gpus_per_node=2)),
    ("hierarchical-allreduce", dict(nodes=2, gpus_per_node=2)),
])
def test_library_algorithms_claim_exactly_the_calls_in_which_they_verify(name, params):
    from arborcc.ir.aliasing import Mode, declared_modes
    from arborcc.verify import verify_algorithm

    algo = LIBRARY[name](**params).algorithm
    claimed = declared_modes(algo)
    assert claimed
    for mode in Mode:
        assert verify_algorithm(algo, modes=(mode,)).ok == (mode in claimed), mode
