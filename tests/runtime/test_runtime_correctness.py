"""The shared-memory runtime against a numpy reference: every library algorithm and a set
of synthesized ones on 2-8 ranks, every dtype and op, in and out of place, counts of one
element and counts that do not divide into the algorithm's chunks (property tests,
bounded); plus the built-in default plan of every collective."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborcc.ir.aliasing import declared_modes
from arborcc.ir.load import load_algorithm
from arborcc.library import LIBRARY
from arborcc.runtime.lowering import chunks_per_block
from arborcc.verify import verify_algorithm
from support.msccl_samples import MSCCL_SAMPLES
from support.rankpool import as_float, make_input

DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8")
OPS = ("sum", "prod", "min", "max", "avg")
FLOATS = ("float32", "float64", "float16", "bfloat16")
EPS = {"float32": 1.2e-7, "float64": 2.3e-16, "float16": 9.8e-4, "bfloat16": 7.9e-3}

LIBRARY_CASES = [
    ("ring-allreduce", dict(ranks=2)), ("ring-allreduce", dict(ranks=3, channels=2)),
    ("ring-allreduce", dict(ranks=4, instances=2)), ("ring-allreduce", dict(ranks=8)),
    ("ring-allreduce", dict(ranks=4, inplace=False)),
    ("allpairs-allreduce", dict(ranks=3)), ("allpairs-allreduce", dict(ranks=4, inplace=False)),
    ("allpairs-allreduce", dict(ranks=8)),
    ("hd-allreduce", dict(ranks=2)), ("hd-allreduce", dict(ranks=4)), ("hd-allreduce", dict(ranks=8)),
    ("hd-allreduce", dict(ranks=4, inplace=False)),
    ("hierarchical-allreduce", dict(nodes=2, gpus_per_node=2)),
    ("hierarchical-allreduce", dict(nodes=2, gpus_per_node=3, instances=2)),
    ("ring-allgather", dict(ranks=2)), ("ring-allgather", dict(ranks=5, channels=2)),
    ("ring-allgather", dict(ranks=4, inplace=True)), ("ring-allgather", dict(ranks=8)),
    ("ring-reducescatter", dict(ranks=3)), ("ring-reducescatter", dict(ranks=4, inplace=True)),
    ("ring-reducescatter", dict(ranks=8, instances=2)),
    ("twostep-alltoall", dict(nodes=2, gpus_per_node=2)), ("twostep-alltoall", dict(nodes=3, gpus_per_node=2)),
    ("alltonext", dict(nodes=2, gpus_per_node=2)), ("alltonext", dict(nodes=2, gpus_per_node=3)),
]

SYNTH_CASES = [  # DGX-1V allocations of 2-8 GPUs
    ("1,4", "allreduce", "auto"), ("1,4,5", "allreduce", "auto"), ("1,4,5,6", "allreduce", "auto"),
    ("1,4,5,6", "allreduce", "nccl-ring"), ("0,1,2,3,4,5,6,7", "allreduce", "auto"),
    ("1,4,5", "allgather", "trees"), ("1,4,5,6", "reducescatter", "trees"), ("1,4,5,6", "broadcast", "trees"),
    ("0,1,2,3,4,5", "allgather", "trees"),
]


@lru_cache(maxsize=None)
def library_algorithm(index: int):
    name, params = LIBRARY_CASES[index]
    return LIBRARY[name](**params).algorithm


@lru_cache(maxsize=None)
def synthesized_algorithm(index: int):
    from arborcc.synth import synthesize
    from arborcc.topology.allocation import induced, resolve_gpus
    from arborcc.topology.machines import build_machine

    gpus, collective, strategy = SYNTH_CASES[index]
    machine = build_machine("dgx1v")
    return synthesize(induced(machine, resolve_gpus(machine, gpus)), collective, strategy).algorithm


def reference(collective: str, inputs: list[np.ndarray], dtype: str, op: str, count: int, root: int):
    """Every rank's expected output (None: not checked)."""
    n = len(inputs)
    vals = [as_float(x, dtype).astype(np.float64) if dtype in FLOATS else x for x in inputs]

    def combine():
        fn = {"sum": np.add, "avg": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}[op]
        acc = vals[0].copy()
        for v in vals[1:]:
            acc = fn(acc, v)
        return acc / n if op == "avg" else acc

    if collective == "allreduce":
        total = combine()
        return [total] * n
    if collective == "reduce":
        return [combine() if r == root else None for r in range(n)]
    if collective == "reducescatter":
        total = combine()
        return [total[r * count:(r + 1) * count] for r in range(n)]
    if collective == "allgather":
        return [np.concatenate(vals)] * n
    if collective == "gather":
        return [np.concatenate(vals) if r == root else None for r in range(n)]
    if collective == "alltoall":
        return [np.concatenate([vals[m][r * count:(r + 1) * count] for m in range(n)]) for r in range(n)]
    if collective == "broadcast":
        return [vals[root]] * n
    if collective == "scatter":
        return [vals[root][r * count:(r + 1) * count] for r in range(n)]
    if collective == "custom":  # all-to-next
        return [None] + [vals[r - 1] for r in range(1, n)]
    raise AssertionError(collective)


