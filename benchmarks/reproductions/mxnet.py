"""MXNet's single-tree vs multi-tree all-reduce on a p3.16xlarge, simulated.

    .venv/bin/python benchmarks/reproductions/mxnet.py [--sizes 4K:1G] [--plot PNG]

The MXNet design proposal "Single machine All Reduce Topology-aware Communication"
(Apache MXNet wiki, 2018, https://cwiki.apache.org/confluence/display/MXNET/Single+machine+All+Reduce+Topology-aware+Communication)
runs one binary tree (latency-optimal) for small messages and several trees, one per
root (bandwidth-optimal), for large ones; its measurements put the crossover at
1M-10M float32 values (4-40 MB) and default ``MXNET_KVSTORE_TREE_ARRAY_BOUND`` to 10M.
Here both are the ``binary-trees`` strategy's algorithms on the DGX-1V (= p3.16xlarge)
model - one tree (what it builds below its threshold) and every tree - simulated with
the V100 fidelity profile, the faster protocol per size; the table shows where the
multi-tree algorithm starts to win.

The simulator runs both as MSCCL programs (all trees in one kernel, pipelined), which
is not how MXNet executes them. A second pair of columns charges MXNet's own execution
(:func:`mxnet_execution_time`): its ``CommDeviceTree`` (apache/mxnet
``src/kvstore/comm_tree.h``, ``ReduceInner`` / ``BroadcastInner``) moves the whole
array (one tree) or slice (one per tree) one tree level at a time, each level a
separate operation of MXNet's dependency engine - a peer copy, plus an elementwise sum
when reducing - that starts when the previous level's operation has completed; the
multi-tree path ends with every GPU copying the n reduced slices into its output. Each
operation is charged the V100 profile's launch latency (a kernel launch and its
completion as nccl-tests measures them, 10 us; ``arborcc.sim.fidelity``), the data time of
its level on the busiest link (concurrent trees share links) and its reduction at the
profile's reduce bandwidth. That is a model of MXNet's execution, stated here, not a
measurement and not the simulator.
"""

from __future__ import annotations

import argparse
import sys

from line_plot import line_plot

from arborcc.sim.fidelity import fidelity_for
from arborcc.sizes import parse_sizes
from arborcc.synth.trees import tree_children
from arborcc.synth.synthesis import synthesize
from arborcc.topology.machines import build_machine
from arborcc.topology.model import GB
from arborcc.sim.protocol_choice import protocol_sweep


def _levels(topo, trees) -> list[list[tuple[str, tuple[str, ...]]]]:
    """Per MXNet level, deepest first, the (parent, path parent->child) hops of every
    tree: a hop's level is the bit length of its child's subtree size (MXNet's trees are
    full binary trees in which a parent stays on for the next level, so a child with a
    subtree of 2^k GPUs is reduced at level k + 1)."""
    index = {g: i for i, g in enumerate(topo.ranks)}
    levels: dict[int, list] = {}
    for t in trees:
        root, kids = tree_children(t, index)

        def size(v: int) -> int:
            return 1 + sum(size(c) for c, _ in kids.get(v, ()))

        for parent, children in kids.items():
            for child, path in children:
                levels.setdefault(size(child).bit_length(), []).append((parent, path))
    return [levels[k] for k in sorted(levels)]


def mxnet_execution_time(topo, trees, size: float) -> float:
    """Seconds MXNet's tree all-reduce takes for ``size`` bytes (module doc): reduce
    levels deepest first (copy, then sum), broadcast levels back, one launch latency per
    operation, a level's data time that of its busiest link, then (several trees) the
    copies of the slices into every GPU's output."""
    fid = fidelity_for(topo)
    part = size / len(trees)
    launch = fid.launch_latency

    def data_time(level) -> float:
        load: dict = {}
        for _, path in level:
            for link in zip(path, path[1:]):
                load[link] = load.get(link, 0.0) + part
        return max(b / (topo.links[l].bandwidth * fid.link_efficiency.get(topo.links[l].kind, 1.0))
                   for l, b in load.items())

    levels = _levels(topo, trees)
    total = 0.0
    for level in levels:  # reduce: copy to the parent, then the elementwise sum there
        summed: dict = {}
        for parent, _ in level:
            summed[parent] = summed.get(parent, 0.0) + part
        total += 2 * launch + data_time([(p, tuple(reversed(path))) for p, path in level])
        total += max(summed.values()) / fid.reduce_bandwidth
    for level in reversed(levels):  # broadcast: copy to the child
        total += launch + data_time(level)
    if len(trees) > 1:
        total += len(trees) * launch + size / fid.copy_bandwidth
    return total


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
    print(f"{'size':>11} {'single us':>10} {'multi us':>10} {'single GB/s':>11} {'multi GB/s':>10}  faster"
          f"   {'MXNet exec single us':>20} {'multi us':>9}  faster")
    crossover, mx_crossover = None, None
    for i, s in enumerate(sizes):
        a, b = runs["single tree"][i], runs["multi tree"][i]
        winner = "multi" if b.time < a.time else "single"
        if winner == "multi" and crossover is None:
            crossover = s
        elif winner == "single":
            crossover = None
        mx_a, mx_b = (mxnet_execution_time(topo, [single.trees[0]], s), mxnet_execution_time(topo, multi.trees, s))
        mx_winner = "multi" if mx_b < mx_a else "single"
        if mx_winner == "multi" and mx_crossover is None:
            mx_crossover = s
        elif mx_winner == "single":
            mx_crossover = None
        print(f"{s:>11} {a.time_us:10.1f} {b.time_us:10.1f} {a.algbw / GB:11.2f} {b.algbw / GB:10.2f}  {winner:6}"
              f"   {mx_a * 1e6:20.1f} {mx_b * 1e6:9.1f}  {mx_winner}")
    for label, at in (("simulated (MSCCL execution)", crossover), ("MXNet execution model", mx_crossover)):
        if at:
            print(f"{label}: multi-tree faster from {at} bytes ({at / 4:,.0f} float32) on")
        else:
            print(f"{label}: the multi-tree algorithm is not faster at the largest sizes")
    print("MXNet measured the crossover at 1M-10M float32 (4-40 MB) and defaults its bound to 10M float32 (40 MB)")
    if args.plot:
        line_plot(args.plot, sizes, {name: [r.algbw / GB for r in rs] for name, rs in runs.items()}, "size (bytes)",
                  "algbw GB/s", "p3.16xlarge all-reduce: single vs multi binary tree (simulated)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
