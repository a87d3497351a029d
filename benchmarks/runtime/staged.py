"""The staged all-reduce against the interpreted one, side by side in one job per rank
count, and what this machine's cross-core copy rates allow.

    .venv/bin/python benchmarks/runtime/staged.py [--ranks 2 4] [--sizes 64K 256K 1M 4M] [--rounds 7]

Ways (in-place float32 sum on caller-owned numpy arrays, each prepared once as the torch
backend prepares ``dist.all_reduce``: ``Communicator.inplace_allreduce``):
``one-shot`` (the interpreted one-shot algorithm), ``owner`` (the interpreted owner
all-reduce: reduce-scatter + all-gather through the FIFOs, cross-memory attach from
512 KB), ``staged`` (the same owner all-reduce run through the staging ring,
``Options.staged_bytes``), ``default`` (what the built-in plan picks: since the staged
path, staged up to ``staged_bytes``). Every way runs in rounds that rotate their order; a
sample is a barrier and a batch of calls timed together (16 up to 1 MB, 16 MB of calls
above, as ``benchmarks/torch/allreduce.py`` times them), the slowest rank's time counts;
a row shows the median sample per call.

Copy rates (``--rates``): two processes on the two CPUs pass a buffer through shared
memory: the writer copies its private buffer into it (lines the reader read last: each
store must take the line back from the other CPU's cache), then the reader copies it
out (each load fetches a line from the other CPU's cache). A staged all-reduce of N bytes
on n ranks must, per rank, write (n-1)/n x N bytes its peers read (the shares for their
owners) and N/n bytes they read (its reduced share), and read (n-1)/n x N bytes from
the peers (their shares for it) and (n-1)/n x N (their reduced shares): the printed bound
is that time at the measured rates (the local copies and reductions not counted), for
rank counts up to the CPU count (each rank on a CPU of its own).
"""

from __future__ import annotations

import argparse
import mmap
import os
import statistics
import sys
import time

import numpy as np

from arborcc.runtime.plan import DEFAULT_SMALL_BYTES

KB, MB = 1 << 10, 1 << 20
SIZES = [64 * KB, 128 * KB, 256 * KB, 512 * KB, 1 * MB, 2 * MB, 4 * MB]
WAYS = ("one-shot", "owner", "staged", "default")


