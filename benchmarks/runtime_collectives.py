"""The shared-memory runtime against MPICH (mpi4py) and gloo (torch), side by side in one run.

    .venv/bin/python benchmarks/runtime_collectives.py [--quick] [--rounds N] [--collectives C ...]
        [--ranks N ...] [--sizes BYTES ...] [--json OUT.json] [--plot-dir DIR]

All-reduce (float32 sum) on 2 and 4 ranks from 4 KB to 256 MB against MPICH and gloo;
all-gather, reduce-scatter and broadcast against MPICH. All-reduce, all-gather and
broadcast run twice for arborcc: on the caller's numpy arrays (``arborcc``, read with cross-memory
attach) and on buffers from ``Communicator.shared_array`` (``arborcc-shared``: memory the
communicator owns and every rank maps, read with plain loads; ``--no-shared`` skips it). Every back-end runs the same
protocol (``arborcc.bench.protocol``: barrier, one timed call, slowest rank, median).
Prints one table per collective and rank count with busbw, arborcc's ratios, the
memory-bandwidth bound (``arborcc.bench.memory_bandwidth``) and the issue's targets:

- all-reduce: >= 10x gloo's busbw from 64 KB to 1 MB; >= 1.3x MPICH's from 64 KB to
  256 MB; at 4 KB a latency within 2x of MPICH's;
- all-gather, reduce-scatter, broadcast: the same against MPICH.

Timings on a shared machine are noisy: the back-ends run interleaved, ``--rounds`` times
in rotating order, and a row is the median over the rounds of each round's median call;
compare within one run (the script prints the load average before and after).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from dataclasses import asdict, replace

from arborcc.bench.backends import run_backend
from arborcc.bench.memory_bandwidth import busbw_bound, copy_bandwidth
from arborcc.bench.protocol import Spec
from arborcc.bench.report import plot
from arborcc.sizes import parse_size

KB, MB = 1 << 10, 1 << 20
SIZES = [4 * KB, 16 * KB, 64 * KB, 256 * KB, 1 * MB, 4 * MB, 16 * MB, 64 * MB, 256 * MB]
QUICK_SIZES = [4 * KB, 64 * KB, 1 * MB, 16 * MB]
COLLECTIVES = ("allreduce", "allgather", "reducescatter", "broadcast")
#: arborcc with send and receive buffers from Communicator.shared_array (all-gather, broadcast)
SHARED = "arborcc-shared"
SHARED_COLLECTIVES = ("allreduce", "allgather", "broadcast")


def sweep(collective: str, ranks: int, backends: list[str], sizes: list[int], rounds: int) -> list:
    """Every back-end on every size, ``rounds`` times with the back-ends interleaved (their
    order rotates each round, so load that drifts during the run hits them alike); a
    row's time is the median over the rounds of each round's median call."""
    small = [s for s in sizes if s <= 4 * MB]
    large = [s for s in sizes if s > 4 * MB]
    runs: dict[tuple, list] = {}
    for rnd in range(rounds):
        order = backends[rnd % len(backends):] + backends[:rnd % len(backends)]
        for group, iters, warmup in ((small, 50, 10), (large, 7, 5)):
            if not group:
                continue
            for backend in order:
                spec = Spec(collective=collective, ranks=ranks, sizes=group, iters=iters, warmup=warmup, check=True,
                            timeout=1800)
                print(f"# round {rnd + 1}/{rounds}: {collective} {ranks} ranks {backend} {group[0]}-{group[-1]} B",
                      file=sys.stderr, flush=True)
                for row in run_variant(backend, spec):
                    runs.setdefault((backend, row.requested, row.inplace), []).append(row)
    return [combine(group) for group in runs.values()]


def run_variant(backend: str, spec: Spec) -> list:
    """``backend``'s rows; ``arborcc-shared`` is arborcc on communicator-owned shared arrays."""
    if backend == SHARED:
        return [replace(r, backend=SHARED) for r in run_backend("arborcc", replace(spec, shared_buffers=True))]
    return run_backend(backend, spec)


def combine(rows: list) -> object:
    """One row from the same measurement's rounds: median time, #wrong summed."""
    timed = [r for r in rows if r.time_us is not None]
    if not timed:
        return rows[0]
    t = statistics.median(r.time_us for r in timed)
    scale = timed[0].time_us / t
    return replace(timed[0], time_us=t, algbw_gbps=timed[0].algbw_gbps * scale,
                   busbw_gbps=timed[0].busbw_gbps * scale, wrong=sum(r.wrong or 0 for r in rows))