def check_outputs(outputs, expected, dtype: str, op: str, n: int, what: str) -> None:
    for r, (got, want) in enumerate(zip(outputs, expected)):
        if want is None:
            continue
        assert got.shape == want.shape, f"{what}: rank {r}: shape {got.shape}, expected {want.shape}"
        if dtype in FLOATS and op not in ("min", "max"):
            g = as_float(got, dtype).astype(np.float64)
            scale = np.maximum(1.0, np.abs(want))
            tol = 8 * n * n * EPS[dtype]  # n - 1 roundings of values up to 2n
            bad = np.flatnonzero(np.abs(g - want) > tol * scale)
        else:
            g = as_float(got, dtype).astype(np.float64) if dtype in FLOATS else got
            bad = np.flatnonzero(g != want)
        assert bad.size == 0, (f"{what}: rank {r}: {bad.size} of {want.size} elements differ, first at {bad[0]}: "
                               f"got {g[bad[0]]}, expected {want[bad[0]]}")


def run_and_check(pools, algo, key, mode, dtype, op, count, seed, collective=None, root=0):
    n = algo.num_ranks if algo is not None else pools.world
    coll = algo.collective if algo is not None else collective
    if coll not in ("allreduce", "reduce", "reducescatter") or (op == "avg" and dtype not in FLOATS):
        op = "sum"  # no reduction (or avg undefined): the op does not matter
    pool = pools(n)
    outputs = pool.run(algo=algo, key=key, collective=collective, mode=mode, dtype=dtype, op=op, count=count,
                       seed=seed, root=root)
    blocks_in = n if coll in ("reducescatter", "alltoall", "scatter") else 1
    inputs = [make_input(dtype, op, count * blocks_in, r, seed) for r in range(n)]
    expected = reference(coll, inputs, dtype, op, count, root)
    check_outputs(outputs, expected, dtype, op, n, f"{key or coll} {mode} {dtype} {op} count={count}")


@lru_cache(maxsize=None)
def sample_algorithm(index: int):
    return load_algorithm(MSCCL_SAMPLES[index])


def algorithm_cases():
    return ([("lib", i) for i in range(len(LIBRARY_CASES))] + [("synth", i) for i in range(len(SYNTH_CASES))]
            + [("sample", i) for i in range(len(MSCCL_SAMPLES))])


def get_algorithm(kind: str, index: int):
    return {"lib": library_algorithm, "synth": synthesized_algorithm, "sample": sample_algorithm}[kind](index)


PROPERTY_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


@PROPERTY_SETTINGS
@given(case=st.sampled_from(algorithm_cases()), dtype=st.sampled_from(DTYPES), op=st.sampled_from(OPS),
       data=st.data())
