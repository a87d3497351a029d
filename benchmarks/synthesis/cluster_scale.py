"""Synthesis at cluster scale: every collective on DGX A100 / H100 clusters, and all-gather
against ForestColl on the same topologies.

Table 1 - ``arborcc synth --machine M --nodes N --collective C`` with strategy ``auto``:
for every machine, node count and collective, the median wall time of ``synthesize``
(bound, strategies, lowering, compiling and verifying the returned algorithm) and its
CPU time (what a shared machine's load changes least), the
strategy ``auto`` used, the algbw the emitted algorithm reaches in the steady-state
bandwidth model against the bound (and whether the bound is the exact optimum), whether
the verifier proves it correct, whether it fits the dialect's runtime limits, its IR
steps and the peak memory of the process. Every cell runs in its own process.

Targets: under 60 s at 128 nodes and under 10 s at 16 nodes, verified, algbw at
least 95% of the exact bound (99% where the topology is symmetric, as these clusters
are), memory under 4 GB at 1024 GPUs.

Table 2 - all-gather on DGX-1V, one DGX A100, 2 x 8 and 4 x 8 A100: arborcc's
``synthesize`` (median of ``--repeat-small`` runs) against ForestColl's
``optimal_pipeline_spanning_trees`` (Zhao et al., "ForestColl: Efficient Collective
Communications on Heterogeneous Network Fabrics", 2024, https://arxiv.org/abs/2402.06787;
its public Python implementation, https://github.com/liangyuRain/ForestColl) on the same
graph - arborcc's flow graph of the topology, capacities in GB/s - with both optima, and
the ratio of their wall times and of their CPU times (one process each, single-threaded:
the CPU ratio is what a shared machine's load disturbs least). The target is judged on
the whole ``synthesize`` (a verified MSCCL program); the last columns add, for
reference, the CPU time of arborcc's tree packing alone (``pack_allgather``: bound and
optimal trees with their rate, which is what ForestColl's function returns) and its
ratio to ForestColl's.
ForestColl is not part of arborcc: clone it (``git clone
https://github.com/liangyuRain/ForestColl /tmp/ForestColl``) and pass its folder with
``--forestcoll`` (it needs only networkx). Target: at least 10x faster with the same
optimum.

    python benchmarks/synthesis/cluster_scale.py                       # both tables (about an hour)
    python benchmarks/synthesis/cluster_scale.py --nodes 8,16 --skip-forestcoll
    python benchmarks/synthesis/cluster_scale.py --skip-scale --forestcoll /tmp/ForestColl
    python benchmarks/synthesis/cluster_scale.py --passes dgx1v 1 --repeat-small 21   # where the time goes, every ms
    python benchmarks/synthesis/cluster_scale.py --passes dgx1v 1 --repeat-small 21 --baseline /tmp/base/src  # vs another
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # the shared topology sets
from topologies import machine_or_cluster  # noqa: E402

COLLECTIVES = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce", "gather", "scatter", "alltoall")
FORESTCOLL_CASES = (("DGX-1V", "dgx1v", 1), ("1x8 A100", "dgx-a100", 1), ("2x8 A100", "dgx-a100", 2),
                    ("4x8 A100", "dgx-a100", 4))


def run_cell(machine: str, nodes: int, collective: str, dialect: str) -> dict:
    """One synthesis in this process: its time, result and peak memory."""
    import resource

    from arborcc.errors import ArborccError
    from arborcc.synth import synthesize

    topology = machine_or_cluster(machine, nodes)
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        r = synthesize(topology, collective, "auto", dialect=dialect)
    except ArborccError as e:
        return {"error": str(e), "seconds": time.perf_counter() - t0}
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    wrong = [v for v in r.report.violations if v.kind != "limit"]
    limits = [v for v in r.report.violations if v.kind == "limit"]
    return {
        "seconds": seconds, "cpu_seconds": cpu_seconds, "strategy": r.strategy, "algbw": r.algbw, "bound": r.bound, "ratio": r.ratio,
        "exact": r.bound_exact, "correct": not wrong, "fits": not limits,
        "steps": sum(len(tb.steps) for p in r.algorithm.ranks for tb in p.threadblocks),
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "notes": r.notes,
        "limit": str(limits[0]) if limits else "",
    }


def run_warm(machine: str, nodes: int, collective: str, repeat: int) -> dict:
    """``repeat`` timed syntheses in this process after one untimed run (imports and
    caches warm, as ForestColl's function call is timed): the median and where the time
    went (bound, strategies, verification), from the progress messages' timestamps."""
    from arborcc.synth import synthesize

    topology = machine_or_cluster(machine, nodes)
    synthesize(topology, collective, "auto", dialect="executor")
    runs = []
    for _ in range(repeat):
        marks = []
        t0, c0 = time.perf_counter(), time.process_time()
        r = synthesize(topology, collective, "auto", dialect="executor",
                       progress=lambda m: marks.append((m.split(":")[0].split(" ")[0], time.perf_counter())))
        end, cpu = time.perf_counter(), time.process_time() - c0
        stamps = [t for _, t in marks] + [end]
        first_strategy = next(t for name, t in marks if name not in ("bound", "verifying"))
        verifying = next(t for name, t in marks if name == "verifying")
        runs.append({"seconds": end - t0, "cpu_seconds": cpu, "bound_s": first_strategy - stamps[0],
                     "strategy_s": verifying - first_strategy, "verify_s": end - verifying})
    med = {k: statistics.median(run[k] for run in runs) for k in runs[0]}
    if collective == "allgather":  # what ForestColl's function returns: the optimal trees and their rate
        from arborcc.synth.packing import pack_allgather

        packing = []
        for _ in range(repeat):
            c0 = time.process_time()
            pack_allgather(topology)
            packing.append(time.process_time() - c0)
        med["packing_cpu_seconds"] = statistics.median(packing)
    return {**med, "strategy": r.strategy, "algbw": r.algbw, "bound": r.bound, "ratio": r.ratio, "exact": r.bound_exact}


#: where a synthesis spends its time: (where, public functions, label), each function timed
#: where the code that calls it looks it up (``module`` or ``module:Class`` for a method;
#: a name the checkout lacks is left out, so an older checkout runs the same table);
#: indented entries are part of the one above them, and every entry with parts gets a
#: row for the rest of its time (what no part covers), so each level sums to its parent
PASSES = (
    ("arborcc.synth.synthesis", ("collective_bound",), "bound"),
    ("arborcc.synth.packing", ("pack_allgather",), "packing (seeds, column generation)"),
    ("arborcc.synth.quantize", ("apportion",), "rounding to chunks"),
    ("arborcc.synth.lower_search", ("within_limits",), "lowering (trace, compile, checks)"),
    ("arborcc.synth.lower_emit", ("balanced_copies",), "  tree copies"),
    ("arborcc.synth.lower_emit", ("tree_channel_map",), "  channels"),
    ("arborcc.synth.lower_emit", ("round_ranges", "broadcast_copies", "broadcast_blocks", "local_copies"),
     "  transfer list"),
    ("arborcc.synth.lower_emit", ("lowering_program",), "  program setup"),
    ("arborcc.lang.program:Program", ("trace_copies", "trace_broadcasts"), "  DSL trace"),
    ("arborcc.compiler", ("compile_program",), "  compiling (all passes)"),
    ("arborcc.compiler.pipeline", ("lower_operations",), "    instructions"),
    ("arborcc.compiler.pipeline", ("build_dag",), "    DAG"),
    ("arborcc.compiler.pipeline", ("fuse_instructions",), "    fusion"),
    ("arborcc.compiler.pipeline", ("repair_order",), "    FIFO-order repair"),
    ("arborcc.compiler.pipeline", ("assign_auto",), "    thread blocks"),
    ("arborcc.compiler.pipeline", ("emit_steps",), "    synchronization"),
    ("arborcc.synth.lower_emit", ("steady_state_bandwidth",), "  bandwidth estimate"),
    ("arborcc.ir.limits", ("check_dialect_limits",), "  dialect limits"),
    ("arborcc.verify.pieces", ("deadlock_free",), "  pieces deadlock check"),
    ("arborcc.verify", ("verify_algorithm",), "verifying"),
    ("arborcc.verify.checker", ("check_structure",), "  structure"),
    ("arborcc.verify.checker", ("symbolic_run", "prove_layouts"), "  symbolic run, compiled (both call modes)"),
)
#: the label of the whole synthesis (every top-level entry is part of it)
WHOLE = "whole synthesize"


def pass_parts() -> dict[str, list[str]]:
    """Label -> labels of its parts (the entries one level deeper right below it; the
    top-level entries are the parts of :data:`WHOLE`), for every entry that has some."""
    labels = [label for _, _, label in PASSES]
    depth = [len(l) - len(l.lstrip()) for l in labels]
    parts: dict[str, list[str]] = {WHOLE: [l for l, d in zip(labels, depth) if d == 0]}
    for i, label in enumerate(labels):
        j = i + 1
        while j < len(labels) and depth[j] > depth[i]:
            if depth[j] == depth[i] + 2:
                parts.setdefault(label, []).append(labels[j])
            j += 1
    return parts


def pass_rows() -> list[tuple[str, str]]:
    """(key, label) of every row of the ``--passes`` table in order: the entries of
    :data:`PASSES`, after the parts of each entry that has some a row for the rest of
    its time (key ``rest:<label>``), and the whole."""
    parts = pass_parts()
    last_part = {ps[-1]: parent for parent, ps in parts.items()}
    rows: list[tuple[str, str]] = []

    def close(label: str) -> None:  # after the last part of an entry (and of its last part's parts)
        parent = last_part.get(label)
        if parent is not None:
            pad = " " * (len(parts[parent][0]) - len(parts[parent][0].lstrip()))
            rows.append((f"rest:{parent}", f"{pad}the rest of {parent.strip()}"))
            close(parent)

    for _, _, label in PASSES:
        rows.append((label, label))
        if label not in parts:
            close(label)
    rows.append((WHOLE, WHOLE))
    return rows


def run_passes(machine: str, nodes: int, collective: str, repeat: int) -> dict:
    """Milliseconds per row of :func:`pass_rows` (median of ``repeat`` warm syntheses,
    wall clock): each function of :data:`PASSES` wrapped with a timer where its caller
    looks it up, the whole ``synthesize``, and what each entry's parts leave of it."""
    import functools
    import importlib

    from arborcc.synth import synthesize

    spent: dict[str, float] = {}

    def timed(fn, label):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.perf_counter() - t0
        return wrapper

    for where, names, label in PASSES:
        module, _, cls = where.partition(":")
        owner = importlib.import_module(module)
        owner = getattr(owner, cls) if cls else owner
        for name in names:
            if hasattr(owner, name):
                setattr(owner, name, timed(getattr(owner, name), label))
    topology = machine_or_cluster(machine, nodes)
    synthesize(topology, collective, "auto", dialect="executor")
    parts = pass_parts()
    runs = []
    for _ in range(repeat):
        spent.clear()
        t0 = time.perf_counter()
        synthesize(topology, collective, "auto", dialect="executor")
        run = dict(spent)
        run[WHOLE] = time.perf_counter() - t0
        for parent, ps in parts.items():
            run[f"rest:{parent}"] = run.get(parent, 0.0) - sum(run.get(p, 0.0) for p in ps)
        runs.append(run)
    keys = {k for run in runs for k in run}
    return {k: 1000 * statistics.median(r.get(k, 0.0) for r in runs) for k in keys}


def _subprocess(args: list[str], timeout: float, src: Path = ROOT / "src") -> dict:
    env = dict(os.environ, PYTHONPATH=str(src))
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, timeout=timeout, env=env)
    line = next((l for l in reversed(out.stdout.splitlines()) if l.startswith("{")), None)
    if line is None:
        return {"error": (out.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(line)


def passes_side_by_side(machine: str, nodes: str, repeat: int, baseline: Path, rounds: int, timeout: float) -> None:
    """The ``--passes`` table of this checkout and of ``baseline`` (a checkout's src folder),
    each run ``rounds`` times in its own process, alternately; per row the median of the
    runs' medians, and the difference. The table's rows are this checkout's (a function
    the baseline lacks is left out of its table, so its time falls in the row above)."""
    runs: dict[str, list[dict]] = {"this": [], "baseline": []}
    for _ in range(rounds):
        for name, src in (("this", ROOT / "src"), ("baseline", baseline)):
            runs[name].append(_subprocess(["--passes-json", machine, nodes, "--repeat-small", str(repeat)], timeout, src))
    bad = [r["error"] for rs in runs.values() for r in rs if "error" in r]
    if bad:
        raise SystemExit(f"a run failed: {bad[0]}")
    load = os.getloadavg()
    print(f"all-gather on {machine} x {nodes}: median over {rounds} alternating runs of the median of {repeat} warm "
          f"runs (ms, wall); load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    print(f"  {'':<48} {'this':>8} {'baseline':>8} {'diff':>7} {'ratio':>6}")
    for key, label in pass_rows():
        a, b = (statistics.median(r.get(key, 0.0) for r in runs[name]) for name in ("this", "baseline"))
        ratio = f"{a / b:6.2f}" if b > 0.005 else ""
        print(f"  {label:<48} {a:8.2f} {b:8.2f} {a - b:+7.2f} {ratio}")


def scale_table(machines, node_counts, collectives, repeat: int, dialect: str, timeout: float) -> list[dict]:
    rows = []
    for machine in machines:
        for nodes in node_counts:
            for coll in collectives:
                runs = [_subprocess(["--cell", machine, str(nodes), coll, dialect], timeout) for _ in range(repeat)]
                ok = [r for r in runs if "error" not in r]
                row = {"machine": machine, "nodes": nodes, "collective": coll, "runs": len(runs)}
                if ok:
                    row.update(ok[0])
                    row["seconds"] = statistics.median(r["seconds"] for r in ok)
                    row["cpu_seconds"] = statistics.median(r["cpu_seconds"] for r in ok)
                    row["peak_mb"] = max(r["peak_mb"] for r in ok)
                else:
                    row["error"] = runs[0]["error"]
                rows.append(row)
                print(_scale_line(row), flush=True)
    return rows


def _scale_line(row: dict) -> str:
    head = f"{row['machine']:<9} {row['nodes']:>4} x8 {row['collective']:<14}"
    if "error" in row:
        return f"{head} ERROR {row['error'][:150]}"
    limit = "0.95/0.99" if row["nodes"] else ""
    return (f"{head} {row['seconds']:8.2f} {row['cpu_seconds']:7.2f} {row['strategy']:<22} {row['algbw'] / 1e9:9.2f} {row['bound'] / 1e9:9.2f} "
            f"{row['ratio']:7.4f} {'exact' if row['exact'] else 'upper':>5} {'yes' if row['correct'] else 'NO':>7} "
            f"{'yes' if row['fits'] else 'no':>4} {row['steps']:>9} {row['peak_mb']:8.0f}{limit and ''}")


def print_targets(rows: list[dict]) -> None:
    print("\ntargets: < 60 s at 128 nodes, < 10 s at 16 nodes, verified, algbw >= 99% of the bound "
          "(symmetric clusters), memory < 4 GB")
    for nodes, limit in ((16, 10.0), (128, 60.0)):
        cells = [r for r in rows if r["nodes"] == nodes]
        if not cells:
            continue
        bad_time = [r for r in cells if "error" in r or r["seconds"] >= limit]
        bad_ratio = [r for r in cells if "error" in r or r["ratio"] < 0.99]
        bad_ok = [r for r in cells if "error" in r or not r["correct"]]
        slowest = max((r for r in cells if "error" not in r), key=lambda r: r["seconds"], default=None)
        print(f"  {nodes:>3} nodes: time < {limit:.0f} s: {len(cells) - len(bad_time)}/{len(cells)} "
              f"(slowest {slowest['machine']} {slowest['collective']} {slowest['seconds']:.1f} s)"
              if slowest else f"  {nodes} nodes: no result")
        print(f"             algbw >= 99% of the bound: {len(cells) - len(bad_ratio)}/{len(cells)}"
              + "".join(f"; {r['machine']} {r['collective']} {r.get('ratio', 0):.4f}" for r in bad_ratio))
        print(f"             verified correct: {len(cells) - len(bad_ok)}/{len(cells)}")
    big = [r for r in rows if r["nodes"] == 128 and "error" not in r]
    if big:
        worst = max(big, key=lambda r: r["peak_mb"])
        print(f"  memory at 1024 GPUs: peak {worst['peak_mb']:.0f} MB ({worst['machine']} {worst['collective']}); "
              f"target < 4096 MB")
    over = [r for r in rows if "error" not in r and not r["fits"]]
    for r in over:
        print(f"  note: {r['machine']} {r['nodes']}x8 {r['collective']} exceeds the dialect's limits: {r['limit']}")


# --- ForestColl ---------------------------------------------------------------------------

#: runs in a separate process with ForestColl's folder on the path; reads the graph as JSON
FORESTCOLL_DRIVER = """
import json, sys, time
import networkx as nx
from pipeline_allgather import optimal_pipeline_spanning_trees
spec = json.load(sys.stdin)
G = nx.DiGraph()
for a, b, c in spec["arcs"]:
    G.add_edge(a, b, capacity=c)
t0, c0 = time.perf_counter(), time.process_time()
(U, k), _ = optimal_pipeline_spanning_trees(G, compute_nodes=spec["ranks"])
print(json.dumps({"seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0,
                  "algbw": len(spec["ranks"]) * k / U}))
"""


def forestcoll_graph(topology) -> dict:
    """arborcc's flow graph of ``topology`` (what both programs solve on), GB/s."""
    from arborcc.synth.flowgraph import flow_graph

    g = flow_graph(topology)
    arcs = [[g.nodes[a], g.nodes[b], float(c) / 1e9] for a, b, c in zip(g.src.tolist(), g.dst.tolist(), g.cap)]
    return {"arcs": arcs, "ranks": list(g.rank_ids)}


def run_forestcoll(folder: Path, topology, timeout: float) -> dict:
    out = subprocess.run([sys.executable, "-c", FORESTCOLL_DRIVER], input=json.dumps(forestcoll_graph(topology)),
                         capture_output=True, text=True, timeout=timeout, cwd=folder,
                         env=dict(os.environ, PYTHONPATH=str(folder)))
    if out.returncode:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def arborcc_allgather(machine: str, nodes: int, repeat: int) -> dict:
    return _subprocess(["--warm", machine, str(nodes), "allgather", str(repeat)], 600)


def forestcoll_table(folder: Path | None, repeat_small: int, repeat_forestcoll: int, timeout: float) -> list[dict]:
    rows = []
    print(f"\n{'topology':<10} {'ForestColl s':>12} {'arborcc s':>10} {'speedup':>8} {'CPU speedup':>11} "
          f"{'ForestColl GB/s':>15} "
          f"{'arborcc bound':>13} {'arborcc algbw':>13}  same optimum  arborcc: bound / strategy / verify s"
          f"  packing only: CPU s, CPU speedup")
    for label, machine, nodes in FORESTCOLL_CASES:
        a = arborcc_allgather(machine, nodes, repeat_small)
        if folder is None:
            fc = {"error": "ForestColl not given (--forestcoll DIR)"}
        else:
            fcs = [run_forestcoll(folder, machine_or_cluster(machine, nodes), timeout) for _ in range(repeat_forestcoll)]
            ok = [r for r in fcs if "error" not in r]
            fc = (dict(ok[0], seconds=statistics.median(r["seconds"] for r in ok),
                       cpu_seconds=statistics.median(r["cpu_seconds"] for r in ok)) if ok else fcs[0])
        row = {"topology": label, "arborcc": a, "forestcoll": fc}
        rows.append(row)
        if "error" in a:
            print(f"{label:<10} arborcc error: {a['error'][:120]}")
            continue
        if "error" in fc:  # arborcc alone: its CPU time too, for comparing two versions of it
            print(f"{label:<10} {'-':>12} {a['seconds']:10.3f} {'-':>8} {'-':>11} {'-':>15} {a['bound'] / 1e9:13.2f} "
                  f"{a['algbw'] / 1e9:13.2f}  {'-':>12}  {a['bound_s']:.3f} / {a['strategy_s']:.3f} / "
                  f"{a['verify_s']:.3f} ({a['strategy']}; CPU {a['cpu_seconds']:.4f} s)  "
                  f"{a['packing_cpu_seconds']:.3f}  ({fc['error'][:60]})")
            continue
        same = abs(fc["algbw"] - a["bound"] / 1e9) <= 1e-6 * fc["algbw"]
        print(f"{label:<10} {fc['seconds']:12.3f} {a['seconds']:10.3f} {fc['seconds'] / a['seconds']:7.1f}x "
              f"{fc['cpu_seconds'] / a['cpu_seconds']:10.1f}x {fc['algbw']:15.2f} {a['bound'] / 1e9:13.2f} {a['algbw'] / 1e9:13.2f}  {'yes' if same else 'NO':>12}"
              f"  {a['bound_s']:.3f} / {a['strategy_s']:.3f} / {a['verify_s']:.3f} ({a['strategy']}, "
              f"{100 * a['ratio']:.1f}% of the optimum)  {a['packing_cpu_seconds']:.3f}, "
              f"{fc['cpu_seconds'] / a['packing_cpu_seconds']:.1f}x")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--machines", default="dgx-a100,dgx-h100")
    ap.add_argument("--nodes", default="8,16,128")
    ap.add_argument("--collectives", default=",".join(COLLECTIVES))
    ap.add_argument("--repeat", type=int, default=3, help="runs per cell (the median is printed)")
    ap.add_argument("--repeat-small", type=int, default=5, help="arborcc runs per ForestColl topology")
    ap.add_argument("--repeat-forestcoll", type=int, default=1, help="ForestColl runs per topology")
    ap.add_argument("--dialect", default="executor", choices=("executor", "legacy"))
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run before it is given up")
    ap.add_argument("--forestcoll", type=Path, help="a checkout of liangyuRain/ForestColl")
    ap.add_argument("--skip-scale", action="store_true")
    ap.add_argument("--skip-forestcoll", action="store_true")
    ap.add_argument("--json", type=Path, help="write every row here")
    ap.add_argument("--cell", nargs=4, metavar=("MACHINE", "NODES", "COLLECTIVE", "DIALECT"), help=argparse.SUPPRESS)
    ap.add_argument("--passes", nargs=2, metavar=("MACHINE", "NODES"),
                    help="only: where a warm all-gather synthesis on MACHINE x NODES spends its time, per pass "
                         "(median of --repeat-small runs)")
    ap.add_argument("--baseline", type=Path, metavar="SRC",
                    help="with --passes: the same table for the src folder of another checkout (its extensions "
                         "built), run alternately with this one --rounds times, side by side")
    ap.add_argument("--rounds", type=int, default=5, help="with --baseline: alternating runs of each (the median)")
    ap.add_argument("--passes-json", nargs=2, metavar=("MACHINE", "NODES"), help=argparse.SUPPRESS)
    ap.add_argument("--warm", nargs=4, metavar=("MACHINE", "NODES", "COLLECTIVE", "REPEAT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.warm:
        machine, nodes, coll, repeat = args.warm
        print(json.dumps(run_warm(machine, int(nodes), coll, int(repeat))))
        return 0
    if args.passes_json:
        machine, nodes = args.passes_json
        print(json.dumps(run_passes(machine, int(nodes), "allgather", args.repeat_small)))
        return 0
    if args.passes and args.baseline:
        passes_side_by_side(*args.passes, args.repeat_small, args.baseline, args.rounds, args.timeout)
        return 0
    if args.passes:
        machine, nodes = args.passes
        times = run_passes(machine, int(nodes), "allgather", args.repeat_small)
        print(f"all-gather on {machine} x {nodes}, median of {args.repeat_small} warm runs (ms, wall; each "
              f"level sums to its parent, up to the medians):")
        for key, label in pass_rows():
            print(f"  {label:<48} {times.get(key, 0.0):7.2f}")
        return 0
    if args.cell:
        machine, nodes, coll, dialect = args.cell
        print(json.dumps(run_cell(machine, int(nodes), coll, dialect)))
        return 0
    out = {}
    if not args.skip_scale:
        print(f"{'machine':<9} {'nodes':>7} {'collective':<14} {'median s':>8} {'cpu s':>7} {'strategy':<22} {'algbw':>9} "
              f"{'bound':>9} {'ratio':>7} {'bound':>5} {'correct':>7} {'fits':>4} {'steps':>9} {'peak MB':>8}")
        rows = scale_table(args.machines.split(","), [int(n) for n in args.nodes.split(",")],
                           args.collectives.split(","), args.repeat, args.dialect, args.timeout)
        print_targets(rows)
        out["scale"] = rows
    if not args.skip_forestcoll:
        rows = forestcoll_table(args.forestcoll, args.repeat_small, args.repeat_forestcoll, max(args.timeout, 1800))
        met = [r for r in rows if "error" not in r["arborcc"] and "error" not in r["forestcoll"]
               and r["forestcoll"]["seconds"] >= 10 * r["arborcc"]["seconds"]]
        print(f"target >= 10x faster than ForestColl with the same optimum: {len(met)}/{len(rows)} topologies")
        out["forestcoll"] = rows
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
