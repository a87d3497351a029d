"""Blink's results, reproduced on arborcc's machine models (Blink: Fast and Generic
Collectives for Distributed ML, G. Wang et al., MLSys 2020,
https://proceedings.mlsys.org/paper/2020/hash/43ec517d68b6edd3015b3edc9a11367b-Abstract.html).

    .venv/bin/python benchmarks/reproductions/blink.py [--figures 14,15,17,19] [--plots DIR] [--size 500M]

* Fig. 14 - theoretical speedup of packed spanning trees over NCCL's rings, broadcast,
  for every allocation class of 3-8 GPUs (46 on DGX-1V, 14 on DGX-1P): the tree
  packing's rate over NVLink (``synth.packing.pack_broadcast``, every root) against the
  rings NCCL's search builds on the allocation (``synth.nccl_rings``; PCIe when no
  NVLink ring exists), both steady-state rates.
* Fig. 15 / 17 - simulated broadcast (from the first GPU) and all-reduce throughput
  (algbw, ``--size``, Blink used 500 MB) per DGX-1V allocation class: the ``trees``
  strategy's algorithm, timed as its written file runs (each pair on its own route, as
  ``arborcc simulate FILE`` and ``arborcc compare`` do: an MSCCL XML file cannot carry
  the packing's planned PCIe relays; the fastest protocol), against what NCCL runs
  (``tune.nccl.NcclBaseline``), both through the event-driven simulator with the V100
  fidelity profile; then each one's simulated algbw over its attainable rate
  (``sim.bandwidth.attainable_algbw``: the emitted schedule's steady-state rate on the
  routes it runs on, at the profile's link efficiencies).
* Fig. 19 / 20 - DGX-2, 16 GPUs: all-reduce throughput and latency per size, Blink's
  one-hop trees (``trees``) against NCCL (its rings and protocol choice; the double
  binary tree also shown).

Prints tables (the numbers in docs/reproductions.md) and, with ``--plots DIR``, writes
``blink_fig14.png``, ``blink_fig15_17.png``, ``blink_fig19_20.png``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

from arborcc.errors import SynthesisError, VerificationError
from arborcc.sizes import parse_sizes
from arborcc.topology.allocation import induced
from arborcc.topology.machines import build_machine
from arborcc.topology.model import GB

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # the shared topology sets
from topologies import allocation_topologies  # noqa: E402

MB = 10**6


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    k = (len(s) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def fig14() -> dict:
    """Theoretical broadcast speedup of trees over rings per machine and GPU count."""
    from arborcc.synth.nccl_rings import nccl_rings
    from arborcc.synth.packing import pack_broadcast

    out = {}
    for name in ("dgx1p", "dgx1v"):
        classes = allocation_topologies(name)
        by_k: dict[int, list[float]] = {}
        for c, sub in classes:
            ring = nccl_rings(sub).bus_bandwidth
            for r in range(sub.num_ranks):
                tree = pack_broadcast(sub, r, "nvlink").rate
                by_k.setdefault(len(c.gpus), []).append(tree / ring)
        out[name] = {"classes": len(classes), "by_gpus": by_k}
    print("Fig. 14: theoretical broadcast speedup, packed trees (NVLink) / NCCL rings, every class and root")
    print(f"{'machine':<7} {'classes':>7} {'GPUs':>4} {'cases':>5} {'min':>6} {'p5':>6} {'median':>6} "
          f"{'p95':>6} {'max':>6}")
    for name, r in out.items():
        for k, xs in sorted(r["by_gpus"].items()):
            print(f"{name:<7} {r['classes']:>7} {k:>4} {len(xs):>5} {min(xs):6.2f} {percentile(xs, .05):6.2f} "
                  f"{statistics.median(xs):6.2f} {percentile(xs, .95):6.2f} {max(xs):6.2f}")
        allx = [x for xs in r["by_gpus"].values() for x in xs]
        print(f"{name:<7} {'all':>7} {'':>4} {len(allx):>5} {min(allx):6.2f} {percentile(allx, .05):6.2f} "
              f"{statistics.median(allx):6.2f} {percentile(allx, .95):6.2f} {max(allx):6.2f}   "
              f"geomean {geomean(allx):.2f}")
    return out


def fig15_17(size: int) -> list[dict]:
    """Simulated broadcast and all-reduce algbw per DGX-1V allocation class."""
    from arborcc.sim.bandwidth import attainable_algbw, steady_state_bandwidth
    from arborcc.sim.protocol_choice import protocol_sweep
    from arborcc.synth.synthesis import synthesize
    from arborcc.tune.nccl import NcclBaseline

    rows = []
    for c, sub in allocation_topologies("dgx1v"):
        base = NcclBaseline(sub)

        def attainable(algo, routes=None) -> float:
            # the emitted schedule's steady-state rate with the profile's link efficiencies
            # (no routes: on each pair's own route, as a written file runs)
            return attainable_algbw(steady_state_bandwidth(algo, sub, routes), sub, base.fidelity.efficiency) / GB

        row = {"gpus": ",".join(g.removeprefix("gpu") for g in c.gpus), "n": len(c.gpus),
               "nccl_fabric": base.schedule.link_kind.value}
        for coll in ("broadcast", "allreduce"):
            try:
                r = synthesize(sub, coll, "trees", 0, size=size)  # the file `synth --size` writes
                # timed as its written file runs (as `arborcc compare` and `simulate FILE` do):
                # each pair on its own route - an MSCCL XML file cannot carry the packing's
                # planned PCIe relays - with the fastest protocol
                best, = protocol_sweep(r.algorithm, sub, [size], "auto", base.fidelity)
                row[f"{coll}_trees"] = best.algbw / GB
                row[f"{coll}_trees_rate"] = attainable(r.algorithm)
            except (SynthesisError, VerificationError) as e:
                # a deadlock here: a step of more pieces than FIFO slots (none since the pieces check)
                row[f"{coll}_trees"] = row[f"{coll}_trees_rate"] = float("nan")
                row[f"{coll}_why"] = "deadlock" if isinstance(e, VerificationError) else "n/a"
            call = base.call(size, coll, 0)
            row[f"{coll}_nccl"] = call.result.algbw / GB
            row[f"{coll}_nccl_rate"] = attainable(*base.ring_algorithm(min(call.channels, len(base.schedule.rings)),
                                                                       coll, 0))
        rows.append(row)
    print(f"\nFig. 15 / 17: DGX-1V, {len(rows)} allocation classes, {size / MB:g} MB, simulated algbw GB/s")
    print(f"{'GPUs':<18} {'bcast trees':>11} {'bcast NCCL':>10} {'x':>5}   {'AR trees':>8} {'AR NCCL':>8} {'x':>5}")
    for r in rows:
        cells = []
        for coll, w in (("broadcast", 11), ("allreduce", 8)):
            t, n = r[f"{coll}_trees"], r[f"{coll}_nccl"]
            cells.append((f"{t:{w}.2f}" if t == t else f"{r[coll + '_why']:>{w}}") + f" {n:{10 if w == 11 else 8}.2f} "
                         + (f"{t / n:5.2f}" if t == t else f"{'-':>5}"))
        print(f"{r['gpus']:<18} {cells[0]}   {cells[1]}")
    for coll in ("broadcast", "allreduce"):
        xs = [r[f"{coll}_trees"] / r[f"{coll}_nccl"] for r in rows if r[f"{coll}_trees"] == r[f"{coll}_trees"]]
        wins = sum(x > 1 for x in xs)
        stuck = sum(1 for r in rows if r.get(f"{coll}_why") == "deadlock")
        print(f"{coll:<10} trees / NCCL: geomean {geomean(xs):.2f}x, max {max(xs):.2f}x, min {min(xs):.2f}x, "
              f"trees faster in {wins} of {len(xs)}; the trees' algorithm deadlocks in {stuck} of {len(rows)}")
    blink_vs_baseline(rows)
    print(f"\nsimulated algbw / attainable rate (the emitted schedule's steady-state rate with the V100 profile's "
          f"link efficiencies, sim.bandwidth.attainable_algbw), {size / MB:g} MB")
    print(f"{'GPUs':<18} {'bcast trees':>11} {'rate':>6} {'/':>5} {'NCCL':>6} {'rate':>6} {'/':>5}   "
          f"{'AR trees':>8} {'rate':>6} {'/':>5} {'NCCL':>6} {'rate':>6} {'/':>5}")
    for r in rows:
        cells = []
        for coll in ("broadcast", "allreduce"):
            t, tr, n, nr = (r[f"{coll}_{k}"] for k in ("trees", "trees_rate", "nccl", "nccl_rate"))
            cells.append(f"{t:{11 if coll == 'broadcast' else 8}.2f} {tr:6.2f} {t / tr:5.2f} {n:6.2f} {nr:6.2f} "
                         f"{n / nr:5.2f}")
        print(f"{r['gpus']:<18} {cells[0]}   {cells[1]}")
    for coll in ("broadcast", "allreduce"):
        for who in ("trees", "nccl"):
            xs = [r[f"{coll}_{who}"] / r[f"{coll}_{who}_rate"] for r in rows
                  if r[f"{coll}_{who}"] == r[f"{coll}_{who}"]]
            print(f"{coll:<10} {who:<5} simulated / attainable: median {statistics.median(xs):.2f}, "
                  f"min {min(xs):.2f}, at least 0.85 in {sum(x >= 0.85 for x in xs)} of {len(xs)}")
    return rows


def blink_vs_baseline(rows: list[dict]) -> None:
    """Why Blink's broadcast ratios (2x geometric mean, 6x at most) are not reproduced
    (docs/reproductions.md): the ratios split by the fabric of NCCL's rings, and the
    NCCL throughput at which the simulated trees would be 6x NCCL."""
    print("\ntrees / NCCL by the fabric of NCCL's rings (the simulated baseline):")
    for fabric in sorted({r["nccl_fabric"] for r in rows}):
        some = [r for r in rows if r["nccl_fabric"] == fabric and r["broadcast_trees"] == r["broadcast_trees"]]
        for coll in ("broadcast", "allreduce"):
            xs = [r[f"{coll}_trees"] / r[f"{coll}_nccl"] for r in some]
            ns = [r[f"{coll}_nccl"] for r in some]
            print(f"  {fabric:<7} rings, {len(some):2d} allocations, {coll:<10}: trees / NCCL geomean "
                  f"{geomean(xs):.2f}x, max {max(xs):.2f}x; NCCL {min(ns):.2f}-{max(ns):.2f} GB/s")
    top = max(rows, key=lambda r: r["broadcast_trees"] / r["broadcast_nccl"])
    print(f"  Blink's 6x broadcast maximum: the simulated trees' best ratio is on GPUs {top['gpus']} "
          f"({top['broadcast_trees']:.2f} / {top['broadcast_nccl']:.2f} GB/s); 6x would need NCCL at "
          f"{top['broadcast_trees'] / 6:.2f} GB/s there")


def dgx2_small_trees() -> None:
    """What the simulated DGX-2 trees' 1 KiB all-reduce waits for (docs/reproductions.md):
    its critical path, and how many transfers its thread blocks run one after another."""
    from arborcc.sim.simulate import simulate
    from arborcc.synth.synthesis import synthesize

    machine = build_machine("dgx2")
    r = synthesize(machine, "allreduce", "trees", size=1024)  # the file Fig. 19/20's 1 KiB row times
    s = simulate(r.algorithm, machine, 1024, "LL", record=True)  # as its file runs
    path = s.critical_path.summary()
    tbs = [len(p.threadblocks) for p in r.algorithm.ranks]
    sends = [sum(1 for st in tb.steps if st.op.sends) for p in r.algorithm.ranks for tb in p.threadblocks]
    print(f"DGX-2 trees all-reduce, 1 KiB, LL: {s.time * 1e6:.1f} us; critical path {path['transfers']} transfers, "
          f"{path['latency'] * 1e6:.1f} us of latency, {path['transfer'] * 1e6:.1f} us of transfers, "
          f"{path['launch'] * 1e6:.1f} us launch and base latency, {path['waiting'] * 1e6:.1f} us waiting; "
          f"{max(tbs)} thread blocks per rank at most, up to {max(sends)} sends on one thread block")


def fig19_20(sizes: list[int]) -> dict:
    """DGX-2 all-reduce: one-hop trees against NCCL, per size."""
    from arborcc.tune.compare import compare

    machine = build_machine("dgx2")
    cmp = compare(machine, "allreduce", sizes, strategies=["trees", "double-binary-tree", "nccl-ring"])
    names = [n for n in cmp.names() if n != "nccl-model"]
    cells = {(r["strategy"], r["size"]): r for r in cmp.rows}
    print("\nFig. 19 / 20: DGX-2, 16 GPUs, all-reduce, simulated (latency us | algbw GB/s)")
    print(f"{'size':>8} " + "".join(f"{n + ' us':>22}" for n in names) + "".join(f"{n + ' GB/s':>24}" for n in names)
          + f"{'NCCL/trees time':>16}  NCCL ran")
    ratios = []
    for s in cmp.sizes:
        t = {n: cells[(n, s)]["time_us"] for n in names}
        ratio = t["nccl"] / t["trees"]
        ratios.append(ratio)
        print(f"{s:>8} " + "".join(f"{t[n]:22.1f}" for n in names)
              + "".join(f"{cells[(n, s)]['algbw_gbps']:24.2f}" for n in names) + f"{ratio:16.2f}  "
              + "/".join(str(cells[("nccl", s)][k]) for k in ("nccl_algorithm", "protocol", "channels")))
    print(f"trees vs NCCL on DGX-2: NCCL's time / trees' time from {min(ratios):.2f} to {max(ratios):.2f} "
          f"(Blink reports up to 3.32x lower latency, 3.5x throughput)")
    dgx2_small_trees()
    return {"sizes": cmp.sizes, "names": names, "cells": cells}


def what_trees_wait_for() -> None:
    """What the simulated trees wait for (docs/reproductions.md, "What the simulated
    trees wait for"): the critical path of the 8-GPU DGX-1V all-reduce at 64 MiB, and
    whether the trees' all-reduce on GPUs 0,1,2,6 (which deadlocked at 64 MiB and more
    before the lowering pipelined tree blocks) finishes at every size."""
    from arborcc.sim.simulate import simulate
    from arborcc.synth.synthesis import synthesize

    machine = build_machine("dgx1v")
    r = synthesize(machine, "allreduce", "trees")
    s = simulate(r.algorithm, machine, 64 << 20, "Simple", record=True)  # as its file runs
    by_kind: dict[str, float] = {}
    for seg in s.critical_path.segments:
        by_kind[seg.kind] = by_kind.get(seg.kind, 0.0) + seg.end - seg.start
    counts = [st.count for p in r.algorithm.ranks for tb in p.threadblocks for st in tb.steps]
    print(f"\nwhat the trees wait for: 8-GPU DGX-1V all-reduce, 64 MiB, Simple: {s.time * 1e3:.2f} ms; critical path "
          + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1]))
          + f"; largest step {max(counts)} of {r.algorithm.chunks_per_loop} chunks; busiest link "
          f"{100 * max(s.link_utilization.values()):.0f}% utilized")
    sub = induced(machine, ["gpu0", "gpu1", "gpu2", "gpu6"])
    r = synthesize(sub, "allreduce", "trees", 0)
    verdicts = []
    for k in range(20, 30):
        try:
            simulate(r.algorithm, sub, 1 << k, "Simple")
            verdicts.append(f"{1 << (k - 20)}M ok")
        except VerificationError:
            verdicts.append(f"{1 << (k - 20)}M deadlock")
    print("trees all-reduce on GPUs 0,1,2,6 (Simple), by size: " + ", ".join(verdicts))


def plot(path_dir: str, f14: dict | None, f15: list | None, f19: dict | None) -> None:
    import os

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(path_dir, exist_ok=True)
    if f14:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
        for ax, (name, r) in zip(axes, f14.items()):
            ks = sorted(r["by_gpus"])
            ax.boxplot([r["by_gpus"][k] for k in ks], whis=(5, 95))
            ax.set_xticks(range(1, len(ks) + 1), [str(k) for k in ks])
            ax.set_title(f"{name}: trees / rings (broadcast, theory)")
            ax.set_xlabel("GPUs")
        axes[0].set_ylabel("speedup")
        fig.tight_layout()
        fig.savefig(os.path.join(path_dir, "blink_fig14.png"), dpi=110)
        plt.close(fig)
    if f15:
        fig, axes = plt.subplots(2, 1, figsize=(14, 7), sharex=True)
        xs = range(len(f15))
        for ax, coll in zip(axes, ("broadcast", "allreduce")):
            ax.bar([x - 0.2 for x in xs], [r[f"{coll}_nccl"] for r in f15], 0.4, label="NCCL (simulated)")
            ax.bar([x + 0.2 for x in xs], [r[f"{coll}_trees"] for r in f15], 0.4, label="trees (simulated)")
            ax.set_ylabel(f"{coll} algbw GB/s")
            ax.legend(fontsize=8)
        axes[1].set_xticks(list(xs), [r["gpus"] for r in f15], rotation=90, fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(path_dir, "blink_fig15_17.png"), dpi=110)
        plt.close(fig)
    if f19:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for n in f19["names"]:
            axes[0].plot(f19["sizes"], [f19["cells"][(n, s)]["algbw_gbps"] for s in f19["sizes"]], marker=".", label=n)
            axes[1].plot(f19["sizes"], [f19["cells"][(n, s)]["time_us"] for s in f19["sizes"]], marker=".", label=n)
        for ax, lab in zip(axes, ("algbw GB/s", "latency us")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("size (bytes)")
            ax.set_ylabel(lab)
            ax.legend(fontsize=8)
        axes[1].set_yscale("log")
        fig.suptitle("DGX-2 all-reduce, simulated")
        fig.tight_layout()
        fig.savefig(os.path.join(path_dir, "blink_fig19_20.png"), dpi=110)
        plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--figures", default="14,15,17,19", help="comma list of 14, 15 (or 17), 19 (or 20)")
    ap.add_argument("--size", default="500M", help="message size of Fig. 15/17 (default 500M = 500 MiB)")
    ap.add_argument("--dgx2-sizes", default="1K:256M", help="sizes of Fig. 19/20 (factor 4)")
    ap.add_argument("--plots", metavar="DIR", help="write the PNG plots here")
    args = ap.parse_args(argv)
    figs = {f.strip() for f in args.figures.split(",")}
    t0 = time.perf_counter()
    f14 = fig14() if "14" in figs else None
    f15 = fig15_17(parse_sizes(args.size)[0]) if figs & {"15", "17"} else None
    f19 = None
    if figs & {"19", "20"}:
        f19 = fig19_20(parse_sizes(args.dgx2_sizes)[::2])
    if figs & {"15", "17"}:
        what_trees_wait_for()
    if args.plots:
        plot(args.plots, f14, f15, f19)
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
