"""The staged all-reduce and reduce-scatter (through the communicator's staging ring):
every dtype and operator, odd counts, in and out of place, 2-4 ranks, against numpy; the
calls are counted, so every case is known to have run staged; the staged and the
interpreted owner all-reduce agree bit for bit; failures name the rank."""

from __future__ import annotations

import numpy as np
import pytest

from arborcc.runtime.launch import run_ranks
from arborcc.runtime.plan import Plan
from support.segments import leftovers, segments

DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8")
#: 1 element; fewer than the ranks' 64-byte units; odd; a 4 KB slice's many multiples
COUNTS = (1, 7, 1001, 40_003)
OPS = ("sum", "prod", "min", "max", "avg")


def _input(dtype: str, op: str, count: int, rank: int, seed: int) -> np.ndarray:
    """Small integers, so every reduction order gives the same exact result (products of
    up to 4 ranks' values 1-4 stay exact in float16 and bfloat16)."""
    rng = np.random.default_rng([seed, rank, count])
    high = 5 if op == "prod" else 60
    return rng.integers(1 if op == "prod" else 0, high, count).astype("float32" if dtype == "bfloat16" else dtype)


def _expected(inputs: list[np.ndarray], op: str, n: int) -> np.ndarray:
    stacked = np.stack(inputs)
    dtype = stacked.dtype
    if op == "avg":
        return (stacked.astype(np.float64).sum(axis=0) / n).astype(dtype)
    if op in ("min", "max"):
        return getattr(stacked, op)(axis=0)
    return getattr(stacked, op)(axis=0, dtype=dtype)  # integers wrap around, as the runtime's


def _cases(n: int, dtypes=DTYPES, blocks: int = 1):
    """(dtype, op, count, every rank's input of ``blocks`` x count elements, the expected
    result) of every case."""
    for seed, dtype in enumerate(dtypes):
        for op in OPS:
            if op == "avg" and dtype in ("int32", "int64", "uint8"):
                continue
            for count in COUNTS:
                inputs = [_input(dtype, op, blocks * count, p, seed) for p in range(n)]
                yield dtype, op, count, inputs, _expected(inputs, op, n)


def _matches(got: np.ndarray, want: np.ndarray, dtype: str, op: str) -> bool:
    """Exact, but for the average of half types (divided in float32, rounded once more)."""
    if op == "avg" and dtype in ("float16", "bfloat16"):
        return bool(np.allclose(got, want, rtol=1e-2, atol=0))
    return bool(np.array_equal(got, want))


def _bf16(values: np.ndarray):
    """float32 values (exact in bfloat16) as the runtime's bfloat16 wrapper."""
    from arborcc.runtime.arrays import BFloat16

    return BFloat16((values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16))


def _from_bf16(bits) -> np.ndarray:
    return (bits.bits.astype(np.uint32) << 16).view(np.float32)


def _staged_rank(options: dict) -> dict:
    from arborcc.runtime import Communicator

    # the owner all-reduce at every size (no one-shot below 256 KB)
    comm = Communicator.from_env(Plan(small_bytes=0), timeout=30, **options)
    r, n = comm.rank, comm.world_size
    wrong, cases = [], 0
    for dtype, op, count, inputs, want in _cases(n):
        for inplace in (True, False):
            x = inputs[r].copy()
            send = _bf16(x) if dtype == "bfloat16" else x
            if inplace:
                comm.allreduce(send, op=op)
                got = send
            else:
                out = _bf16(np.zeros(count, np.float32)) if dtype == "bfloat16" else np.zeros(count, dtype)
                comm.allreduce(send, out, op=op)
                comm.allreduce(send, out, op=op)  # the repeated call's fast path
                got = out
                if not np.array_equal(_from_bf16(send) if dtype == "bfloat16" else send, inputs[r]):
                    wrong.append(("input changed", dtype, op, count))
            if not _matches(_from_bf16(got) if dtype == "bfloat16" else got, want, dtype, op):
                wrong.append((dtype, op, count, inplace))
            cases += 1
    staged = comm.staged_calls
    comm.close()
    return {"wrong": wrong, "cases": cases, "staged_calls": staged}


@pytest.mark.parametrize("ranks, options", [
    (2, {}),
    (3, dict(staged_slice_bytes=4096)),  # many slices: the ring wraps inside a call
    (4, dict(staged_slice_bytes=4096, slots=1, slot_bytes=64 << 10)),  # a ring of 15 slots
], ids=["2-ranks", "3-ranks-4K-slices", "4-ranks-small-ring"])
def test_staged_allreduce_matches_numpy(ranks, options):
    before = segments()
    # every size below runs staged: the built-in plan's owner all-reduce from 1 byte
    options = dict(options, staged_bytes=1 << 30)
    results = run_ranks(_staged_rank, ranks, (options,), timeout=240)
    cases = 2 * sum(1 for _ in _cases(ranks))  # in and out of place
    for res in results:
        assert res["wrong"] == []
        assert res["cases"] == cases
        assert res["staged_calls"] == cases * 3 // 2  # out of place runs twice
    assert leftovers(before) == set()