def batch_of(size: int) -> int:
    """Calls per sample: 16 up to 1 MB, at least 16 MB of calls above (as benchmarks/torch/allreduce.py)."""
    return max(1, min(16, 16 * MB // size))


def _rank(sizes: list[int], rounds: int) -> dict:
    from arborcc.runtime import Communicator, Plan

    comm = Communicator.from_env(Plan())
    default_small, default_staged = comm.plan.small_bytes, comm.options.staged_bytes
    slowest = np.zeros(1, np.float64)
    table: dict[int, dict[str, float]] = {}
    for size in sizes:
        count = size // 4
        x = np.ones(count, np.float32)
        runs = {}
        for way in WAYS:
            comm.plan.small_bytes = {"one-shot": 1 << 62, "default": default_small}.get(way, 0)
            comm.options.staged_bytes = {"default": default_staged, "staged": 1 << 62}.get(way, 0)
            runs[way] = comm.inplace_allreduce(count, "float32")
        comm.plan.small_bytes, comm.options.staged_bytes = default_small, default_staged
        batch = batch_of(size)
        samples: dict[str, list[float]] = {w: [] for w in WAYS}
        for rnd in range(rounds):
            order = WAYS[rnd % len(WAYS):] + WAYS[:rnd % len(WAYS)]
            for way in order:
                run, address = runs[way], x.ctypes.data
                for _ in range(3):  # warm-up
                    x.fill(1.0)
                    run(address)
                x.fill(1.0)
                comm.barrier()
                t0 = time.perf_counter()
                for _ in range(batch):
                    run(address)
                slowest[0] = (time.perf_counter() - t0) / batch
                comm.allreduce(slowest, op="max")
                samples[way].append(slowest[0] * 1e6)
                if x[0] != float(comm.world_size) ** batch:
                    raise AssertionError(f"{way} {size}: got {x[0]}")
        table[size] = {w: statistics.median(v) for w, v in samples.items()}
    comm.close()
    return table


def _rates_rank(sizes: list[int], shared: mmap.mmap, flags: mmap.mmap, samples: int) -> dict:
    """Rank 1 copies its buffer into the shared one, then rank 0 copies it out, in turns
    (the shared counter ``turn``: 2i rank 1's, 2i + 1 rank 0's); median seconds per copy."""
    rank = int(os.environ["RANK"])
    os.sched_setaffinity(0, {rank % os.cpu_count()})
    turn = np.frombuffer(flags, np.int64, 1)
    out, step = {}, 0
    for size in sizes:
        buf = np.frombuffer(shared, np.uint8, size)
        mine = np.full(size, rank + 1, np.uint8)
        times = []
        for _ in range(samples):
            mine_turn = step + (0 if rank == 1 else 1)
            while turn[0] != mine_turn:
                pass
            t0 = time.perf_counter()
            if rank == 1:
                np.copyto(buf, mine)
            else:
                np.copyto(mine, buf)
            times.append(time.perf_counter() - t0)
            turn[0] = mine_turn + 1
            step += 2
        out[size] = statistics.median(times[samples // 4:])  # the first turns warm the caches
    return out


def print_rates(sizes: list[int], ranks: list[int]) -> None:
    from arborcc.runtime.launch import run_ranks

    shared, flags = mmap.mmap(-1, max(sizes)), mmap.mmap(-1, 4096)  # shared with the forked ranks
    writer, reader = run_ranks(_rates_rank, 2, (sizes, shared, flags, 200), timeout=300)[::-1]
    print("\n## cross-core copy rates (GB/s) and the staged all-reduce's bound (us per call)\n")
    print("| size | writer GB/s | reader GB/s | " + " | ".join(f"bound {n} ranks us" for n in ranks) + " |")
    print("|---|---|---|" + "---|" * len(ranks))
    for size in sizes:
        w, r = size / writer[size], size / reader[size]
        bounds = [((n - 1) / n * size + size / n) / w + 2 * (n - 1) / n * size / r for n in ranks]
        print(f"| {size >> 10} KB | {w / 1e9:.1f} | {r / 1e9:.1f} | " +
              " | ".join(f"{b * 1e6:,.1f}" for b in bounds) + " |", flush=True)


def main() -> int:
    from arborcc.sizes import size_argument
    from arborcc.runtime.launch import run_ranks

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--sizes", type=size_argument, nargs="+", default=SIZES, help="bytes, with K/M suffixes")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--rates", action="store_true", help="also measure the cross-core copy rates and the bound")
    args = ap.parse_args()
    print(f"# benchmarks/runtime/staged.py {' '.join(sys.argv[1:])}; {os.cpu_count()} CPUs; "
          f"load average before: {os.getloadavg()}")
    for n in args.ranks:
        table = run_ranks(_rank, n, (args.sizes, args.rounds), timeout=900)[0]
        print(f"\n## {n} ranks, in-place float32 sum, caller-owned arrays (median us per call)\n")
        print("| size | " + " | ".join(WAYS) + " | staged x owner | default x before |")
        print("|---|" + "---|" * (len(WAYS) + 2))
        for size, row in table.items():
            before = row["one-shot"] if size < DEFAULT_SMALL_BYTES else row["owner"]
            print(f"| {size >> 10} KB | " + " | ".join(f"{row[w]:,.1f}" for w in WAYS) +
                  f" | {row['owner'] / row['staged']:.2f}x | {before / row['default']:.2f}x |", flush=True)
    if args.rates:  # with more ranks than CPUs, ranks share CPUs (and caches): no such bound
        print_rates(args.sizes, [n for n in args.ranks if n <= (os.cpu_count() or 1)])
    print(f"\n# load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
