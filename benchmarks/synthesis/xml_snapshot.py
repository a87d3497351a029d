"""Snapshot the XML of every algorithm the benchmark set synthesizes, and compare snapshots.

A refactoring that claims "behaviour stays the same" is checked by running this before
and after it: every file must be byte-identical. The set is the topologies of
``benchmarks/synthesis/end_to_end.py`` (every DGX-1V and DGX-1P allocation class of 3-8 GPUs,
dgx2, dgx-a100, dgx-h100, 2 and 4 DGX-A100 nodes) with strategy ``trees`` for each
collective, the cases of ``benchmarks/synthesis/multinode.py`` with each multi-node strategy,
every all-reduce strategy (and ``auto``) on the whole machines, and every algorithm of
the library at 8 ranks.

    python benchmarks/synthesis/xml_snapshot.py --out /tmp/before          # takes a few minutes
    python benchmarks/synthesis/xml_snapshot.py --out /tmp/after --compare /tmp/before
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # the shared topology sets
from topologies import (ALLOCATION_MACHINES, WHOLE_MACHINES, allocation_topologies,  # noqa: E402
                        machine_or_cluster, split_dgx1v)

COLLECTIVES = ("allreduce", "broadcast", "reduce", "allgather", "reducescatter", "gather", "scatter")
ALLREDUCE_STRATEGIES = ("auto", "trees", "binary-trees", "blueconnect", "hierarchical", "three-phase", "nccl-ring",
                        "double-binary-tree", "halving-doubling", "ring")
MULTINODE_STRATEGIES = ("trees", "three-phase", "hierarchical", "blueconnect", "nccl-ring")


def _synthesize():
    try:
        from arborcc.synth import synthesize
    except ImportError:
        from arborcc.synth.strategies import synthesize
    return synthesize


def cases(quick: bool):
    """(file stem, topology builder, collective, strategy) in a fixed order."""
    out = []
    for machine in ALLOCATION_MACHINES:
        classes = allocation_topologies(machine)
        if quick:
            classes = classes[:3]
        for c, _ in classes:
            gpus = list(c.gpus)
            for coll in COLLECTIVES:
                out.append((f"{machine}-{'-'.join(gpus)}-{coll}-trees",
                            lambda m=machine, g=gpus: machine_or_cluster(m, gpus=g), coll, "trees"))
    machines = ("dgx-a100",) if quick else ("dgx1v", *WHOLE_MACHINES)
    for machine in machines:
        for coll in COLLECTIVES:
            out.append((f"{machine}-{coll}-trees", lambda m=machine: machine_or_cluster(m), coll, "trees"))
        for strategy in (s for s in ALLREDUCE_STRATEGIES if s != "trees"):  # trees: above
            out.append((f"{machine}-allreduce-{strategy}", lambda m=machine: machine_or_cluster(m), "allreduce",
                        strategy))
    clusters = {
        "2x8-a100": lambda: machine_or_cluster("dgx-a100", 2),
        "4x8-a100": lambda: machine_or_cluster("dgx-a100", 4),
        "2x8-a100-rail": lambda: machine_or_cluster("dgx-a100", 2, network="rail"),
        "2x-dgx1v": lambda: machine_or_cluster("dgx1v", 2),
        "dgx1v-3+5": lambda: split_dgx1v(3, 5),
    }
    if quick:
        clusters = {k: clusters[k] for k in ("2x8-a100",)}
    for label, build in clusters.items():
        for strategy in MULTINODE_STRATEGIES:
            out.append((f"{label}-allreduce-{strategy}", build, "allreduce", strategy))
        if label in ("2x8-a100", "4x8-a100"):
            for coll in ("broadcast", "allgather", "gather"):
                out.append((f"{label}-{coll}-trees", build, coll, "trees"))
    return out


def library_cases():
    """(file stem, builder) for every library algorithm at 8 ranks (2 nodes x 4 GPUs)."""
    from arborcc.library import LIBRARY

    out = []
    for name, spec in LIBRARY.items():
        params = {p.name for p in spec.params}
        kwargs = {"ranks": 8} if "ranks" in params else {"nodes": 2, "gpus_per_node": 4}
        out.append((f"library-{name}", lambda s=spec, k=kwargs: s(**k).algorithm))
    return out


def write(out_dir: Path, quick: bool) -> int:
    from arborcc.errors import ArborccError
    from arborcc.ir.msccl_xml import write_msccl_xml

    synthesize = _synthesize()
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = [(stem, lambda b=build, c=coll, s=strategy: synthesize(b(), c, s).algorithm)
            for stem, build, coll, strategy in cases(quick)] + library_cases()
    t0 = time.perf_counter()
    for i, (stem, make) in enumerate(jobs, 1):
        try:
            algo = make()
            text = write_msccl_xml(algo, dialect="legacy" if algo.collective == "custom" else "executor")
        except ArborccError as e:
            text = f"error: {type(e).__name__}: {e}\n"
        (out_dir / f"{stem}.xml").write_text(text)
        print(f"\r[{i}/{len(jobs)}] {time.perf_counter() - t0:6.1f} s {stem:<60}", end="", file=sys.stderr)
    print(file=sys.stderr)
    return len(jobs)


def compare(a: Path, b: Path) -> list[str]:
    names = sorted({p.name for p in a.glob("*.xml")} | {p.name for p in b.glob("*.xml")})
    return [n for n in names if not ((a / n).exists() and (b / n).exists()
                                     and filecmp.cmp(a / n, b / n, shallow=False))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder to write one XML file per case into")
    ap.add_argument("--compare", type=Path, metavar="DIR", help="a snapshot to compare --out with")
    ap.add_argument("--quick", action="store_true", help="a few cases only")
    args = ap.parse_args(argv)
    n = write(args.out, args.quick)
    print(f"wrote {n} files to {args.out}")
    if args.compare:
        differ = compare(args.compare, args.out)
        for name in differ:
            print(f"differs: {name}")
        print(f"{n - len(differ)} of {n} identical" if not differ else f"{len(differ)} of {n} differ")
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
