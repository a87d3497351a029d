"""End-to-end synthesis (strategy "trees") against the bound and the NCCL-ring baseline.

One row per topology: every unique DGX-1V (46) and DGX-1P (14) allocation class of
3-8 NVLink-connected GPUs, dgx2, dgx-a100, dgx-h100, and 2 and 4 DGX-A100 nodes on a
fat tree. Columns: ranks, the collective's bound and the algbw the emitted (lowered,
verified) algorithm achieves in the bandwidth model (GB/s, nccl-tests convention),
their ratio, trees, chunks, synthesis time (median over --repeat runs, perf_counter
around ``synthesize``), and for all-reduce the NCCL-ring algbw and trees/ring speedup.
Each group ends with a summary: rows at >= 99% of bound, median and max synthesis
time; the summary ends with the issue's time targets (8 GPUs < 0.1 s, 2x8 A100 < 1 s,
4x8 A100 < 3 s), judged on all-reduce medians. Synthesis time is the whole
``synthesize`` call: bound, packing, chunk rounding, lowering, compilation and
verification, on a freshly built topology (routes are computed inside the timer).

    python benchmarks/synthesis/end_to_end.py                 # everything (several minutes on 2 cores)
    python benchmarks/synthesis/end_to_end.py --quick         # 5 DGX-1V classes + dgx-a100
    python benchmarks/synthesis/end_to_end.py --collectives allreduce,broadcast --repeat 3 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from arborcc.synth import synthesize
from arborcc.topology.model import GB

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # the shared topology sets
from topologies import ALLOCATION_MACHINES, WHOLE_MACHINES, allocation_topologies, machine_or_cluster  # noqa: E402

HEADER = (f"{'topology':<30} {'coll':<9} {'ranks':>5} {'bound':>8} {'algbw':>8} {'ratio':>6} {'trees':>5} "
          f"{'chunks':>6} {'time s':>7} {'ring':>8} {'speedup':>7}")
#: (group, label, rank count) -> seconds the issue asks the synthesis to stay under
TARGETS = {"8 GPUs": 0.1, "2x8 A100": 1.0, "4x8 A100": 3.0}


def topologies(quick: bool):
    """(group, label, topology-builder) in table order."""
    out = []
    for machine in ALLOCATION_MACHINES:
        if quick and machine != "dgx1v":
            continue
        classes = allocation_topologies(machine)
        if quick:
            classes = classes[:: max(1, len(classes) // 5)][:5]
        for _, sub in classes:
            out.append((f"{machine} allocations", sub.name, lambda sub=sub: sub))
    for machine in (("dgx-a100",) if quick else WHOLE_MACHINES):
        out.append(("single machines", machine, lambda m=machine: machine_or_cluster(m)))
    if not quick:
        for nodes in (2, 4):
            out.append((f"{nodes}x8 A100", f"{nodes}x dgx-a100 fat-tree",
                        lambda n=nodes: machine_or_cluster("dgx-a100", n)))
    return out


def timed(build, collective, strategy, repeat):
    """The last result and the median time over ``repeat`` runs, each on a fresh topology."""
    times, result = [], None
    for _ in range(repeat):
        t = build()
        t0 = time.perf_counter()
        result = synthesize(t, collective, strategy)
        times.append(time.perf_counter() - t0)
    return result, statistics.median(times)


def summary(group: str, rows: list[dict]) -> list[str]:
    lines = []
    for coll in sorted({r["collective"] for r in rows}):
        rs = [r for r in rows if r["collective"] == coll and "error" not in r]
        errors = sum(1 for r in rows if r["collective"] == coll and "error" in r)
        if not rs:
            lines.append(f"  [{group}] {coll}: every row failed ({errors})")
            continue
        times = [r["time_s"] for r in rs]
        good = sum(1 for r in rs if r["ratio"] >= 0.99)
        line = (f"  [{group}] {coll}: {good}/{len(rs)} at >= 99% of bound (worst ratio "
                f"{min(r['ratio'] for r in rs):.4f}); synthesis time median {statistics.median(times):.3f} s, "
                f"max {max(times):.3f} s")
        speed = [r["speedup"] for r in rs if r.get("speedup")]
        if speed:
            line += f"; trees/nccl-ring speedup median {statistics.median(speed):.3f}x, min {min(speed):.3f}x"
        if errors:
            line += f"; {errors} FAILED"
        lines.append(line)
    return lines


def targets(rows: list[dict]) -> list[str]:
    """The issue's time targets, judged on all-reduce synthesis times: every 8-GPU
    machine or allocation (median over those rows), 2x8 and 4x8 A100."""
    ok = [r for r in rows if r["collective"] == "allreduce" and "error" not in r]
    checks = [("8 GPUs", [r["time_s"] for r in ok if r["ranks"] == 8 and r["group"] not in TARGETS])]
    checks += [(g, [r["time_s"] for r in ok if r["group"] == g]) for g in TARGETS if g != "8 GPUs"]
    lines = []
    for name, ts in checks:
        if ts:
            med, limit = statistics.median(ts), TARGETS[name]
            lines.append(f"  target {name} < {limit:g} s: median {med:.3f} s over {len(ts)} rows (max {max(ts):.3f} s)"
                         f" -> {'met' if med < limit else 'NOT met'}")
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="5 DGX-1V allocation classes and dgx-a100")
    ap.add_argument("--collectives", default="allreduce",
                    help="comma-separated: allreduce, broadcast (from rank 0), ... (default allreduce)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per synthesis; times are medians")
    ap.add_argument("--json", metavar="OUT", help="write every row and the summary lines as JSON")
    ap.add_argument("--no-ring", action="store_true", help="skip the NCCL-ring baseline")
    args = ap.parse_args(argv)
    collectives = [c.strip() for c in args.collectives.split(",") if c.strip()]
    todo = topologies(args.quick)
    total = len(todo) * len(collectives)
    print(HEADER)
    print("-" * len(HEADER))
    rows: list[dict] = []
    summaries: list[str] = []
    done, group_rows, t_start = 0, [], time.perf_counter()
    for k, (group, label, build) in enumerate(todo):
        t = build()
        for coll in collectives:
            row = {"group": group, "topology": label, "collective": coll, "ranks": t.num_ranks}
            try:
                r, dt = timed(build, coll, "trees", args.repeat)
                row.update(bound_gbps=r.bound / GB, algbw_gbps=r.algbw / GB, ratio=r.ratio,
                           trees=len(r.trees), chunks=r.chunks, time_s=dt)
                ring = ""
                if coll == "allreduce" and not args.no_ring:
                    rr, rdt = timed(build, coll, "nccl-ring", 1)
                    row.update(ring_algbw_gbps=rr.algbw / GB, ring_time_s=rdt,
                               speedup=r.algbw / rr.algbw if rr.algbw else None)
                    ring = f" {rr.algbw / GB:8.2f} {row['speedup']:6.3f}x"
                print(f"{label:<30} {coll:<9} {t.num_ranks:5d} {r.bound / GB:8.2f} {r.algbw / GB:8.2f} "
                      f"{r.ratio:6.4f} {len(r.trees):5d} {r.chunks:6d} {dt:7.3f}{ring}")
            except Exception as e:  # a failing row is reported, not fatal
                row["error"] = f"{type(e).__name__}: {e}"
                print(f"{label:<30} {coll:<9} {t.num_ranks:5d} FAILED {row['error']}")
            sys.stdout.flush()
            rows.append(row)
            group_rows.append(row)
            done += 1
            print(f"[{done}/{total}] {label} {coll} ({time.perf_counter() - t_start:.0f} s elapsed)",
                  file=sys.stderr, flush=True)
        if k + 1 == len(todo) or todo[k + 1][0] != group:
            lines = summary(group, group_rows)
            print("\n".join(lines))
            summaries.extend(lines)
            group_rows = []
    summaries += targets(rows)
    print()
    print("summary")
    print("\n".join(summaries))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "summary": summaries, "repeat": args.repeat}, f, indent=1)


if __name__ == "__main__":
    main()