def _report(comm, wrong: list, cases: int) -> dict:
    """What a rank found, with its staged calls (all, and those with shared inputs); closes ``comm``."""
    calls, shared = comm.staged_calls, comm.staged_shared_calls
    comm.close()
    return {"wrong": wrong, "cases": cases, "calls": calls, "shared": shared}


def _shared_rank(options: dict) -> dict:
    """All-reduces whose input lies in a shared array: the peers read it from there."""
    from arborcc.runtime import Communicator

    comm = Communicator.from_env(Plan(small_bytes=0), timeout=30, **options)
    r, n = comm.rank, comm.world_size
    wrong, cases = [], 0
    for dtype, op, count, inputs, want in _cases(n, [d for d in DTYPES if d != "bfloat16"]):
        # one odd element in front: the buffers are not aligned to anything
        memory = comm.shared_array(1 + 2 * count, dtype)
        for way in ("in place", "to a private array", "to a shared array"):
            send = memory[1:1 + count]
            send[:] = inputs[r]
            if way == "in place":
                comm.allreduce(send, op=op)
                got = send
            else:
                got = memory[1 + count:] if way == "to a shared array" else np.zeros(count, dtype)
                comm.allreduce(send, got, op=op)
                if not np.array_equal(send, inputs[r]):
                    wrong.append(("input changed", dtype, op, count))
            if not _matches(got, want, dtype, op):
                wrong.append((dtype, op, count, way))
            cases += 1
        comm.free_shared(memory)
    return _report(comm, wrong, cases)


@pytest.mark.parametrize("ranks, options", [(2, {}), (3, dict(staged_slice_bytes=4096))],
                         ids=["2-ranks", "3-ranks-4K-slices"])
def test_staged_allreduce_of_shared_arrays_matches_numpy(ranks, options):
    before = segments()
    results = run_ranks(_shared_rank, ranks, (dict(options, staged_bytes=1 << 30),), timeout=240)
    cases = 3 * sum(1 for _ in _cases(ranks, [d for d in DTYPES if d != "bfloat16"]))
    for res in results:
        assert res["wrong"] == []
        assert res["cases"] == res["calls"] == res["shared"] == cases
    assert leftovers(before) == set()


def _agree_rank(count: int) -> dict:
    """Random float32 data (sums differ by reduction order) through the staged and the
    interpreted owner all-reduce of the same communicator: the same bits."""
    from arborcc.runtime import Communicator

    comm = Communicator.from_env(Plan(small_bytes=0), timeout=30)
    rng = np.random.default_rng([7, comm.rank])
    x = rng.standard_normal(count).astype(np.float32)
    staged = x.copy()
    comm.allreduce(staged)
    calls = comm.staged_calls
    # the same reductions interpreted: out of place (a call shape not prepared yet), staging off
    comm.options.staged_bytes = 0
    interpreted = np.zeros_like(x)
    comm.allreduce(x, interpreted)
    calls_after = comm.staged_calls
    comm.close()
    return {"calls": calls, "calls_after": calls_after, "same": bool(np.array_equal(staged, interpreted))}


@pytest.mark.parametrize("ranks", [2, 3])
def test_staged_and_interpreted_owner_allreduce_agree_bit_for_bit(ranks):
    # the staged shares are the IR's chunks when the buffer is one slice (256 KB) and its
    # 64-byte units split evenly over the ranks: each element has the same owner in both
    count = 65536 if ranks == 2 else 49152
    results = run_ranks(_agree_rank, ranks, (count,), timeout=120)
    for res in results:
        assert res["calls"] == res["calls_after"] == 1
        assert res["same"]


