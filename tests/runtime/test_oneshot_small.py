"""The staged one-shot all-reduce and all-gather (small calls, runtime/csrc/staged_oneshot.hpp): every
dtype and operator, in and out of place, odd counts and counts smaller than the ranks,
the largest count below the plan's crossover, on 2, 3, 4 and 8 ranks (a few cases on 16)
against numpy; every case is counted as run staged. Its results are bit for bit those of
the interpreted one-shot program it executes (sum in rank order), on every rank. Repeated
calls of random sizes across the crossovers reuse the staging slots; a one-shot call that
does not fit a staging slot runs interpreted. The all-gather: every dtype, in and out of
place, blocks of 1 element to the largest below the crossovers, 2-8 ranks; the blocks of
16 KB and more run interpreted.
Nothing is left in /dev/shm."""

from __future__ import annotations

import numpy as np
import pytest
from support.segments import leftovers, segments

from arborcc.runtime.launch import run_ranks
from arborcc.runtime.plan import DEFAULT_STAGED_GATHER_BLOCK_BYTES, DEFAULT_STAGED_SMALL_BYTES

DTYPES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8, "uint8": 1}
OPS = ("sum", "prod", "min", "max", "avg")


def _counts(n: int, itemsize: int) -> tuple[int, ...]:
    """1, fewer than the ranks, odd, and the largest count below the one-shot's crossover."""
    return 1, max(1, n - 1), 7, 1001, DEFAULT_STAGED_SMALL_BYTES // itemsize - 1


