"""arborcc's chosen algorithm against NCCL and the proven bound, on every built-in machine,
every DGX-1 allocation class and clusters of A100 and H100 nodes: one table, the targets
checked, in one run (everything simulated by arborcc's simulator).

For each topology, collective (all-reduce, all-gather, reduce-scatter, broadcast) and
size (1 MiB, 64 MiB, 1 GiB; ``--sizes`` for others), busbw in GB/s (nccl-tests' bus
bandwidth):

* ``chosen``: what ``arborcc synth --size SIZE`` writes (strategy ``auto``, chosen by the
  simulated time of its file at that size) and that file's simulated time - the number
  ``synth`` reports and ``arborcc simulate FILE`` prints;
* ``best``: the fastest of every strategy's file at that size with the fastest protocol
  (``arborcc compare``'s rows: each the file ``arborcc synth --strategy S --size SIZE``
  writes, so chosen is one of them and beats best by at most the 1% its one program for
  both call forms may gain);
* ``nccl``: NCCL's own choice of algorithm, protocol and channels (``compare``'s ``nccl``
  row; NVLS all-reduce where the switch reduces); ``ring``: NCCL without NVLS, the baseline
  the targets use on NVSwitch machines with in-switch reduction (NVLS is beyond the MSCCL IR);
* ``bound``: the proven bound (synthesis' algbw bound x the busbw factor); ``adjusted``: the
  same bound with every link at the rate the simulator's calibrated profile lets it carry
  (:func:`arborcc.sim.fidelity.efficiency_adjusted`), what a perfect pipeline of the
  optimal schedule reaches in the simulator; ``file``: the adjusted bound when every
  transfer takes the route the runtime gives its pair (a file names no route:
  :func:`arborcc.synth.route_bounds.file_bound`, routed on the nominal topology as the
  simulator routes), ``-`` above its LP's rank limit. No file can beat it; the run checks
  that none does.

The targets (issue "synthesized algorithms as fast as they are proven to be"), each
printed as MET / NOT MET with the rows that miss it:

* T1: at 64 MiB and 1 GiB, chosen >= NCCL (``ring`` where NCCL runs NVLS), and >= 1.2x
  NCCL where the adjusted bound is >= 1.3x NCCL;
* T2: at 1 GiB, chosen >= 0.9 x adjusted on single machines and DGX-1 allocations,
  >= 0.8 x on clusters;
* T3: at 1 MiB and below, chosen >= 0.9x NCCL;
* T4: chosen within 3% of best at every size.

T1 and T2 are checked as defined, against ``adjusted``; the two lines after them check the
same against ``file`` where it is known (``adjusted`` where it is not): what the files a
runtime can run leave of each target.

    python benchmarks/synthesis/against_nccl.py --quick          # built-in machines, 2-node clusters: minutes
    python benchmarks/synthesis/against_nccl.py                  # everything (DGX-1 classes, 128 nodes): hours on 2 cores
    python benchmarks/synthesis/against_nccl.py --json rows.json --resume   # a stopped run goes on from its rows
    python benchmarks/synthesis/against_nccl.py --skip "128 x" --json rows.json  # beside a run of --only "128 x"
    python benchmarks/synthesis/against_nccl.py --markdown docs/against_nccl.md --plot docs/against_nccl.png
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
from topologies import ALLOCATION_MACHINES, allocation_topologies, machine_or_cluster  # noqa: E402

MiB, GiB = 1 << 20, 1 << 30
COLLECTIVES = ("allreduce", "allgather", "reducescatter", "broadcast")
SIZES = (MiB, 64 * MiB, GiB)
MACHINES = ("dgx1p", "dgx1v", "dgx2", "dgx-a100", "dgx-h100")
CLUSTER_NODES = (2, 8, 16, 128)
CLUSTER_MACHINES = ("dgx-a100", "dgx-h100")
#: T1's sizes; T3's "1 MiB and below"; T4's margin
LARGE, SMALL_MAX, BEST_MARGIN = (64 * MiB, GiB), MiB, 0.03


@dataclass
class Case:
    """One topology: a label, its kind (machine, allocation, cluster) and how to build it."""

    label: str
    kind: str
    machine: str
    nodes: int = 1
    gpus: tuple[str, ...] = ()

    def build(self):
        return machine_or_cluster(self.machine, self.nodes, self.gpus or None)


@dataclass
class Row:
    label: str
    kind: str
    ranks: int
    collective: str
    size: int
    chosen: str
    chosen_busbw: float
    best: str
    best_busbw: float
    nccl: str
    nccl_busbw: float
    ring_busbw: float
    bound: float
    adjusted: float
    file_bound: float
    seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def baseline(self) -> float:
        """NCCL's busbw the targets compare with: its ring where NCCL runs NVLS."""
        return self.ring_busbw if self.nccl.startswith("nvls") else self.nccl_busbw


