"""The runtime's design choices measured side by side (all-reduce, float32 sum, out of place).

    .venv/bin/python benchmarks/runtime_design.py

Rows: the scheduler on the calling thread vs a worker thread per thread block; large
messages read from the sender's memory (cross-memory attach) vs copied through the
shared FIFO slots twice; pipeline slices of 256 KB vs 4 MB. Median us per call (slowest
rank), 2 and 4 ranks. Each configuration runs twice, interleaved, to show the noise.
"""

from __future__ import annotations

import os
import sys

from arborcc.runtime.bench_protocol import Spec
from arborcc.runtime.benchmark import run_backend

SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20]
CONFIGS = [
    ("default: scheduler, CMA, 4 MB slices", {}),
    ("a thread per thread block", {"workers": 0}),
    ("no cross-memory attach (two copies)", {"cma_threshold": 1 << 62}),
    ("256 KB slices", {"slice_bytes": 256 << 10}),
]


def main() -> int:
    print(f"# load average before: {os.getloadavg()}")
    print("| ranks | configuration | " + " | ".join(f"{s >> 10} KB us" for s in SIZES) + " |")
    print("|---|---|" + "---|" * len(SIZES))
    for n in (2, 4):
        for _ in range(2):
            for label, opts in CONFIGS:
                rows = run_backend("arborcc", Spec(ranks=n, sizes=SIZES, iters=15, warmup=3, options=opts,
                                                   check=False, timeout=900))
                times = {r.requested: r.time_us for r in rows if not r.inplace}
                print(f"| {n} | {label} | " + " | ".join(f"{times[s]:,.1f}" for s in SIZES) + " |", flush=True)
    print(f"# load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
