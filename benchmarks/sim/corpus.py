"""A corpus of simulated times, to check that a change to the simulator keeps its
results: every row of ``compare`` and every strategy's time with every protocol, at
8 B - 1 GiB (factor 2), on eight machine / allocation / collective sweeps.

    .venv/bin/python benchmarks/sim/corpus.py write AFTER.json [--quick]
    PYTHONPATH=/tmp/before/src .venv/bin/python benchmarks/sim/corpus.py write BEFORE.json
    .venv/bin/python benchmarks/sim/corpus.py diff BEFORE.json AFTER.json

``write`` takes about 2 minutes of processor time (``--quick``: the ``compare`` rows
only, about 40 s); ``diff`` prints every row that differs and every time that differs
by more than 1e-12 (relative), with the largest relative difference, and with
``--exact`` also each such time with every iteration simulated (``exact=True``, by the
arborcc it runs with): which side the steady-period shortcut left. Runs kept by the
engine are dropped before each sweep and each (strategy, protocol), so every case
starts cold, as a single ``arborcc compare`` or ``simulate`` does.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from arborcc.sim.engine import forget_runs
from arborcc.sim.simulate import simulate
from arborcc.topology.allocation import induced, resolve_gpus
from arborcc.topology.machines import build_machine
from arborcc.tune.compare import compare, strategy_candidates

#: (machine, GPUs or None for all, collective)
CASES = [("dgx1v", None, "allreduce"), ("dgx1v", [1, 4, 5, 6], "allreduce"), ("dgx-a100", None, "allreduce"),
         ("dgx1p", [0, 1, 2, 3, 4], "allreduce"), ("dgx1v", None, "allgather"), ("dgx1v", None, "broadcast"),
         ("dgx-h100", None, "allreduce"), ("dgx1v", [0, 1, 2, 5, 6], "reducescatter")]
SIZES = [1 << k for k in range(3, 31)]
PROTOCOLS = ("LL", "LL128", "Simple")


def write(path: str, quick: bool) -> None:
    out: dict = {}
    t0 = time.process_time()
    for machine, gpus, collective in CASES:
        topo = build_machine(machine)
        if gpus:
            topo = induced(topo, resolve_gpus(topo, gpus))
        name = f"{machine}{gpus or ''}:{collective}"
        forget_runs()
        out[f"{name}:rows"] = compare(topo, collective, SIZES).rows
        if not quick:
            times = {}
            for c in strategy_candidates(topo, collective)[0]:
                for p in PROTOCOLS:
                    forget_runs()
                    times[f"{c.name}:{p}"] = [simulate(c.algorithm, topo, s, p, routes=c.routes).time for s in SIZES]
            out[f"{name}:times"] = times
        print(f"{name}: {time.process_time() - t0:.1f} s processor so far", file=sys.stderr)
    with open(path, "w") as f:
        json.dump(out, f, indent=0)


def exact_time(case: str, strategy: str, protocol: str, size: int) -> float:
    """The time of ``strategy`` in corpus case ``case`` with every iteration simulated."""
    machine, _, rest = case.partition("[") if "[" in case else (case.split(":")[0], "", "")
    gpus = [int(g) for g in rest.split("]")[0].split(",")] if rest else None
    collective = case.split(":")[1]
    topo = build_machine(machine)
    if gpus:
        topo = induced(topo, resolve_gpus(topo, gpus))
    c = strategy_candidates(topo, collective, strategies=[strategy])[0][0]
    return simulate(c.algorithm, topo, size, protocol, routes=c.routes, exact=True).time


def diff(before_path: str, after_path: str, exact: bool = False) -> int:
    with open(before_path) as f:
        before = json.load(f)
    with open(after_path) as f:
        after = json.load(f)
    differing, worst = 0, 0.0
    common = [key for key in before if key in after]
    for key in common:
        old, new = before[key], after[key]
        if key.endswith(":rows"):
            for a, b in zip(old, new):
                if a != b:
                    print(f"row differs in {key}:\n  {a}\n  {b}")
                    differing += 1
            if len(old) != len(new):
                print(f"{key}: {len(old)} rows before, {len(new)} after")
                differing += 1
        else:
            for case, times in old.items():
                for size, a, b in zip(SIZES, times, new.get(case, [])):
                    rel = abs(b / a - 1)
                    worst = max(worst, rel)
                    if rel > 1e-12:
                        print(f"time differs in {key} {case} at {size} B: {a!r} -> {b!r} ({rel:.2e})")
                        differing += 1
                        if exact:
                            t = exact_time(key, *case.split(":"), size)
                            print(f"  every iteration simulated: {t!r} ({abs(a / t - 1):.2e} from before, "
                                  f"{abs(b / t - 1):.2e} from after)")
    alone = sorted(set(before) ^ set(after))
    print(f"{len(common)} entries compared ({len(alone)} in one file only: a --quick corpus has no times); "
          f"{differing} differences; largest relative time difference {worst:.2e}")
    return 1 if differing else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="simulate the corpus into a JSON file")
    w.add_argument("path")
    w.add_argument("--quick", action="store_true", help="the compare rows only")
    d = sub.add_parser("diff", help="compare two corpus files")
    d.add_argument("before")
    d.add_argument("after")
    d.add_argument("--exact", action="store_true", help="simulate every iteration of the times that differ")
    args = ap.parse_args(argv)
    if args.command == "write":
        write(args.path, args.quick)
        return 0
    return diff(args.before, args.after, args.exact)


if __name__ == "__main__":
    sys.exit(main())