def verdicts(collective: str, ranks: int, rows: list, sizes: list[int]) -> list[str]:
    def busbw(backend, size):
        r = next((r for r in rows if r.backend == backend and not r.inplace and r.requested == size), None)
        return r.busbw_gbps if r is not None else None

    def time_us(backend, size):
        r = next((r for r in rows if r.backend == backend and not r.inplace and r.requested == size), None)
        return r.time_us if r is not None else None

    out = []
    mpi_sizes = [s for s in sizes if 64 * KB <= s <= 256 * MB]
    for variant, what in (("arborcc", "caller-owned buffers"), (SHARED, "shared arrays")):
        ratios = [(s, busbw(variant, s) / busbw("mpi", s)) for s in mpi_sizes if busbw("mpi", s) and busbw(variant, s)]
        if ratios:
            worst = min(ratios, key=lambda x: x[1])
            out.append(f">= 1.3x MPICH busbw 64 KB-256 MB, {what}: {'MET' if worst[1] >= 1.3 else 'NOT MET'} "
                       f"(worst {worst[1]:.2f}x at {worst[0]} B; "
                       + ", ".join(f"{s // KB}K {r:.2f}x" for s, r in ratios) + ")")
    if collective == "allreduce" and 4 * KB in sizes and time_us("mpi", 4 * KB):
        a, m = time_us("arborcc", 4 * KB), time_us("mpi", 4 * KB)
        out.append(f"4 KB latency within 2x of MPICH: {'MET' if a <= 2 * m else 'NOT MET'} "
                   f"({a:.1f} us vs {m:.1f} us, {a / m:.2f}x)")
    gloo_sizes = [s for s in sizes if 64 * KB <= s <= 1 * MB]
    g = [(s, busbw("arborcc", s) / busbw("gloo", s)) for s in gloo_sizes if busbw("gloo", s)]
    if g:
        worst = min(g, key=lambda x: x[1])
        out.append(f">= 10x gloo busbw 64 KB-1 MB: {'MET' if worst[1] >= 10 else 'NOT MET'} "
                   f"(worst {worst[1]:.1f}x at {worst[0]} B)")
    return out


def table(collective: str, ranks: int, rows: list, backends: list[str], sizes: list[int], membw: float) -> str:
    ours = [b for b in backends if b.startswith("arborcc")]
    others = [b for b in backends if b not in ours]
    ratio_heads = [(f"x {o}" if v == "arborcc" else f"shared x {o}") for v in ours for o in others]
    head = ("| size | " + " | ".join(f"{b} us" for b in backends) + " | "
            + " | ".join(f"{b} busbw" for b in backends) + " | bound busbw | arborcc % of bound | "
            + " | ".join(ratio_heads) + " |")
    lines = [f"### {collective}, {ranks} ranks, float32 sum, out of place (busbw GB/s)", "", head,
             "|" + "---|" * (head.count("|") - 1)]
    for s in sizes:
        cells = {b: next((r for r in rows if r.backend == b and not r.inplace and r.requested == s), None)
                 for b in backends}
        if cells["arborcc"] is None or cells["arborcc"].time_us is None:
            continue
        bound = busbw_bound(collective, ranks, cells["arborcc"].size, membw) / 1e9
        a = cells["arborcc"].busbw_gbps
        label = f"{s // MB} MB" if s >= MB else f"{s // KB} KB"
        lines.append(
            f"| {label} | " + " | ".join(f"{c.time_us:,.1f}" if c and c.time_us else "n/a" for c in cells.values())
            + " | " + " | ".join(f"{c.busbw_gbps:.2f}" if c and c.busbw_gbps else "n/a" for c in cells.values())
            + f" | {bound:.2f} | {100 * a / bound:.0f}% | "
            + " | ".join(f"{cells[v].busbw_gbps / cells[o].busbw_gbps:.2f}"
                         if cells[v] and cells[v].busbw_gbps and cells[o] and cells[o].busbw_gbps else "n/a"
                         for v in ours for o in others) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="4 sizes up to 16 MB, 2 ranks")
    ap.add_argument("--json", help="write every row here")
    ap.add_argument("--plot-dir", help="write one busbw plot per collective and rank count here")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved repetitions of every sweep (default 3)")
    ap.add_argument("--collectives", nargs="+", default=list(COLLECTIVES), choices=COLLECTIVES)
    ap.add_argument("--ranks", type=int, nargs="+", help="rank counts (default 2 and 4; --quick: 2)")
    ap.add_argument("--sizes", nargs="+", help="sizes to sweep, e.g. 64K 1M (default 4 KB-256 MB, x4)")
    ap.add_argument("--no-shared", action="store_true",
                    help=f"no {SHARED} rows (all-reduce, all-gather and broadcast on Communicator.shared_array "
                    "buffers)")
    args = ap.parse_args()
    sizes = [parse_size(s) for s in args.sizes] if args.sizes else QUICK_SIZES if args.quick else SIZES
    print(f"# {' '.join(['benchmarks/runtime_collectives.py'] + sys.argv[1:])}")
    print(f"# {os.cpu_count()} CPUs; load average before: {os.getloadavg()} (other work shares the machine)")
    membw = copy_bandwidth(2)
    print(f"# memory-copy bandwidth (2 processes copying 64 MB at once, read + written): {membw / 1e9:.1f} GB/s")
    ranks = args.ranks or ([2] if args.quick else [2, 4])
    shared = [SHARED] if not args.no_shared else []
    cases = [(c, n, ["arborcc"] + (shared if c in SHARED_COLLECTIVES else []) + ["mpi"] + (["gloo"] if c == "allreduce"
                                                                                        else []))
             for c in args.collectives for n in ranks]
    everything = []
    for collective, ranks, backends in cases:
        rows = sweep(collective, ranks, backends, sizes, args.rounds)
        everything += [dict(asdict(r), collective=collective, ranks=ranks) for r in rows]
        print()
        print(table(collective, ranks, rows, backends, sizes, membw))
        print()
        for v in verdicts(collective, ranks, rows, sizes):
            print(f"- {v}")
        wrong = sum(r.wrong or 0 for r in rows)
        print(f"- #wrong over every row and back-end: {wrong}")
        if args.plot_dir:
            os.makedirs(args.plot_dir, exist_ok=True)
            spec = Spec(collective=collective, ranks=ranks, sizes=sizes)
            plot(spec, rows, backends, os.path.join(args.plot_dir, f"{collective}-{ranks}.png"), membw)
    print(f"\n# load average after: {os.getloadavg()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"membw_gbps": membw / 1e9, "rows": everything}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
