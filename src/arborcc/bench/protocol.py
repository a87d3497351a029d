"""The benchmark protocol every back-end of ``arborcc bench`` follows (nccl-tests' manner).

Every back-end runs the same protocol: for each size, out of place then in place,
``warmup`` untimed calls, then ``iters`` calls each preceded by a barrier and timed
alone on every rank; a call's time is the slowest rank's, and a row reports the median
over the calls. With ``check``, one more call on a known pattern (small integers, exact
in every dtype) is compared with the expected result; ``#wrong`` counts the elements
that differ, over all ranks. Besides the median, a row keeps the slowest calls: the 99th
percentile and the maximum over the calls of the slowest rank's time, so that a call many
times slower than its neighbours (a rank descheduled, a page touched first) shows.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from arborcc.errors import InputError
from arborcc.ir.collectives import RANK_BLOCKED, ROOTED, busbw_factor

@dataclass
class Spec:
    """What to sweep (sizes in bytes, nccl-tests' size: the total for gathers and scatters)."""

    collective: str = "allreduce"
    ranks: int = 2
    sizes: list[int] = field(default_factory=lambda: [4096])
    dtype: str = "float32"
    op: str = "sum"
    root: int = 0
    warmup: int = 5
    iters: int = 20
    check: bool = True
    xml: str | None = None  #: an algorithm file to run (arborcc back-end)
    options: dict = field(default_factory=dict)  #: arborcc runtime options
    shared_buffers: bool = False  #: arborcc: send and receive buffers from ``Communicator.shared_array``
    timeout: float = 600.0


@dataclass
class Row:
    backend: str
    size: int
    count: int
    type: str
    redop: str
    root: int
    inplace: bool
    time_us: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    wrong: int | None
    note: str = ""
    requested: int = 0  #: the sweep size this row measures (``size`` is what divides into the ranks)
    failed: bool = False  #: the row could not run (``note`` says why); a skipped mode is not a failure
    p99_us: float | None = None  #: the 99th percentile over the calls of the slowest rank's time
    max_us: float | None = None  #: the slowest call (the slowest rank's time)


def item_size(dtype: str) -> int:
    return {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8, "uint8": 1}[dtype]


def block_count(spec: Spec, size: int) -> int:
    """Elements per rank block (NCCL's count) for a call of ``size`` bytes."""
    blocks = spec.ranks if spec.collective in RANK_BLOCKED else 1
    return max(1, size // (item_size(spec.dtype) * blocks))


#: elements per window when filling and checking buffers (bounds the memory of a check)
WINDOW = 1 << 20


def _pattern_ints(dtype: str, op: str, index: np.ndarray, rank) -> np.ndarray:
    """The check values of ``rank`` (an int or an array) at input ``index``: small integers."""
    if op == "prod":
        return np.where((index + rank) % 7 == 0, 2, 1) * np.where((index + 3 * rank) % 5 == 0, -1, 1)
    return (index * 7 + rank * 3) % 5 - (0 if dtype == "uint8" else 2)


def _inputs(dtype: str, op: str, index: np.ndarray, rank) -> np.ndarray:
    """``_pattern_ints`` as the call's element type holds them, in float64."""
    return _pattern_ints(dtype, op, index, rank).astype(np.float32 if dtype == "bfloat16" else dtype).astype(
        np.float64)


def pattern(dtype: str, op: str, count: int, rank: int, blocks: int = 1) -> np.ndarray:
    """Rank ``rank``'s check input: small integers, exact in every dtype and after any op."""
    out = np.empty(count * blocks, np.float32 if dtype == "bfloat16" else dtype)
    for lo in range(0, out.size, WINDOW):
        hi = min(lo + WINDOW, out.size)
        out[lo:hi] = _pattern_ints(dtype, op, np.arange(lo, hi), rank)
    return out


def expected(spec: Spec, count: int, rank: int, lo: int, hi: int) -> np.ndarray | None:
    """Elements ``[lo, hi)`` of what rank ``rank`` must hold after the check call (None: not
    checked), in float64."""
    n, coll, op = spec.ranks, spec.collective, spec.op
    i = np.arange(lo, hi)
    if coll in ("allreduce", "reduce", "reducescatter"):
        if coll == "reduce" and rank != spec.root:
            return None
        index = i + rank * count if coll == "reducescatter" else i
        fn = {"sum": np.add, "avg": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}[op]
        acc = _inputs(spec.dtype, op, index, 0)
        for r in range(1, n):
            acc = fn(acc, _inputs(spec.dtype, op, index, r))
        if op == "avg":
            acc = acc / n
        return np.mod(acc, 256) if spec.dtype == "uint8" else acc
    if coll == "allgather":  # block m of the output is rank m's input
        return _inputs(spec.dtype, op, i % count, i // count)
    if coll == "broadcast":
        return _inputs(spec.dtype, op, i, spec.root)
    if coll == "alltoall":  # block m of the output is block `rank` of rank m's input
        return _inputs(spec.dtype, op, rank * count + i % count, i // count)
    if coll == "gather":  # the root's block m is rank m's input
        return _inputs(spec.dtype, op, i % count, i // count) if rank == spec.root else None
    if coll == "scatter":  # rank r receives block r of the root's input
        return _inputs(spec.dtype, op, rank * count + i, spec.root)
    raise InputError(f"no benchmark for collective {coll!r}", source="--collective")


def count_wrong(got: np.ndarray, spec: Spec, count: int, rank: int) -> int:
    """Elements of ``got`` (rank ``rank``'s result) that differ from :func:`expected`,
    compared window by window."""
    wrong = 0
    for lo in range(0, got.size, WINDOW):
        hi = min(lo + WINDOW, got.size)
        want = expected(spec, count, rank, lo, hi)
        if want is None:
            return 0
        diff = np.abs(np.asarray(got[lo:hi], np.float64) - want)
        tol = 1e-2 * np.maximum(1, np.abs(want)) if spec.op == "avg" else 0
        wrong += int(np.count_nonzero(diff > tol))
    return wrong


def time_calls(call, barrier, warmup: int, iters: int) -> list[float]:
    """``warmup`` untimed calls, then ``iters`` calls each after a barrier, timed alone (s)."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(iters):
        barrier()
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return times


#: seconds: the finest step of the clocks ranks time calls with (``time.perf_counter_ns``,
#: MPI_Wtime); a median call below it is no measurement, and its busbw would be infinite
TIMER_RESOLUTION = 1e-9


def rows_from_timings(backend: str, spec: Spec, per_rank: list[dict]) -> list[Row]:
    """Combine every rank's timings into rows: slowest rank per call; the median, the 99th
    percentile and the maximum over the calls."""
    rows = []
    for size in spec.sizes:
        count = block_count(spec, size)
        nbytes = count * item_size(spec.dtype) * (spec.ranks if spec.collective in RANK_BLOCKED else 1)
        for inplace in (False, True):
            key = f"{size}:{int(inplace)}"
            entries = [r.get(key) for r in per_rank]
            root = spec.root if spec.collective in ROOTED else -1

            def not_run(note: str, failed: bool = True) -> Row:
                return Row(backend, nbytes, count, spec.dtype, spec.op, root, inplace, None, None, None, None, note,
                           size, failed)

            skipped = next((e["skipped"] for e in entries if e and "skipped" in e), None)
            if skipped is not None:
                rows.append(not_run(skipped, failed=False))
                continue
            if any(e is None or "error" in e for e in entries):
                rows.append(not_run(next((e["error"] for e in entries if e and "error" in e), "not run")))
                continue
            per_call = np.max(np.array([e["times"] for e in entries], np.float64), axis=0)
            t = float(np.median(per_call))
            if not (math.isfinite(t) and t >= TIMER_RESOLUTION):
                rows.append(not_run(f"the timer measured {t:g} s per call"))
                continue
            algbw = nbytes / t / 1e9
            wrong = sum(e["wrong"] for e in entries) if spec.check else None
            rows.append(Row(backend, nbytes, count, spec.dtype, spec.op, root, inplace, t * 1e6, algbw,
                            algbw * busbw_factor(spec.collective, spec.ranks), wrong, "", size,
                            p99_us=float(np.percentile(per_call, 99)) * 1e6, max_us=float(np.max(per_call)) * 1e6))
    return rows