def test_runs_staged_only_the_builtin_owner_and_one_shot_allreduce_and_reduce_scatter():
    from arborcc.ir.aliasing import Mode
    from arborcc.library.direct import owner_allreduce

    plan, mb = Plan(), 1 << 20
    owner = plan.select("allreduce", 4, Mode.INPLACE, mb // 4, 4, 0, 2 * mb)
    assert plan.runs_staged(owner, mb, 2 * mb)
    assert not plan.runs_staged(owner, 4 * mb, 2 * mb)
    assert not plan.runs_staged(owner, mb, 0)
    one_shot = plan.select("allreduce", 4, Mode.INPLACE, 1024, 4, 0, 2 * mb)
    assert one_shot is not owner and plan.staged_kind(one_shot, 4096, 2 * mb) == "oneshot"
    assert plan.staged_kind(owner, mb, 2 * mb) == "owner"
    assert not plan.runs_staged(one_shot, 4096, 0)
    assert not plan.runs_staged(one_shot, plan.staged_small_bytes, 2 * mb)  # the owner's sizes
    assert not plan.runs_staged(owner_allreduce(4, True), mb, 2 * mb)  # the same steps, not the plan's object
    scatter = plan.select("reducescatter", 4, Mode.OUTOFPLACE, mb // 16, 4, 0, 2 * mb)
    assert plan.staged_kind(scatter, mb, 2 * mb) == "reducescatter"
    assert not plan.runs_staged(scatter, plan.staged_small_bytes - 4, 2 * mb)
    gather = plan.select("allgather", 4, Mode.OUTOFPLACE, mb // 16, 4, 0, 2 * mb)
    assert not plan.runs_staged(gather, mb, 2 * mb)


def _scatter_rank(options: dict) -> dict:
    """Reduce-scatters of caller-owned and shared inputs, in and out of place."""
    from arborcc.runtime import Communicator

    comm = Communicator.from_env(Plan(staged_small_bytes=0), timeout=30, **options)
    r, n = comm.rank, comm.world_size
    wrong, cases = [], 0
    for dtype, op, count, inputs, want in _cases(n, [d for d in DTYPES if d != "bfloat16"], blocks=n):
        block = slice(r * count, (r + 1) * count)
        memory = comm.shared_array(1 + n * count, dtype)  # unaligned: one element in front
        for way in ("in place", "out of place", "shared in place", "shared out of place"):
            send = memory[1:] if way.startswith("shared") else np.empty(n * count, dtype)
            send[:] = inputs[r]
            if way.endswith("in place"):
                got = comm.reduce_scatter(send, op=op)
            else:
                got = comm.reduce_scatter(send, np.zeros(count, dtype), op=op)
                if not np.array_equal(send, inputs[r]):
                    wrong.append(("input changed", dtype, op, count, way))
            if not _matches(got, want[block], dtype, op):
                wrong.append((dtype, op, count, way))
            cases += 1
        comm.free_shared(memory)
    return _report(comm, wrong, cases)


@pytest.mark.parametrize("ranks, options", [(2, {}), (3, dict(staged_slice_bytes=4096)), (4, {})],
                         ids=["2-ranks", "3-ranks-4K-slices", "4-ranks"])
def test_staged_reduce_scatter_matches_numpy(ranks, options):
    before = segments()
    results = run_ranks(_scatter_rank, ranks, (dict(options, staged_bytes=1 << 30),), timeout=240)
    cases = 4 * sum(1 for _ in _cases(ranks, [d for d in DTYPES if d != "bfloat16"]))
    for res in results:
        assert res["wrong"] == []
        assert res["cases"] == res["calls"] == cases
        assert res["shared"] == cases // 2
    assert leftovers(before) == set()


def _mixed_rank() -> dict:
    """Rank 0 all-reduces a shared array, the others their own arrays: each peer reads
    rank 0's input from its array and the others' from their staging rings."""
    from arborcc.runtime import Communicator

    comm = Communicator.from_env(Plan(small_bytes=0), timeout=30)
    r, n = comm.rank, comm.world_size
    memory = comm.shared_array(40_003, "float32")
    wrong = []
    for count in (1001, 40_003):
        inputs = [_input("float32", "sum", count, p, 3) for p in range(n)]
        x = memory[:count] if r == 0 else np.empty(count, np.float32)
        x[:] = inputs[r]
        comm.allreduce(x)
        if not np.array_equal(x, _expected(inputs, "sum", n)):
            wrong.append(count)
    return _report(comm, wrong, 2)


def test_ranks_may_mix_shared_and_caller_owned_inputs():
    results = run_ranks(_mixed_rank, 3, (), timeout=120)
    assert [res["wrong"] for res in results] == [[], [], []]
    assert [res["calls"] for res in results] == [2, 2, 2]
    assert [res["shared"] for res in results] == [2, 0, 0]


def _changing_sizes_rank(calls: int) -> dict:
    """Back-to-back reduce-scatters of alternating sizes: a rank finishes one without
    waiting for its peers and posts the next while they may still read what it posted
    for the last (a header per call parity keeps both)."""
    from arborcc.runtime import Communicator

    comm = Communicator.from_env(Plan(staged_small_bytes=0), timeout=30, staged_bytes=1 << 30)
    r, n = comm.rank, comm.world_size
    wrong = []
    for i in range(calls):
        count = 16 if i % 2 else 48
        send = np.arange(n * count, dtype=np.float32) + r
        got = comm.reduce_scatter(send, np.zeros(count, np.float32))
        want = n * np.arange(r * count, (r + 1) * count, dtype=np.float32) + n * (n - 1) / 2
        if not np.array_equal(got, want):
            wrong.append(i)
    return _report(comm, wrong, calls)


def test_back_to_back_staged_reduce_scatters_of_changing_sizes():
    results = run_ranks(_changing_sizes_rank, 4, (300,), timeout=120)
    for res in results:
        assert res["wrong"] == []
        assert res["calls"] == 300