def test_algorithms_match_numpy(pools, case, dtype, op, data):
    """Library and synthesized algorithms, random count (1, multiples of the chunk count,
    and remainders), every dtype and op, each mode the algorithm declares."""
    algo = get_algorithm(*case)
    mode = data.draw(st.sampled_from([m.value for m in declared_modes(algo)]), label="mode")
    per_block = chunks_per_block(algo)
    multiple = data.draw(st.one_of(st.integers(0, 3), st.sampled_from([257, 1031])), label="multiple")
    multiple = min(multiple, max(1, 60_000 // per_block))  # large enough for several slices, still fast
    extra = data.draw(st.integers(0, max(0, min(per_block - 1, 40))), label="extra")
    count = max(1, per_block * multiple + extra)
    if algo.collective == "custom" and count % per_block:  # a custom collective has no tail algorithm
        count = per_block * max(1, multiple)
    seed = data.draw(st.integers(0, 2 ** 16), label="seed")
    run_and_check(pools, algo, f"{case[0]}{case[1]}", mode, dtype, op, count, seed)


@pytest.mark.parametrize("kind, index", algorithm_cases(), ids=[
    f"{n}-{'-'.join(f'{k}{v}' for k, v in p.items())}" for n, p in LIBRARY_CASES] + [
    f"synth-{g}-{c}-{s}" for g, c, s in SYNTH_CASES] + [f"sample-{p.stem}" for p in MSCCL_SAMPLES])
def test_every_algorithm_verifies_and_runs(pools, kind, index):
    """Each algorithm at least once: verified (every mode it declares), then run in each
    declared mode (float32 sum, a count with a tail)."""
    algo = get_algorithm(kind, index)
    assert declared_modes(algo)
    assert verify_algorithm(algo).ok
    per_block = chunks_per_block(algo)
    count = 2 * per_block + (0 if algo.collective == "custom" else max(1, per_block // 3))
    for mode in declared_modes(algo):
        run_and_check(pools, algo, f"{kind}{index}", mode.value, "float32", "sum", count, seed=index)


def test_every_library_entry_is_covered():
    assert {name for name, _ in LIBRARY_CASES} == set(LIBRARY)


PLAN_COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce")


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(n=st.sampled_from([2, 3, 4, 8]), collective=st.sampled_from(PLAN_COLLECTIVES), dtype=st.sampled_from(DTYPES),
       op=st.sampled_from(OPS), mode=st.sampled_from(["inplace", "outofplace"]),
       count=st.one_of(st.integers(1, 40), st.integers(60_000, 70_000)), seed=st.integers(0, 99), data=st.data())
def test_default_plan_matches_numpy(pools, n, collective, dtype, op, mode, count, seed, data):
    """The public collectives (built-in plan: one-shot and owner all-reduce, direct others)."""
    root = data.draw(st.integers(0, n - 1), label="root")

    class World:
        world = n

        def __call__(self, k):
            return pools(k)

    run_and_check(World(), None, None, mode, dtype, op, count, seed, collective=collective, root=root)


#: the data plane's ways of moving a message, each forced on a pool of its own
TRANSPORTS = {
    # reductions read their peers' memory (remote messages, pinned sources, demotion)
    "cross-memory-attach": dict(reduce_cma_threshold=1024, cma_threshold=1024),
    # every message through the slots (a sender copies once, the receivers of the same
    # bytes share that slot)
    "slots": dict(cma_threshold=1 << 62, reduce_cma_threshold=1 << 62),
    # a worker thread per thread block
    "workers": dict(workers=0),
}


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(transport=st.sampled_from(sorted(TRANSPORTS)), n=st.sampled_from([2, 3, 4]),
       collective=st.sampled_from(PLAN_COLLECTIVES), dtype=st.sampled_from(("float32", "float16", "int64")),
       op=st.sampled_from(OPS), mode=st.sampled_from(["inplace", "outofplace"]),
       count=st.one_of(st.integers(1, 40), st.integers(60_000, 70_000)), seed=st.integers(0, 99), data=st.data())
def test_transports_match_numpy(pools, transport, n, collective, dtype, op, mode, count, seed, data):
    """The built-in plan with every way of moving messages (whatever the sizes pick by default)."""
    root = data.draw(st.integers(0, n - 1), label="root")

    class World:
        world = n

        def __call__(self, k):
            return pools(k, **TRANSPORTS[transport])

    run_and_check(World(), None, None, mode, "float32" if op == "avg" and dtype == "int64" else dtype, op, count,
                  seed, collective=collective, root=root)


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
@pytest.mark.parametrize("name", ["allpairs-allreduce", "ring-allreduce", "hd-allreduce", "ring-allgather"])
def test_library_transports_match_numpy(pools, transport, name):
    """Library algorithms on 4 ranks (sends of the same chunk to several peers, receive-and-send
    steps, in place) with every way of moving messages."""
    algo = LIBRARY[name](ranks=4).algorithm
    per_block = chunks_per_block(algo)
    for mode in declared_modes(algo):
        for count in (per_block * 1031 + 3, per_block * 9000):
            run_and_check(lambda k: pools(k, **TRANSPORTS[transport]), algo, f"{name}-{transport}", mode.value,
                          "float32", "sum", count, seed=count)
