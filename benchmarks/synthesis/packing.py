"""Tree packings against their optimal-rate bounds.

Prints one row per (topology, collective, root, links, method): the bound and the
packing's rate in GB/s (per-shard rate for all-gather/reduce-scatter, plus algbw),
their ratio, the number of trees and the wall time of the packing (bound included).
Then, for Blink's 46 DGX-1V and 14 DGX-1P allocation classes (NVLink only), the worst
ratio, most trees and slowest packing over every class and root.

    python benchmarks/synthesis/packing.py            # everything (about a minute on 2 cores)
    python benchmarks/synthesis/packing.py --quick    # single machines only
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from arborcc.synth.bounds import allreduce_bound
from arborcc.synth.packing import pack_allgather, pack_broadcast, pack_reducescatter
from arborcc.synth.trees import check_packing
from arborcc.topology.model import GB, Device, DeviceKind, LinkKind, TopologyBuilder

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # the shared topology sets
from topologies import allocation_topologies  # noqa: E402

HEADER = (f"{'topology':<22} {'collective':<13} {'root':<8} {'links':<7} {'method':<6} {'bound':>9} "
          f"{'rate':>9} {'algbw':>8} {'ratio':>7} {'trees':>5} {'time s':>7}")


def switch_box(n: int = 8, gbps: float = 300.0):
    """A DGX-A100-like box: n GPUs each joined to one NVSwitch node by ``gbps`` per direction."""
    b = TopologyBuilder(f"switchbox{n}x{gbps:g}")
    b.add_device(Device("nvswitch0", DeviceKind.NVSWITCH, 0, 0))
    for i in range(n):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, 0, i))
        b.connect(f"gpu{i}", "nvswitch0", LinkKind.NVLINK, gbps * GB, count=12)
    return b.build()


def row(name, topology, collective, root=None, links="all", method="exact", **kw):
    t0 = time.perf_counter()
    if collective == "broadcast":
        p = pack_broadcast(topology, root, links, method, **kw)
    elif collective == "allgather":
        p = pack_allgather(topology, links, **kw)
    else:
        p = pack_reducescatter(topology, links, **kw)
    dt = time.perf_counter() - t0
    check_packing(p, topology, links)
    root_s = "-" if root is None else str(root)
    print(f"{name:<22} {collective:<13} {root_s:<8} {links:<7} {method:<6} {p.bound.rate_gbps:9.3f} "
          f"{p.rate_gbps:9.3f} {p.algbw_gbps:8.2f} {p.ratio:7.4f} {p.num_trees:5d} {dt:7.3f}"
          + ("  LIMIT" if p.limit_hit else ""))
    sys.stdout.flush()
    return p, dt


def allocations(machine: str) -> None:
    classes = allocation_topologies(machine)
    worst, most, slowest, n = 1.0, 0, 0.0, 0
    for _, sub in classes:
        for r in range(sub.num_ranks):
            t0 = time.perf_counter()
            p = pack_broadcast(sub, r, "nvlink")
            slowest = max(slowest, time.perf_counter() - t0)
            check_packing(p, sub, "nvlink")
            worst, most, n = min(worst, p.ratio), max(most, p.num_trees), n + 1
    print(f"{machine}: {len(classes)} allocation classes of 3-8 GPUs, {n} (class, root) broadcasts over "
          f"NVLink: worst rate/bound {worst:.4f}, most trees {most}, slowest {slowest:.3f} s")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="single machines only")
    args = ap.parse_args(argv)
    from arborcc.topology.machines import build_machine

    print(HEADER)
    print("-" * len(HEADER))
    for name in ("dgx1v", "dgx1p"):
        t = build_machine(name)
        for links in ("nvlink", "all"):
            for method in ("exact", "mwu"):
                row(name, t, "broadcast", 0, links, method)
        for r in range(1, 8):
            row(name, t, "broadcast", r, "nvlink")
        row(name, t, "allgather", None, "nvlink")
        row(name, t, "allgather", None, "all")
    box = switch_box()
    row("switchbox 8x300", box, "broadcast", 0, "nvlink")
    row("switchbox 8x300", box, "broadcast", 0, "nvlink", "mwu")
    row("switchbox 8x300", box, "allgather", None, "nvlink")
    row("switchbox 8x300", box, "reducescatter", None, "nvlink")
    for name in ("dgx2", "dgx-a100", "dgx-h100"):
        t = build_machine(name)
        row(name, t, "broadcast", 0, "nvlink")
        row(name, t, "broadcast", 0, "all")
        row(name, t, "allgather", None, "all")
    if not args.quick:
        from arborcc.topology.cluster import build_cluster

        for machine, nodes, network in (("dgx-a100", 2, "fat-tree"), ("dgx-a100", 2, "rail"),
                                        ("dgx1v", 2, "fat-tree"), ("dgx1v", 4, "fat-tree"),
                                        ("dgx2", 2, "fat-tree")):
            t = build_cluster(machine, nodes, network)
            name = f"{nodes}x{machine} {network}"
            row(name, t, "broadcast", 0, "all")
            row(name, t, "allgather", None, "all")
            row(name, t, "reducescatter", None, "all")
        print()
        print("all-reduce bounds (algbw GB/s): reduce-scatter + all-gather | tree reduce+broadcast")
        for label, t, links in (("dgx1v", build_machine("dgx1v"), "nvlink"),
                                ("dgx1v", build_machine("dgx1v"), "all"),
                                ("dgx-a100", build_machine("dgx-a100"), "all"),
                                ("2x8 dgx-a100", build_cluster("dgx-a100", 2), "all")):
            t0 = time.perf_counter()
            ar = allreduce_bound(t, links, tree_roots=[t.ranks[0]])
            print(f"  {label:<14} {links:<7} {ar.rs_ag_algbw / GB:9.3f} | {ar.tree_algbw / GB:9.3f} "
                  f"(root {ar.tree_root}; {time.perf_counter() - t0:.3f} s)")
        print()
        allocations("dgx1v")
        allocations("dgx1p")


if __name__ == "__main__":
    main()