def cases(quick: bool) -> list[Case]:
    out = [Case(m, "machine", m) for m in MACHINES]
    if not quick:
        for m in ALLOCATION_MACHINES:
            for c, _ in allocation_topologies(m, 3, 7):
                gpus = tuple(c.gpus)
                out.append(Case(f"{m} {','.join(g.removeprefix('gpu') for g in gpus)}", "allocation", m, 1, gpus))
    for m in CLUSTER_MACHINES:
        for n in (CLUSTER_NODES[:1] if quick else CLUSTER_NODES):
            out.append(Case(f"{n} x {m}", "cluster", m, n))
    return out


def measure(case: Case, collective: str, sizes: tuple[int, ...]) -> list[Row]:
    """Every column of ``case``'s rows for ``collective`` at ``sizes`` (module doc)."""
    from arborcc.errors import ArborccError
    from arborcc.sim.fidelity import efficiency_adjusted, fidelity_for
    from arborcc.sim.simulate import bus_factor
    from arborcc.synth.bounds import collective_bound
    from arborcc.synth.route_bounds import file_bound
    from arborcc.synth.synthesis import synthesize
    from arborcc.tune.compare import MODEL, compare
    from arborcc.tune.nccl import NcclBaseline

    t0 = time.perf_counter()
    topology = case.build()
    n = topology.num_ranks
    factor = bus_factor(collective, n) / 1e9
    fidelity = fidelity_for(topology)
    bound = collective_bound(topology, collective).algbw * factor
    adjusted_topology = efficiency_adjusted(topology, fidelity)
    adjusted = collective_bound(adjusted_topology, collective).algbw * factor
    try:
        routed = file_bound(adjusted_topology, collective, routed_on=topology).algbw * factor
    except ArborccError:  # above the LP's rank limit
        routed = math.nan
    table = compare(topology, collective, sizes, "auto", fidelity=fidelity)
    baseline = NcclBaseline(topology, fidelity)
    rows = []
    for size in sizes:
        def busbw(time_s: float) -> float:
            return size / time_s * factor

        here = [r for r in table.rows if r["size"] == size]
        ours = [r for r in here if r["strategy"] not in ("nccl", MODEL)]
        best = min(ours, key=lambda r: r["time_us"])  # among the files synth writes at this size
        call = baseline.call(size, collective)  # the table's ``nccl`` row, its time unrounded
        algorithm, protocol = baseline.model_pick(size, collective)  # NCCL's choice with NVLS ruled out
        ring = baseline.simulate_option(size, collective, algorithm, protocol,
                                        baseline.channels_for(size, protocol))
        notes = []
        try:
            chosen = synthesize(topology, collective, "auto", size=size)
            name, chosen_bw = chosen.strategy.removeprefix("auto:"), (busbw(chosen.time) if chosen.time else math.nan)
            notes += [x for x in chosen.notes if x.startswith("not simulated")]
        except ArborccError as e:
            name, chosen_bw = "-", math.nan
            notes.append(f"synth: {e}")
        rows.append(Row(case.label, case.kind, n, collective, size, name, chosen_bw, best["strategy"],
                        best["busbw_gbps"], f"{call.algorithm} {call.protocol}", busbw(call.result.time),
                        busbw(ring.time), bound, adjusted, routed, 0.0, notes))
    for r in rows:
        r.seconds = (time.perf_counter() - t0) / len(rows)
    return rows


def run_one(args: tuple[Case, str, tuple[int, ...]]) -> list[Row]:
    return measure(*args)


# --- targets ---------------------------------------------------------------------------

