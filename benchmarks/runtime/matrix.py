"""Every collective of ``arborcc bench`` at many ranks against MPICH, in one run.

    .venv/bin/python benchmarks/runtime/matrix.py [--ranks 2 4 8 16]
        [--collectives C ...] [-b 4K] [-e 64M] [-f 4] [--iters 20] [-w 5] [--json OUT.json]

All-reduce, all-gather, reduce-scatter, broadcast, reduce and all-to-all (float32 sum,
root 0) at each rank count, each size swept by ``arborcc bench``'s own runner
(:func:`arborcc.bench.backends.run_backend`, the protocol of
:mod:`arborcc.bench.protocol`) on arborcc (caller-owned arrays) and then MPICH
(mpi4py), out of place. One table per collective and rank count: the medians side by
side, arborcc's busbw over MPICH's, and the slowest call (max, and its ratio to the
median) of each. Then the issue's targets, each MET or NOT MET with the numbers:

- all-reduce 4 KB: <= 8 us at 16 ranks, <= 4 us at 8 ranks; 64 KB: <= 20 us at 16 ranks;
- every collective >= 1.5x MPICH's busbw at every size, on 8 and on 16 ranks;
- arborcc's slowest call <= 3x its median, every row.

A target whose rank count was not run says "not measured"; a verdict from more ranks
than this job's CPU cores says so (the ranks then take turns on the cores: a scheduler
measurement, not evidence either way). The 8- and 16-rank numbers belong to a machine
with at least 16 cores (docs/runtime.md, "Many ranks"). The exit status is 1 when a row
could not run or a check found wrong values, else 0 (NOT MET is a finding, not a failure).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict

from arborcc.bench.backends import check_backend, run_backend
from arborcc.bench.protocol import Spec
from arborcc.errors import ArborccError, InputError
from arborcc.runtime.errors import CommunicationError
from arborcc.runtime.launch import available_cpus, oversubscription
from arborcc.sizes import format_size, parse_factor, size_argument, sweep

COLLECTIVES = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall")
BACKENDS = ("arborcc", "mpi")
KB = 1 << 10

#: (ranks, size, at most us): the all-reduce latency targets
LATENCY_TARGETS = ((16, 4 * KB, 8.0), (8, 4 * KB, 4.0), (16, 64 * KB, 20.0))
#: arborcc's busbw over MPICH's, at every size, on these rank counts
BUSBW_TARGET, BUSBW_RANKS = 1.5, (8, 16)
#: arborcc's slowest call over its median, every row
OUTLIER_TARGET = 3.0


def out_of_place(rows: list, backend: str, size: int):
    return next((r for r in rows if r.backend == backend and not r.inplace and r.requested == size), None)


def table(collective: str, ranks: int, rows: list, sizes: list[int]) -> str:
    lines = [f"### {collective}, {ranks} ranks, float32 sum, out of place", "",
             "| size | arborcc us | MPICH us | x MPICH busbw | arborcc max us | max / median | MPICH max us "
             "| #wrong arborcc / MPICH |",
             "|---|---|---|---|---|---|---|---|"]
    for s in sizes:
        a, m = out_of_place(rows, "arborcc", s), out_of_place(rows, "mpi", s)
        ran_a, ran_m = a is not None and a.time_us is not None, m is not None and m.time_us is not None
        lines.append(
            f"| {format_size(s)} | {f'{a.time_us:,.1f}' if ran_a else 'n/a'} | {f'{m.time_us:,.1f}' if ran_m else 'n/a'}"
            f" | {f'{a.busbw_gbps / m.busbw_gbps:.2f}' if ran_a and ran_m and m.busbw_gbps else '-'}"
            f" | {f'{a.max_us:,.1f}' if ran_a else 'n/a'} | {f'{a.max_us / a.time_us:.1f}' if ran_a else '-'}"
            f" | {f'{m.max_us:,.1f}' if ran_m else 'n/a'} | {wrong(a)} / {wrong(m)} |")
    return "\n".join(lines)


def wrong(row) -> str:
    """A row's count of wrong values: n/a where it did not run, N/A where nothing was checked."""
    if row is None or row.time_us is None:
        return "n/a"
    return "N/A" if row.wrong is None else str(row.wrong)


