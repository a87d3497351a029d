"""The runtime's design choices measured side by side (float32 sum, out of place).

    .venv/bin/python benchmarks/runtime/design.py [--ranks 2 4] [--sizes 4K 64K 1M 16M 64M]
        [--collective allreduce|allgather]

Rows: the scheduler on the calling thread vs a worker thread per thread block; large
messages read from the sender's memory (cross-memory attach) vs copied through the
shared FIFO slots twice; pipeline slices of 256 KB, 1 MB (the default) and 4 MB;
reductions that read their peers' memory from 16 KB on instead of 512 KB (below, the
messages go through the slots, copied once per sender); ranks left unpinned; waiting
ranks that yield for 1 ms before they sleep (the default with more ranks than CPUs:
100 us). With ``--collective allgather``: the caller's arrays (peers' blocks read with
cross-memory attach; by default a thread per thread block from 2 MB with more ranks
than CPUs, and with one thread per rank) vs shared arrays (``Communicator.shared_array``, read with plain
loads) written with plain stores, with streaming stores from a 4 MB output (each rank
reading the peers' blocks, or writing its own block into every rank's output: the
default) and with streaming stores always. Median us per call (slowest rank), 2 and 4
ranks. Each configuration runs twice, interleaved, to show the noise.
"""

from __future__ import annotations

import argparse
import os
import sys

from arborcc.bench.backends import run_backend
from arborcc.bench.protocol import Spec

SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20]
CONFIGS = [
    ("default: scheduler, slots/CMA, 1 MB slices", {}),
    ("a thread per thread block", {"workers": 0}),
    ("no cross-memory attach (two copies)", {"cma_threshold": 1 << 62, "reduce_cma_threshold": 1 << 62}),
    ("256 KB slices", {"slice_bytes": 256 << 10}),
    ("4 MB slices", {"slice_bytes": 4 << 20}),
    ("reductions read peers' memory from 16 KB", {"reduce_cma_threshold": 16 << 10}),
    ("ranks not pinned to CPUs", {"pin": False}),
    ("waiting ranks yield 1 ms before sleeping", {"yield_us": 1000}),
]
#: all-gather: (label, runtime options, buffers from Communicator.shared_array)
ALLGATHER_CONFIGS = [
    ("caller's arrays (cross-memory attach)", {}, False),
    ("caller's arrays, one thread per rank", {"workers": 1}, False),
    ("shared arrays, plain stores", {"stream_bytes": 0}, True),
    ("shared arrays, streaming stores from 4 MB, each rank reads the peers' blocks", {"push": False}, True),
    ("shared arrays, streaming stores from 4 MB, each rank writes its block into every output (default)", {},
     True),
    ("shared arrays, streaming stores always", {"stream_bytes": 1}, True),
]


def main() -> int:
    from arborcc.sizes import size_argument

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--sizes", type=size_argument, nargs="+", default=SIZES, help="bytes, with K/M suffixes")
    ap.add_argument("--collective", choices=("allreduce", "allgather"), default="allreduce")
    args = ap.parse_args()
    sizes = args.sizes
    print(f"# {' '.join(['benchmarks/runtime/design.py'] + sys.argv[1:])}; {os.cpu_count()} CPUs; "
          f"load average before: {os.getloadavg()} (other work shares the machine)")
    print("| ranks | configuration | " + " | ".join(f"{s >> 10} KB us" for s in sizes) + " |")
    print("|---|---|" + "---|" * len(sizes))
    configs = ALLGATHER_CONFIGS if args.collective == "allgather" else [(*c, False) for c in CONFIGS]
    for n in args.ranks:
        for _ in range(2):
            for label, opts, shared in configs:
                rows = run_backend("arborcc", Spec(collective=args.collective, ranks=n, sizes=sizes, iters=15,
                                                   warmup=3, options=opts, check=False, timeout=900,
                                                   shared_buffers=shared))
                times = {r.requested: r.time_us for r in rows if not r.inplace}
                print(f"| {n} | {label} | " + " | ".join(f"{times[s]:,.1f}" for s in sizes) + " |", flush=True)
    print(f"# load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