def target_misses(rows: list[Row]) -> dict[str, list[str]]:
    """Target -> the rows that miss it, as text (module doc)."""
    from arborcc.tune.compare import TIE

    misses: dict[str, list[str]] = {"T1": [], "T2": [], "T3": [], "T4": [], "T1 vs file bound": [],
                                    "T2 vs file bound": [], "no file beats the file bound": []}

    def where(r: Row) -> str:
        return f"{r.label} {r.collective} {size_text(r.size)}"

    for r in rows:
        c = r.chosen_busbw
        if math.isnan(c):
            for t in misses:
                misses[t].append(f"{where(r)}: nothing chosen")
            continue
        routed = r.adjusted if math.isnan(r.file_bound) else r.file_bound
        for name, room in (("adjusted bound", r.adjusted), ("file bound", routed)):
            t1, t2 = ("T1", "T2") if name == "adjusted bound" else ("T1 vs file bound", "T2 vs file bound")
            if r.size in LARGE:
                need = 1.2 if room >= 1.3 * r.baseline else 1.0
                if c < need * r.baseline * (1 - TIE):
                    misses[t1].append(f"{where(r)}: {c / r.baseline:.2f}x NCCL (needs {need:.1f}x: the {name} "
                                      f"is {room / r.baseline:.2f}x NCCL)")
            if r.size == GiB:
                need = 0.8 if r.kind == "cluster" else 0.9
                if c < need * room:
                    misses[t2].append(f"{where(r)}: {c / room:.2f} of the {name} (needs {need})")
        if c > routed * (1 + 1e-6):
            misses["no file beats the file bound"].append(f"{where(r)}: {c:.2f} GB/s above the file bound {routed:.2f}")
        if r.size <= SMALL_MAX and c < 0.9 * r.baseline:
            misses["T3"].append(f"{where(r)}: {c / r.baseline:.2f}x NCCL (needs 0.9x)")
        if c < (1 - BEST_MARGIN) * r.best_busbw:
            misses["T4"].append(f"{where(r)}: {r.chosen} {c:.1f} vs {r.best} {r.best_busbw:.1f}")
    return misses


# --- output ----------------------------------------------------------------------------

def size_text(size: int) -> str:
    from arborcc.sizes import format_size

    return format_size(size)


HEAD = ("topology", "ranks", "collective", "size", "chosen", "GB/s", "best", "GB/s", "nccl", "GB/s", "ring",
        "bound", "adjusted", "file", "chosen/nccl", "chosen/adj", "chosen/file")


def cells(r: Row) -> list[str]:
    def f(x: float) -> str:
        return "-" if math.isnan(x) else f"{x:.1f}"

    def ratio(a: float, b: float) -> str:
        return "-" if math.isnan(a) or math.isnan(b) or not b else f"{a / b:.2f}"

    return [r.label, str(r.ranks), r.collective, size_text(r.size), r.chosen, f(r.chosen_busbw), r.best,
            f(r.best_busbw), r.nccl, f(r.nccl_busbw), f(r.ring_busbw), f(r.bound), f(r.adjusted),
            f(r.file_bound), ratio(r.chosen_busbw, r.baseline), ratio(r.chosen_busbw, r.adjusted),
            ratio(r.chosen_busbw, r.file_bound)]


def text_table(rows: list[Row]) -> str:
    table = [list(HEAD)] + [cells(r) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEAD))]
    return "\n".join("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
                     for row in table)


def markdown_table(rows: list[Row]) -> str:
    out = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    out += ["| " + " | ".join(cells(r)) + " |" for r in rows]
    return "\n".join(out)


def summary(rows: list[Row]) -> str:
    lines = []
    for target, missed in target_misses(rows).items():
        lines.append(f"{target}: {'MET' if not missed else f'NOT MET ({len(missed)} rows)'}")
        lines += [f"    {m}" for m in missed]
    return "\n".join(lines)


