"""The copies one rank of a 2-rank all-gather makes, without the collective: what the
machine allows per call, the floor under ``arborcc bench --collective allgather
--shared-buffers`` on 2 ranks.

    .venv/bin/python benchmarks/runtime/allgather_copies.py [--sizes 4M 16M 64M 256M] [--reps 15]

Two processes (pinned to CPUs 0 and 1) copy at once, each on its own buffers in shared
memory (4 KB pages, as shared arrays): a block of S/2 bytes (S: the all-gather's output,
nccl-tests' size) and outputs of S bytes. Rows per size:

- ``pull, plain`` / ``pull, streaming``: copy the own block into the own output, then a
  second S/2 source (the peer's block) into the other half: S read, S written;
- ``push, streaming``: the own block stored into the own output and into a second output
  in one pass (``native.copy_to_many``): S/2 read, S written, as the all-gather's push.

A barrier starts each repetition in both processes; a row's time is the median over the
repetitions of the slower process.
"""

from __future__ import annotations

import argparse
import mmap
import multiprocessing
import os
import statistics
import sys
import time

import numpy as np

SIZES = [4 << 20, 16 << 20, 64 << 20, 256 << 20]
WAYS = ("pull, plain", "pull, streaming", "push, streaming")


def _shared(nbytes: int) -> np.ndarray:
    return np.frombuffer(mmap.mmap(-1, nbytes), np.uint8)  # MAP_SHARED anonymous: shmem, 4 KB pages


def _rank(cpu: int, size: int, reps: int, barrier, queue) -> None:
    import arborcc.runtime.native as native

    if cpu < (os.cpu_count() or 1):
        os.sched_setaffinity(0, {cpu})
    half = size // 2
    own, other = _shared(half), _shared(half)
    out, second = _shared(size), _shared(size)
    own[:], other[:] = 1, 2
    o, p, d, e = (a.ctypes.data for a in (own, other, out, second))
    ways = {
        "pull, plain": lambda: (native.copy(d, o, half, False), native.copy(d + half, p, half, False)),
        "pull, streaming": lambda: (native.copy(d, o, half, True), native.copy(d + half, p, half, True)),
        "push, streaming": lambda: native.copy_to_many([d, e + half], o, half, True),
    }
    times = {}
    for name in WAYS:
        copy = ways[name]
        copy()
        got = []
        for _ in range(reps):
            barrier.wait(timeout=120)
            t0 = time.perf_counter()
            copy()
            got.append(time.perf_counter() - t0)
        times[name] = got
    queue.put(times)


def main() -> int:
    from arborcc.sizes import size_argument

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=size_argument, nargs="+", default=SIZES, help="bytes, with K/M suffixes")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    print(f"# {' '.join(['benchmarks/runtime/allgather_copies.py'] + sys.argv[1:])}; load average before: "
          f"{os.getloadavg()}")
    print("| size | " + " | ".join(f"{w} us" for w in WAYS) + " |")
    print("|---|" + "---|" * len(WAYS))
    ctx = multiprocessing.get_context("fork")
    for size in args.sizes:
        barrier, queue = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_rank, args=(cpu, size, args.reps, barrier, queue), daemon=True)
                 for cpu in (0, 1)]
        for p in procs:
            p.start()
        results = [queue.get(timeout=600) for _ in procs]
        for p in procs:
            p.join(30)
        cells = [statistics.median(max(a, b) for a, b in zip(results[0][w], results[1][w])) * 1e6 for w in WAYS]
        print(f"| {size >> 20} MB | " + " | ".join(f"{c:,.1f}" for c in cells) + " |", flush=True)
    print(f"# load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
