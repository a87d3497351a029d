"""MXNet's single-tree vs multi-tree all-reduce on a p3.16xlarge, simulated.

    .venv/bin/python benchmarks/repro_mxnet.py [--sizes 4K:1G] [--plot PNG]

The MXNet design proposal "Single machine All Reduce Topology-aware Communication"
(Apache MXNet wiki, 2018, https://cwiki.apache.org/confluence/display/MXNET/Single+machine+All+Reduce+Topology-aware+Communication)
runs one binary tree (latency-optimal) for small messages and several trees, one per
root (bandwidth-optimal), for large ones; its measurements put the crossover at
1M-10M float32 values (4-40 MB) and default ``MXNET_KVSTORE_TREE_ARRAY_BOUND`` to 10M.
Here both are the ``binary-trees`` strategy's algorithms on the DGX-1V (= p3.16xlarge)
model - one tree (what it builds below its threshold) and every tree - simulated with
the V100 fidelity profile, the faster protocol per size; the table shows where the
multi-tree algorithm starts to win.
"""

from __future__ import annotations

import argparse
import sys

from repro_plot import line_plot

from arborcc.sim.sizes import parse_sizes
from arborcc.synth.synthesis import synthesize
from arborcc.topology.machines import build_machine
from arborcc.topology.model import GB
from arborcc.tune.compare import protocol_sweep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4K:1G")
    ap.add_argument("--plot", metavar="PNG")
    args = ap.parse_args(argv)
    sizes = parse_sizes(args.sizes)
    topo = build_machine("p3.16xlarge")
    single = synthesize(topo, "allreduce", "binary-trees", size=1)
    multi = synthesize(topo, "allreduce", "binary-trees")
    runs = {}
    for name, r in (("single tree", single), ("multi tree", multi)):
        runs[name] = protocol_sweep(r.algorithm, topo, sizes, "auto", routes=r.routes)
    print(f"all-reduce on p3.16xlarge (8 V100), simulated: single binary tree vs "
          f"{len(multi.trees)} binary trees")
    print(f"{'size':>11} {'single us':>10} {'multi us':>10} {'single GB/s':>11} {'multi GB/s':>10}  faster")
    crossover = None
    for i, s in enumerate(sizes):
        a, b = runs["single tree"][i], runs["multi tree"][i]
        winner = "multi" if b.time < a.time else "single"
        if winner == "multi" and crossover is None:
            crossover = s
        elif winner == "single":
            crossover = None
        print(f"{s:>11} {a.time_us:10.1f} {b.time_us:10.1f} {a.algbw / GB:11.2f} {b.algbw / GB:10.2f}  {winner}")
    if crossover:
        print(f"multi-tree faster from {crossover} bytes ({crossover / 4:,.0f} float32) on; MXNet measured the "
              f"crossover at 1M-10M float32 (4-40 MB) and defaults its bound to 10M float32 (40 MB)")
    else:
        print("the multi-tree algorithm is not faster at the largest sizes")
    if args.plot:
        line_plot(args.plot, sizes, {name: [r.algbw / GB for r in rs] for name, rs in runs.items()}, "size (bytes)",
                  "algbw GB/s", "p3.16xlarge all-reduce: single vs multi binary tree (simulated)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