def plot(rows: list[Row], path: str) -> None:
    """chosen / NCCL, chosen / adjusted bound and chosen / file bound per topology and collective at 1 GiB."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    big = [r for r in rows if r.size == max(x.size for x in rows) and r.kind != "allocation"]
    labels = [f"{r.label}\n{r.collective}" for r in big]
    fig, ax = plt.subplots(figsize=(max(8, len(big) * 0.45), 5))
    xs = range(len(big))
    ax.bar([x - 0.27 for x in xs], [r.chosen_busbw / r.baseline for r in big], 0.27, label="chosen / NCCL")
    ax.bar(list(xs), [r.chosen_busbw / r.adjusted for r in big], 0.27, label="chosen / adjusted bound")
    ax.bar([x + 0.27 for x in xs], [r.chosen_busbw / (r.adjusted if math.isnan(r.file_bound) else r.file_bound)
                                     for r in big], 0.27, label="chosen / file bound")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(0.9, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, rotation=90, fontsize=7)
    ax.set_ylabel("ratio (busbw, simulated)")
    ax.set_title(f"arborcc's chosen algorithm at {size_text(big[0].size)}: against NCCL and the bounds")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def write_rows(path: Path, rows: list[Row]) -> None:
    """The rows as JSON, replaced whole (a stopped run leaves the last complete file)."""
    part = path.with_name(path.name + ".part")
    part.write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
    part.replace(path)


def saved_rows(path: Path, work: list[tuple[Case, str, tuple[int, ...]]]) -> list[Row]:
    """The rows of ``path`` (written by :func:`write_rows`) for cases of ``work`` whose every
    size is there: a case cut short or run at other sizes is run again."""
    if not path.exists():
        return []
    rows = [Row(**r) for r in json.loads(path.read_text())]
    wanted = {(case.label, collective): set(sizes) for case, collective, sizes in work}
    have: dict[tuple[str, str], set[int]] = {}
    for r in rows:
        have.setdefault((r.label, r.collective), set()).add(r.size)
    complete = {key for key, sizes in have.items() if wanted.get(key) == sizes}
    return [r for r in rows if (r.label, r.collective) in complete]


def main(argv: list[str] | None = None) -> int:
    from arborcc.sizes import parse_sizes

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="built-in machines and 2-node clusters only")
    ap.add_argument("--sizes", default=None, help="sizes (default 1M,64M,1G)")
    ap.add_argument("--collectives", default=",".join(COLLECTIVES))
    ap.add_argument("--only", default=None, help="only topologies whose label contains this")
    ap.add_argument("--skip", default=None,
                    help="leave out topologies whose label contains this (e.g. '128 x', run on its own)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes (default: every CPU)")
    ap.add_argument("--json", default=None,
                    help="also write the rows as JSON here, rewritten as each case finishes")
    ap.add_argument("--resume", action="store_true",
                    help="keep the rows already in the --json file and run only the cases it lacks")
    ap.add_argument("--markdown", default=None, help="also write the table and the targets as Markdown here")
    ap.add_argument("--plot", default=None, help="also draw the 1 GiB ratios into this PNG")
    args = ap.parse_args(argv)
    sizes = tuple(sorted(parse_sizes(args.sizes))) if args.sizes else SIZES
    collectives = [c.strip() for c in args.collectives.split(",") if c.strip()]
    work = [(c, coll, sizes) for c in cases(args.quick)
            if (not args.only or args.only in c.label) and not (args.skip and args.skip in c.label)
            for coll in collectives]
    if args.resume and not args.json:
        ap.error("--resume needs --json (the file that holds the rows so far)")
    rows = saved_rows(Path(args.json), work) if args.resume else []
    done = {(r.label, r.collective) for r in rows}
    if done:
        print(f"  resuming: {len(done)} of {len(work)} cases already in {args.json}", file=sys.stderr)
    work = [w for w in work if (w[0].label, w[1]) not in done]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for i, got in enumerate(pool.map(run_one, work), 1):
            rows += got
            print(f"  [{i}/{len(work)}] {got[0].label} {got[0].collective}: {got[0].seconds * len(got):.1f} s",
                  file=sys.stderr)
            if args.json:  # a long run keeps what it measured if it is stopped
                write_rows(Path(args.json), rows)
    command = "python benchmarks/synthesis/against_nccl.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    print(f"busbw GB/s, simulated; {len(rows)} rows in {time.perf_counter() - started:.0f} s")
    print(text_table(rows))
    print(summary(rows))
    if args.json:
        write_rows(Path(args.json), rows)
    if args.markdown:
        Path(args.markdown).write_text(f"<!-- written by: {command.strip()} -->\n\n{markdown_table(rows)}\n\n"
                                       "```\n" + summary(rows) + "\n```\n")
    if args.plot:
        plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