def layout_lines(ranks_run: list[int]) -> list[str]:
    """The CPU layout the runtime reads (``ARBORCC_SYSFS_ROOT`` or this machine's sysfs) and,
    per rank count, the groups its all-reduce runs hierarchically over (docs/runtime.md,
    "Many ranks"): on one socket and one L3, none."""
    from arborcc.runtime.environment import runtime_settings
    from arborcc.runtime.plan import hierarchy
    from arborcc.topology.cpus import job_layout, rank_groups, rank_placement

    layout = job_layout(runtime_settings().options.get("sysfs_root"))
    if layout is None:
        return ["# CPU layout: not readable (ranks pinned in CPU id order, every all-reduce flat)"]
    caches = len(layout.cache_domains) or "unknown"
    lines = [f"# CPU layout: {len(layout.sockets)} socket(s), {caches} L3 domain(s), {len(layout.cores)} cores, "
             f"{len(layout.cpus)} CPUs"]
    allowed = sorted(os.sched_getaffinity(0) & {c.id for c in layout.cpus}) or None
    for n in ranks_run:
        groups = rank_groups(layout, rank_placement(layout, n, allowed).cpu_of_rank)
        shape = hierarchy(groups)
        lines.append(f"# {n} ranks: " + (f"{shape[0]} groups of {shape[1]} ranks (socket / L3): the hierarchical "
                                          "all-reduce above the staged range" if shape else
                                          "one group (or unequal groups): every all-reduce flat"))
    return lines


def _crowded(ranks: int) -> str:
    cpus = available_cpus()
    return f" [{ranks} ranks on {cpus} cores: not evidence]" if ranks > cpus else ""


