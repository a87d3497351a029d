"""The NCCL baseline on every built-in machine and on clusters of 2 and 8 A100 / H100
nodes: busbw per machine, collective and size, side by side with the published
nccl-tests figure where one exists (the ratio), and NCCL's own alpha-beta prediction
for its choice (the table in docs/simulator.md, "The NCCL baseline").

    .venv/bin/python benchmarks/sim/nccl_baseline.py [--json] [--quick]

Published figures (docs/fidelity.md and /work/shared/reference cite them):
* nccl-tests all_reduce_perf busbw, 8x A100 and 8x H100, NCCL 2.18.5 (fidelity.py's
  points, one list for both scripts), and H100 rings (NCCL_ALGO=RING) about 370 GB/s;
* multi-node: 8 x 400 Gb/s NICs per node peak at about 400 GB/s busbw (380+ with tuning):
  the 2- and 8-node DGX H100 all-reduce at 1 GB.
No published figure exists for the other collectives, the other machines or the A100
clusters: there the row says what bounds the number (the rings' bandwidth, NCCL's model).
``--quick`` leaves out the 8-node clusters (a minute instead of several).
"""

from __future__ import annotations

import argparse
import json
import sys

from arborcc.sizes import format_size
from arborcc.topology.cluster import build_cluster
from arborcc.tune.nccl import COLLECTIVES, NcclBaseline
from fidelity import NCCL_POINTS

KB, MB, GB = 1 << 10, 1 << 20, 1 << 30
SIZES = (1 * KB, 1 * MB, 128 * MB, 1 * GB)
#: (machine, nodes) in table order
MACHINES = [("dgx1p", 1), ("dgx1v", 1), ("dgx2", 1), ("dgx-a100", 1), ("dgx-h100", 1),
            ("dgx-a100", 2), ("dgx-h100", 2), ("dgx-a100", 8), ("dgx-h100", 8)]
#: multi-node published points: (machine, nodes, collective, size, busbw GB/s, source)
CLUSTER_POINTS = [
    ("dgx-h100", 2, "allreduce", 1 * GB, 400.0, "8 x 400 Gb/s NICs per node: about 400 (380+ tuned)"),
    ("dgx-h100", 8, "allreduce", 1 * GB, 400.0, "8 x 400 Gb/s NICs per node: about 400 (380+ tuned)"),
]


def published_points() -> dict[tuple, tuple[float, str]]:
    """(machine, nodes, collective, size, forced protocol) -> (busbw GB/s, source)."""
    out = {}
    for machine, size, pub, how, _role in NCCL_POINTS:
        forced = "Simple" if how == "ring" else None
        source = "nccl-tests, NCCL 2.18.5" + (", NCCL_ALGO=RING (maintainers)" if forced else "")
        out[(machine, 1, "allreduce", size, forced)] = (pub, source)
    for machine, nodes, coll, size, pub, source in CLUSTER_POINTS:
        out[(machine, nodes, coll, size, None)] = (pub, source)
    return out


def rows(quick: bool = False, progress=None) -> list[dict]:
    published = published_points()
    out = []
    for machine, nodes in MACHINES:
        if quick and nodes > 2:
            continue
        topology = build_cluster(machine, nodes)
        base = NcclBaseline(topology)
        points = {(c, s, None) for c in COLLECTIVES for s in SIZES}
        points |= {(c, s, f) for (m, n, c, s, f) in published if (m, n) == (machine, nodes)}
        for coll, size, forced in sorted(points, key=lambda p: (COLLECTIVES.index(p[0]), p[1], p[2] or "")):
            if progress:
                progress(f"{topology.name} {coll} {format_size(size)}")
            call = base.call(size, coll, protocol=forced)
            model = base.model_row(size, coll, forced)
            pub, source = published.get((machine, nodes, coll, size, forced), (None, ""))
            busbw = call.result.busbw / 1e9
            bound = base.schedule.bus_bandwidth / 1e9
            if call.algorithm == "nvls":
                note = "NVLS: in-switch reduction (closed form, sim/nvls.py)"
            else:
                note = f"channels' bus bandwidth {bound:.0f} GB/s nominal"
            out.append({"machine": topology.name, "gpus": topology.num_ranks, "collective": coll, "size": size,
                        "forced": forced or "", "nccl": f"{call.algorithm}/{call.protocol}/{call.channels}ch",
                        "busbw_gbps": round(busbw, 3), "published_gbps": pub,
                        "ratio": None if pub is None else round(busbw / pub, 3),
                        "model_gbps": model["busbw_gbps"], "source": source, "note": note})
    return out


def table(data: list[dict]) -> str:
    lines = ["| machine | collective | size | NCCL ran | baseline busbw | published | ratio | NCCL model | published source / what bounds it |",
             "|---|---|---:|---|---:|---:|---:|---:|---|"]
    for r in data:
        coll = r["collective"] + (" (NCCL_ALGO=RING)" if r["forced"] else "")
        pub = "-" if r["published_gbps"] is None else f"{r['published_gbps']:g}"
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        lines.append(f"| {r['machine']} ({r['gpus']}) | {coll} | {format_size(r['size'])} | {r['nccl']} | "
                     f"{r['busbw_gbps']:.2f} | {pub} | {ratio} | {r['model_gbps']:.2f} | "
                     f"{r['source'] or r['note']} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--quick", action="store_true", help="leave out the 8-node clusters")
    args = ap.parse_args()
    data = rows(args.quick, lambda m: print(f"  {m}", file=sys.stderr) if sys.stderr.isatty() else None)
    if args.json:
        json.dump(data, sys.stdout, indent=1)
        print()
    else:
        print(table(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
