"""The memory-bandwidth bound of a collective on one machine.

Every shared-memory collective moves bytes through the same memory. With ``B`` the
machine's copy bandwidth (bytes read + written per second, measured with one copying
process per rank, as many as run at once, summed), a collective that must read and
write ``T`` bytes in total cannot finish before ``T / B``. The least traffic ``T`` of
a single-copy implementation (every input byte read once where it lies, every result
byte written once where it must end, nothing staged), for a call of ``S`` bytes
(nccl-tests' size) on ``n`` ranks:

============== ===================================================================
allreduce      inputs read (nS), each share's result read by the n-1 other ranks
               ((n-1)S), every output written (nS): ``(3n - 1) S``
allgather      every block read once where it lies (S), every output written (nS):
               ``(n + 1) S`` (in place each block stays in its owner's output: ``n S``)
reducescatter  every input read once (nS), every rank writes its block (S): ``(n + 1) S``
broadcast      the root's buffer read once (S), every output written (nS): ``(n + 1) S``
               (in place the root's stays: ``n S``)
============== ===================================================================

The bound on bus bandwidth is then ``busbw_bound = S x factor / (T / B)`` with
nccl-tests' bus-bandwidth factor.
"""

from __future__ import annotations

import multiprocessing
import os
import time

import numpy as np

from arborcc.ir.collectives import busbw_factor


def _copy_rate(nbytes: int, repeats: int, start, queue) -> None:
    src = np.ones(nbytes, np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    start.wait()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t0)
    queue.put(2 * nbytes / float(np.median(times)))


def copy_bandwidth(processes: int = 1, nbytes: int = 64 << 20, repeats: int = 7) -> float:
    """Bytes per second read + written by ``processes`` numpy copies running at once, summed."""
    processes = max(1, min(processes, os.cpu_count() or 1))
    ctx = multiprocessing.get_context("fork")
    queue, start = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_copy_rate, args=(nbytes, repeats, start, queue), daemon=True)
             for _ in range(processes)]
    for p in procs:
        p.start()
    start.set()
    rates = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(10)
    return float(sum(rates))


def min_traffic(collective: str, num_ranks: int, size: int, inplace: bool = False) -> float:
    """The least bytes read + written by a single-copy implementation (module docstring)."""
    n, s = num_ranks, float(size)
    if collective == "allreduce":
        return (3 * n - 1) * s
    if collective in ("allgather", "broadcast"):
        return (n if inplace else n + 1) * s
    if collective == "reducescatter":
        return (n + 1) * s
    raise ValueError(f"no traffic model for {collective!r}")


def busbw_bound(collective: str, num_ranks: int, size: int, bandwidth: float, inplace: bool = False) -> float:
    """The bus bandwidth (bytes/s) the memory bandwidth allows for a call of ``size`` bytes."""
    seconds = min_traffic(collective, num_ranks, size, inplace) / bandwidth
    return size * busbw_factor(collective, num_ranks) / seconds