def targets(results: dict, sizes: list[int], ranks_run: list[int], collectives: list[str]) -> list[str]:
    """The issue's targets as lines ``MET``/``NOT MET``/``not measured`` with the numbers;
    ``results`` maps (collective, ranks) to that sweep's rows."""
    out = []
    for ranks, size, limit_us in LATENCY_TARGETS:
        what = f"all-reduce {format_size(size)} <= {limit_us:g} us at {ranks} ranks"
        row = out_of_place(results.get(("allreduce", ranks), []), "arborcc", size)
        if row is None or row.time_us is None:
            out.append(f"{what}: not measured (run --ranks {ranks} with {format_size(size)} among the sizes)")
            continue
        verdict = "MET" if row.time_us <= limit_us else "NOT MET"
        out.append(f"{what}: {verdict} ({row.time_us:.1f} us){_crowded(ranks)}")
    for ranks in BUSBW_RANKS:
        what = f"every collective >= {BUSBW_TARGET:g}x MPICH busbw at every size on {ranks} ranks"
        if ranks not in ranks_run:
            out.append(f"{what}: not measured (run --ranks {ranks})")
            continue
        ratios = []
        for c in collectives:
            for s in sizes:
                a, m = out_of_place(results[(c, ranks)], "arborcc", s), out_of_place(results[(c, ranks)], "mpi", s)
                if a and m and a.busbw_gbps and m.busbw_gbps:
                    ratios.append((a.busbw_gbps / m.busbw_gbps, c, s))
        if not ratios:
            out.append(f"{what}: not measured (no row ran on both)")
            continue
        misses = sorted(r for r in ratios if r[0] < BUSBW_TARGET)
        worst = min(ratios)
        detail = ", ".join(f"{c} {format_size(s)} {x:.2f}x" for x, c, s in misses[:8]) + (
            f" and {len(misses) - 8} more" if len(misses) > 8 else "")
        out.append(f"{what}: {'MET' if not misses else 'NOT MET'} (worst {worst[0]:.2f}x, {worst[1]} "
                   f"{format_size(worst[2])}{'; below: ' + detail if misses else ''}){_crowded(ranks)}")
    for ranks in ranks_run:
        spread = [(r.max_us / r.time_us, c, r.requested) for c in collectives for r in results[(c, ranks)]
                  if r.backend == "arborcc" and not r.inplace and r.time_us]
        if not spread:
            continue
        worst = max(spread)
        over = sum(x > OUTLIER_TARGET for x, _, _ in spread)
        out.append(f"slowest call <= {OUTLIER_TARGET:g}x median on {ranks} ranks: "
                   f"{'MET' if not over else 'NOT MET'} ({over} of {len(spread)} rows over; worst {worst[0]:.1f}x, "
                   f"{worst[1]} {format_size(worst[2])}){_crowded(ranks)}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8, 16], help="rank counts (default 2 4 8 16)")
    ap.add_argument("--collectives", nargs="+", choices=COLLECTIVES, default=list(COLLECTIVES))
    ap.add_argument("-b", "--minbytes", type=size_argument, default=4 * KB, help="smallest size (default 4K)")
    ap.add_argument("-e", "--maxbytes", type=size_argument, default=64 << 20, help="largest size (default 64M)")
    ap.add_argument("-f", "--stepfactor", default="4", help="size multiplier between rows (default 4)")
    ap.add_argument("--iters", type=int, default=20, help="timed calls per size (default 20)")
    ap.add_argument("-w", "--warmup", type=int, default=5, help="untimed calls per size (default 5)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per sweep before it is killed")
    ap.add_argument("--json", metavar="OUT", help="write every row here")
    args = ap.parse_args()
    try:
        return run(args)
    except ArborccError as e:
        print(f"matrix.py: error: {e}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    from arborcc.cli.output import check_outputs, write_output

    sizes = sweep(args.minbytes, args.maxbytes, parse_factor(args.stepfactor, "-f"), "-b/-e/-f")
    if args.iters < 1 or args.warmup < 0:
        raise InputError(f"--iters must be 1 or more and -w 0 or more, got {args.iters} and {args.warmup}",
                         source="--iters/-w")
    from arborcc.runtime.environment import MAX_RANKS

    if not 2 <= min(args.ranks) <= max(args.ranks) <= MAX_RANKS:
        raise InputError(f"2 to {MAX_RANKS} ranks (the shared-memory data plane's most), got "
                         f"{' '.join(map(str, args.ranks))}", source="--ranks")
    specs = {(c, n): Spec(collective=c, ranks=n, sizes=sizes, iters=args.iters, warmup=args.warmup,
                          timeout=args.timeout) for n in args.ranks for c in args.collectives}
    for spec in specs.values():  # refuse what cannot run before the first sweep starts
        for backend in BACKENDS:
            check_backend(backend, spec)
    check_outputs(json=args.json)
    print(f"# {' '.join(['benchmarks/runtime/matrix.py'] + sys.argv[1:])}")
    print(f"# {available_cpus()} CPU cores available; load average before: "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for line in layout_lines(args.ranks):
        print(line)
    results, failed = {}, []
    for n in args.ranks:
        crowded = oversubscription(n)
        if crowded:
            print(f"# warning: {crowded}")
        for c in args.collectives:
            rows = []
            for backend in BACKENDS:
                print(f"# {c} on {n} ranks: {backend} ...", file=sys.stderr, flush=True)
                try:
                    rows += run_backend(backend, specs[(c, n)])
                except CommunicationError as e:  # a sweep whose ranks failed: the matrix goes on
                    failed.append(f"{backend} {c} {n} ranks: {e}")
            results[(c, n)] = rows
            failed += [f"{r.backend} {c} {n} ranks {format_size(r.requested)}: {r.note}" for r in rows if r.failed]
            failed += [f"{r.backend} {c} {n} ranks {format_size(r.requested)}: {r.wrong} wrong values"
                       for r in rows if r.wrong]
            print()
            print(table(c, n, rows, sizes))
    print()
    print("## Targets")
    print()
    for line in targets(results, sizes, args.ranks, args.collectives):
        print(f"- {line}")
    print(f"\n# load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        write_output(args.json, json.dumps({"rows": [dict(asdict(r), collective=c, ranks=n)
                                                     for (c, n), rows in results.items() for r in rows]},
                                           indent=1, allow_nan=False))
    for line in failed:
        print(f"matrix.py: error: {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
