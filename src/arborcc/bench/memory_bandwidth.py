"""What memory speed allows a collective on one machine: the ``%mem`` column of ``arborcc bench``.

Every shared-memory collective moves bytes through the same memory. ``B`` is the
machine's copy bandwidth: bytes read + written per second by one numpy copy per rank
(as many as run at once, summed), on buffers larger than the last-level cache. A call
must at least read every input byte once and write every output byte once - its
compulsory traffic ``T``, for a call of ``S`` bytes (nccl-tests' size) on ``n`` ranks:

============== ===================================================================
allreduce      every input read (nS), every output written (nS): ``2n S``
allgather      every block read once where it lies (S), every output written (nS):
               ``(n + 1) S`` (in place each block stays in its owner's output: ``n S``)
reducescatter  every input read (nS), every rank writes its block (S): ``(n + 1) S``
broadcast      the root's buffer read (S), every output written (nS): ``(n + 1) S``
               (in place the root's stays: ``n S``)
reduce         every input read (nS), the root's output written (S): ``(n + 1) S``
alltoall       every block read and written once: ``2n S`` (in place each rank's own
               block stays: ``2(n - 1) S``)
============== ===================================================================

Moving ``T`` bytes at ``B`` takes ``T / B``; :func:`busbw_bound` is the bus bandwidth
(nccl-tests' factor) of a call that takes exactly that long. It is an estimate, not a
guarantee: a call that runs from the caches moves less than ``T`` through memory, so
``arborcc bench`` shows it only for calls whose buffers, all ranks together, exceed
:data:`CACHE_MULTIPLE` times the last-level cache (:func:`last_level_cache`, from
sysfs); and a call whose mix of reads and writes moves faster than a copy (reads are
cheaper than writes on most machines) may exceed it even there.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import queue as queues
import time

import numpy as np

from arborcc.ir.collectives import busbw_factor

#: ``%mem`` is shown for calls whose compulsory traffic is at least this many times the
#: last-level cache (at most a small part of the data can then come from the caches)
CACHE_MULTIPLE = 4

#: the collectives :func:`min_traffic` knows
MODELLED = frozenset({"allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall"})

#: bytes each process copies when measuring ``B`` (more when the last-level cache is large)
COPY_BYTES = 64 << 20


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
    queue.put(2 * nbytes / max(float(np.median(times)), 1e-9))


def copy_bandwidth(processes: int = 1, nbytes: int | None = None, repeats: int = 7) -> float | None:
    """Bytes per second read + written by ``processes`` numpy copies running at once, summed
    (at most one per available CPU core); each copies ``nbytes`` (default: 64 MB, or enough
    that the buffers of all copies are twice the last-level cache). None when a copying
    process does not report within two minutes."""
    from arborcc.runtime.launch import available_cpus

    processes = max(1, min(processes, available_cpus()))
    if nbytes is None:
        cache = last_level_cache() or 0
        nbytes = max(COPY_BYTES, cache // processes)
    ctx = multiprocessing.get_context("fork")
    queue, start = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_copy_rate, args=(nbytes, repeats, start, queue), daemon=True)
             for _ in range(processes)]
    for p in procs:
        p.start()
    start.set()
    try:
        rates = [queue.get(timeout=120) for _ in procs]
    except queues.Empty:
        rates = None
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join()
    return float(sum(rates)) if rates else None


def last_level_cache(cpus: set[int] | None = None) -> int | None:
    """Bytes of last-level cache serving ``cpus`` (default: the CPUs this process may run
    on): every domain of the highest cache level counted once, from sysfs
    (:func:`arborcc.topology.cpus.read_cpu_layout`). None when sysfs does not say."""
    from arborcc.errors import TopologyError
    from arborcc.topology.cpus import read_cpu_layout

    if cpus is None:
        try:
            cpus = os.sched_getaffinity(0)
        except (AttributeError, OSError):
            return None
    try:
        layout = read_cpu_layout()
    except TopologyError:
        return None
    domains = {c.cache for c in layout.cpus if c.id in cpus and c.cache is not None}
    return layout.cache_bytes * len(domains) if layout.cache_bytes and domains else None


def min_traffic(collective: str, num_ranks: int, size: int, inplace: bool = False) -> float:
    """The compulsory bytes read + written by a call (module docstring)."""
    n, s = num_ranks, float(size)
    if collective == "allreduce":
        return 2 * n * s
    if collective in ("allgather", "broadcast"):
        return (n if inplace else n + 1) * s
    if collective in ("reducescatter", "reduce"):
        return (n + 1) * s
    if collective == "alltoall":
        return 2 * (n - 1 if inplace else n) * s
    raise ValueError(f"no traffic model for {collective!r}")


def busbw_bound(collective: str, num_ranks: int, size: int, bandwidth: float, inplace: bool = False) -> float:
    """The bus bandwidth (bytes/s) of a call of ``size`` bytes whose compulsory traffic
    moves at ``bandwidth`` (0 when the call moves nothing between ranks)."""
    traffic = min_traffic(collective, num_ranks, size, inplace)
    if traffic <= 0:
        return 0.0
    return size * busbw_factor(collective, num_ranks) / (traffic / bandwidth)


def beyond_caches(collective: str, num_ranks: int, size: int, inplace: bool, cache: int | None) -> bool:
    """Whether the call's compulsory traffic is at least :data:`CACHE_MULTIPLE` times
    ``cache`` bytes (False when the cache size is unknown)."""
    return (cache is not None and math.isfinite(cache)
            and min_traffic(collective, num_ranks, size, inplace) >= CACHE_MULTIPLE * cache)