def _input(dtype: str, op: str, count: int, rank: int, seed: int, n: int) -> np.ndarray:
    """Small integers, exact in every dtype whatever the order (products: 1s and 2s, at most
    2^8 on 8 ranks; bfloat16 sums below 256), as float32 for bfloat16."""
    rng = np.random.default_rng([seed, rank, count])
    high = min(60, 256 // n) if dtype == "bfloat16" else 60
    values = rng.integers(1, 3, count) if op == "prod" else rng.integers(0, high, count)
    return values.astype("float32" if dtype == "bfloat16" else dtype)


def _expected(inputs: list[np.ndarray], op: str, n: int) -> np.ndarray:
    stacked = np.stack(inputs)
    if op == "avg":
        return (stacked.astype(np.float64).sum(axis=0) / n).astype(stacked.dtype)
    if op in ("min", "max"):
        return getattr(stacked, op)(axis=0)
    return getattr(stacked, op)(axis=0, dtype=stacked.dtype)  # integers wrap around, as the runtime's


def _matches(got: np.ndarray, want: np.ndarray, dtype: str, op: str) -> bool:
    """Exact, but for averages (divided once more, in the element type)."""
    if op == "avg":
        return bool(np.allclose(got, want, rtol=1e-2 if dtype in ("float16", "bfloat16") else 1e-6, atol=0))
    return bool(np.array_equal(got, want))


def _array(values: np.ndarray, dtype: str):
    """The runtime's array of ``values`` (bfloat16: the runtime's wrapper of float32 values)."""
    if dtype != "bfloat16":
        return values.copy()
    from arborcc.runtime.arrays import BFloat16

    return BFloat16((values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16))


def _values(array, dtype: str) -> np.ndarray:
    return (array.bits.astype(np.uint32) << 16).view(np.float32) if dtype == "bfloat16" else array


def _numpy_rank(dtypes: list[str], ops: list[str], counts: list[int] | None) -> dict:
    """Every (dtype, op, count, in place or not) against numpy; the staged calls counted."""
    from arborcc.runtime import Communicator

    comm = Communicator.from_env(timeout=60)
    r, n = comm.rank, comm.world_size
    wrong, cases = [], 0
    for seed, dtype in enumerate(dtypes):
        for op in ops:
            if op == "avg" and dtype.startswith(("int", "uint")):
                continue
            for count in counts or _counts(n, DTYPES[dtype]):
                inputs = [_input(dtype, op, count, p, seed, n) for p in range(n)]
                want = _expected(inputs, op, n)
                for inplace in (True, False):
                    send = _array(inputs[r], dtype)
                    if inplace:
                        comm.allreduce(send, op=op)
                        got = send
                    else:
                        got = _array(np.zeros(count, inputs[r].dtype), dtype)
                        comm.allreduce(send, got, op=op)
                        if not np.array_equal(_values(send, dtype), inputs[r]):
                            wrong.append(("input changed", dtype, op, count))
                    if not _matches(_values(got, dtype), want, dtype, op):
                        wrong.append((dtype, op, count, "in place" if inplace else "out of place"))
                    cases += 1
    staged = comm.staged_calls
    comm.close()
    return {"wrong": wrong, "cases": cases, "staged": staged}


@pytest.mark.timeout(400)
@pytest.mark.parametrize("ranks", [2, 3, 4, 8])
def test_small_allreduce_matches_numpy_and_runs_staged(ranks):
    before = segments()
    results = run_ranks(_numpy_rank, ranks, (list(DTYPES), list(OPS), None), timeout=360)
    for res in results:
        assert res["wrong"] == []
        assert res["cases"] > 0 and res["staged"] == res["cases"]  # every call ran the staged one-shot
    assert leftovers(before) == set(), "an arborcc shared-memory segment was left in /dev/shm"


@pytest.mark.timeout(400)
def test_small_allreduce_on_sixteen_ranks_matches_numpy():
    before = segments()
    results = run_ranks(_numpy_rank, 16, (["float32", "bfloat16"], ["sum", "max"], [1, 5, 4093]), timeout=360)
    for res in results:
        assert res["wrong"] == []
        assert res["cases"] == 24 and res["staged"] == 24
    assert leftovers(before) == set(), "an arborcc shared-memory segment was left in /dev/shm"


def _bits_rank(dtype: str, count: int) -> dict:
    """Random (inexact) values all-reduced by the staged one-shot, then by the interpreted
    one-shot program (staging off), in place and out of place: the raw result bytes."""
    from arborcc.runtime import Communicator

    got = {}
    for staged_bytes in (1 << 20, 0):
        comm = Communicator.from_env(timeout=60, staged_bytes=staged_bytes)
        rng = np.random.default_rng([7, comm.rank])
        values = rng.standard_normal(count).astype("float32" if dtype == "bfloat16" else dtype)
        inplace = _array(values, dtype)
        comm.allreduce(inplace)
        out = _array(np.zeros(count, values.dtype), dtype)
        comm.allreduce(_array(values, dtype), out)
        got[staged_bytes] = (np.asarray(_values(inplace, dtype)).tobytes(), np.asarray(_values(out, dtype)).tobytes(),
                             comm.staged_calls)
        comm.close()
    return got


@pytest.mark.timeout(300)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_staged_one_shot_is_bit_identical_to_the_interpreted_program_on_every_rank(dtype):
    ranks, count = 5, 1001
    before = segments()
    results = run_ranks(_bits_rank, ranks, (dtype, count), timeout=240)
    staged = results[0][1 << 20]
    for res in results:
        assert res[1 << 20][2] == 2 and res[0][2] == 0  # staged, then interpreted
        assert res[1 << 20][:2] == res[0][:2] == staged[:2]  # the same bytes on every rank, both ways
        assert staged[0] == staged[1]  # in place and out of place alike
    if dtype in ("float32", "float64"):  # numpy's sum in rank order 0..n-1, one addition at a time
        inputs = [np.random.default_rng([7, p]).standard_normal(count).astype(dtype) for p in range(ranks)]
        acc = inputs[0].copy()
        for x in inputs[1:]:
            acc = acc + x
        assert acc.tobytes() == staged[0]
    assert leftovers(before) == set(), "an arborcc shared-memory segment was left in /dev/shm"


def _mixed_sizes_rank(calls: int, options: dict) -> dict:
    """Back-to-back all-reduces of random sizes (the same on every rank) from 1 element to
    1.5 MB: staged one-shot, staged owner and interpreted calls in one sequence of
    staging slots; returns the calls that came out wrong and the staged calls."""
    from arborcc.runtime import Communicator

    comm = Communicator.from_env(timeout=60, **options)
    r, n = comm.rank, comm.world_size
    rng = np.random.default_rng(11)  # the same sequence on every rank
    wrong = []
    for i in range(calls):
        count = int(rng.choice([1, 3, 100, 1000, 4095, 16383, 16384, 40000, 400_000]))
        inplace = bool(rng.integers(2))
        send = np.arange(count, dtype=np.float32) % 97 + r
        want = n * (np.arange(count, dtype=np.float32) % 97) + n * (n - 1) / 2
        got = comm.allreduce(send) if inplace else comm.allreduce(send, np.zeros(count, np.float32))
        if not np.array_equal(got, want):
            wrong.append((i, count, inplace))
    staged = comm.staged_calls
    comm.close()
    return {"wrong": wrong, "staged": staged}


def _staged_calls_expected(calls: int, slot_bytes: int) -> int:
    """How many of _mixed_sizes_rank's calls run staged: the one-shot ones that fit one
    staging slot, and the owner all-reduce up to 1 MB."""
    rng = np.random.default_rng(11)
    staged = 0
    for _ in range(calls):
        size = 4 * int(rng.choice([1, 3, 100, 1000, 4095, 16383, 16384, 40000, 400_000]))
        rng.integers(2)
        staged += size <= slot_bytes if size < DEFAULT_STAGED_SMALL_BYTES else size <= 1 << 20
    return staged


@pytest.mark.timeout(300)
@pytest.mark.parametrize("ranks, options", [(4, {}), (3, {"staged_slice_bytes": 4096})],
                         ids=["4-ranks", "3-ranks-4K-slots"])
def test_repeated_calls_of_mixed_sizes_reuse_the_staging_slots(ranks, options):
    calls = 120
    before = segments()
    results = run_ranks(_mixed_sizes_rank, ranks, (calls, options), timeout=240)
    slot = options.get("staged_slice_bytes", 256 << 10)
    for res in results:
        assert res["wrong"] == []
        assert res["staged"] == _staged_calls_expected(calls, slot)
    assert leftovers(before) == set(), "an arborcc shared-memory segment was left in /dev/shm"


def _allgather_rank() -> dict:
    """All-gathers of every dtype and block size below the crossover, in and out of place,
    against numpy; the staged calls counted."""
    from arborcc.runtime import Communicator

    comm = Communicator.from_env(timeout=60)
    r, n = comm.rank, comm.world_size
    wrong, cases = [], 0
    for seed, dtype in enumerate(DTYPES):
        # the largest block of an output below 64 KB and below 16 KB itself
        largest = min(DEFAULT_STAGED_SMALL_BYTES - 1, n * DEFAULT_STAGED_GATHER_BLOCK_BYTES - 1) // (n * DTYPES[dtype])
        for count in sorted({1, max(1, n - 1), 7, 1001, largest}):
            if count > largest:
                continue
            blocks = [_input(dtype, "sum", count, p, seed, n) for p in range(n)]
            want = np.concatenate(blocks)
            for inplace in (True, False):
                if inplace:
                    out = _array(np.zeros(n * count, want.dtype), dtype)
                    view = _array(blocks[r], dtype)
                    if dtype == "bfloat16":
                        out.bits[r * count:(r + 1) * count] = view.bits
                    else:
                        out[r * count:(r + 1) * count] = view
                    comm.allgather(None, out)
                else:
                    out = _array(np.zeros(n * count, want.dtype), dtype)
                    comm.allgather(_array(blocks[r], dtype), out)
                if not np.array_equal(_values(out, dtype), want):
                    wrong.append((dtype, count, "in place" if inplace else "out of place"))
                cases += 1
    staged = comm.staged_calls
    comm.close()
    return {"wrong": wrong, "cases": cases, "staged": staged}


@pytest.mark.timeout(400)
@pytest.mark.parametrize("ranks", [2, 3, 4, 8])
def test_small_allgather_matches_numpy_and_runs_staged(ranks):
    before = segments()
    results = run_ranks(_allgather_rank, ranks, (), timeout=360)
    for res in results:
        assert res["wrong"] == []
        assert res["cases"] > 0 and res["staged"] == res["cases"]
    assert leftovers(before) == set(), "an arborcc shared-memory segment was left in /dev/shm"


def _large_block_allgather_rank() -> dict:
    """One all-gather of 16 KB blocks (the output below 64 KB on 2 and 3 ranks)."""
    from arborcc.runtime import Communicator

    comm = Communicator.from_env(timeout=60)
    count = DEFAULT_STAGED_GATHER_BLOCK_BYTES // 4
    out = np.zeros(comm.world_size * count, np.float32)
    comm.allgather(np.full(count, comm.rank, np.float32), out)
    right = bool(np.array_equal(out, np.repeat(np.arange(comm.world_size, dtype=np.float32), count)))
    staged = comm.staged_calls
    comm.close()
    return {"right": right, "staged": staged}


def test_allgather_blocks_of_16_kb_run_interpreted():
    before = segments()
    results = run_ranks(_large_block_allgather_rank, 2, (), timeout=120)
    assert results == [{"right": True, "staged": 0}] * 2
    assert leftovers(before) == set(), "an arborcc shared-memory segment was left in /dev/shm"
