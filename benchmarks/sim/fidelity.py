"""The simulator against published measurements: every point, its error, and the
geometric-mean error per group (the table in docs/fidelity.md).

    .venv/bin/python benchmarks/sim/fidelity.py [--json]

Published points (docs/fidelity.md cites where each comes from):
* nccl-tests all_reduce_perf busbw, 8x A100 SXM4 80GB and 8x H100 SXM (NCCL 2.18.5);
* H100 with NCCL_ALGO=RING (no in-switch reduction): about 370 GB/s busbw at 2-8 GB;
* Blink (MLSys 2020) section 2.2 / appendix A.1, DGX-1V: data forwarded along a chain of
  GPUs at 1000 MB, about 22 GB/s over 3 GPUs and 20 over 8; reduce+forward about 21
  over 3 GPUs and 19 over 8.

The simulated side is what NCCL runs (arborcc.tune.nccl: its rings, its protocol choice,
its channel count, NVLS where the switch reduces) and, for Blink's chains, the chain
algorithms below, all with the machine's default fidelity profile. Rows marked "fit"
are the points the profile's parameters were calibrated on (docs/fidelity.md says
which parameter each one sets), "plateau" rows repeat a fit point's asymptote; the
others are predictions.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from arborcc.ir.model import Algorithm, Buffer, Op, RankProgram, Step, ThreadBlock
from arborcc.sim.fidelity import fidelity_for
from arborcc.sim.simulate import simulate
from arborcc.topology.allocation import induced
from arborcc.topology.machines import build_machine
from arborcc.tune.nccl import NcclBaseline

KB, MB, GB = 1 << 10, 1 << 20, 1 << 30

#: (machine, size, published busbw GB/s, how NCCL ran, calibration role or "")
NCCL_POINTS = [
    ("dgx-a100", 1 * KB, 0.04, "auto", "fit: launch latency"),
    ("dgx-a100", 1 * MB, 36.2, "auto", ""),
    ("dgx-a100", 128 * MB, 174, "auto", ""),
    ("dgx-a100", 256 * MB, 214, "auto", ""),
    ("dgx-a100", 1 * GB, 228, "auto", ""),
    ("dgx-a100", 2 * GB, 230, "auto", ""),
    ("dgx-a100", 8 * GB, 231.6, "auto", "fit: NVLink efficiency"),
    ("dgx-h100", 1 * KB, 0.07, "auto", "fit: launch latency"),
    ("dgx-h100", 32 * KB, 1.7, "auto", ""),
    ("dgx-h100", 1 * MB, 43.7, "auto", ""),
    ("dgx-h100", 128 * MB, 401, "auto", ""),
    ("dgx-h100", 1 * GB, 466, "auto", ""),
    ("dgx-h100", 8 * GB, 479, "auto", "fit: NVLS efficiency"),
    ("dgx-h100", 2 * GB, 370, "ring", "fit: NVLink efficiency"),
    ("dgx-h100", 4 * GB, 370, "ring", "plateau of the 2 GB fit"),
    ("dgx-h100", 8 * GB, 370, "ring", "plateau of the 2 GB fit"),
]
#: Blink's chains on DGX-1V: (GPUs in chain order, reduce?, published GB/s, role)
BLINK_CHAINS = [
    ((0, 1, 2), False, 22.0, "fit: NVLink efficiency (21 of 25, their mean)"),
    ((0, 1, 2, 3, 7, 6, 5, 4), False, 20.0, "fit: NVLink efficiency (21 of 25, their mean)"),
    ((0, 1, 2), True, 21.0, ""),
    ((0, 1, 2, 3, 7, 6, 5, 4), True, 19.0, "fit: reduce bandwidth"),
]


def chain_algorithm(n: int, reduce: bool) -> Algorithm:
    """In place: rank 0's buffer forwarded along ranks 0 -> 1 -> ... -> n-1 (a
    broadcast from rank 0), or reduced along it, every rank adding its own data (a
    reduce into rank n-1)."""
    relay = Op.RECV_REDUCE_SEND if reduce else Op.RECV_COPY_SEND
    last = Op.RECV_REDUCE_COPY if reduce else Op.RECV
    i = Buffer.INPUT
    progs = []
    for r in range(n):
        if r == 0:
            tb = ThreadBlock(0, send=1, steps=[Step(Op.SEND, i, 0, i, 0)])
        elif r == n - 1:
            tb = ThreadBlock(0, recv=r - 1, steps=[Step(last, i, 0, i, 0)])
        else:
            tb = ThreadBlock(0, send=r + 1, recv=r - 1, steps=[Step(relay, i, 0, i, 0)])
        progs.append(RankProgram(r, 1, 1, 0, [tb]))
    coll = "reduce" if reduce else "broadcast"
    return Algorithm(f"chain-{coll}-{n}", coll, n, 1, progs, root=n - 1 if reduce else 0, inplace=True,
                     outofplace=False)


def rel_error(sim: float, pub: float) -> float:
    return sim / pub - 1


def nccl_rows() -> list[dict]:
    rows, baselines = [], {}
    for machine, size, pub, how, role in NCCL_POINTS:
        if machine not in baselines:
            baselines[machine] = NcclBaseline(build_machine(machine))
        base = baselines[machine]
        if how == "ring":
            proto = "Simple"
            call = base.call(size, protocol=proto)
        else:
            call = base.call(size)
        busbw = call.result.busbw / 1e9
        what = f"all-reduce {_fmt(size)}" + (" (NCCL_ALGO=RING)" if how == "ring" else "")
        rows.append({"group": f"{machine} {call.algorithm}", "what": what,
                     "nccl": f"{call.algorithm}/{call.protocol}", "published_gbps": pub,
                     "simulated_gbps": round(busbw, 3), "error": rel_error(busbw, pub), "role": role})
    return rows


def blink_rows() -> list[dict]:
    machine = build_machine("dgx1v")
    rows = []
    for gpus, reduce, pub, role in BLINK_CHAINS:
        topo = induced(machine, [machine.ranks[g] for g in gpus])
        algo = chain_algorithm(len(gpus), reduce)
        r = simulate(algo, topo, 1000 * 10**6, "Simple", fidelity_for(machine))
        gbps = r.algbw / 1e9
        what = f"{'reduce+forward' if reduce else 'forward'} chain of {len(gpus)}, 1000 MB"
        rows.append({"group": "dgx1v blink", "what": what, "nccl": "-", "published_gbps": pub,
                     "simulated_gbps": round(gbps, 3), "error": rel_error(gbps, pub), "role": role})
    return rows


def _fmt(size: int) -> str:
    for unit, name in ((GB, "GB"), (MB, "MB"), (KB, "KB")):
        if size >= unit:
            return f"{size // unit} {name}"
    return f"{size} B"


def geomean_abs(errors: list[float]) -> float:
    """ASTRA-sim's summary: the geometric mean of the points' |error| (a point within
    1e-9 counts as 1e-9). One near-exact point pulls it far down, so it is printed
    next to :func:`geomean_ratio` and the largest error."""
    return math.exp(sum(math.log(max(abs(e), 1e-9)) for e in errors) / len(errors))


def geomean_ratio(errors: list[float]) -> float:
    """exp(mean |ln(simulated / published)|) - 1: the typical factor by which a point is
    off, which a near-exact point does not drag towards zero."""
    return math.exp(sum(abs(math.log1p(e)) for e in errors) / len(errors)) - 1


def summarize(errors: list[float]) -> dict:
    return {"points": len(errors), "geomean_abs_error": geomean_abs(errors), "geomean_ratio_error":
            geomean_ratio(errors), "mean_abs_error": sum(abs(x) for x in errors) / len(errors),
            "max_abs_error": max(abs(x) for x in errors)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = nccl_rows() + blink_rows()
    groups: dict[str, list[float]] = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r["error"])
    summary = {g: summarize(e) for g, e in groups.items()}
    summary["all points"] = summarize([r["error"] for r in rows])
    summary["predictions only"] = summarize([r["error"] for r in rows if not r["role"]])
    if args.json:
        json.dump({"rows": rows, "summary": summary}, sys.stdout, indent=2)
        print()
        return 0
    print(f"{'group':<16} {'point':<38} {'NCCL ran':<13} {'published':>9} {'simulated':>9} {'error':>8}  role")
    for r in rows:
        print(f"{r['group']:<16} {r['what']:<38} {r['nccl']:<13} {r['published_gbps']:9.2f} "
              f"{r['simulated_gbps']:9.2f} {100 * r['error']:+7.1f}%  {r['role']}")
    print()
    print(f"{'group':<18} {'points':>6} {'geomean |err|':>14} {'geomean ratio':>14} {'mean |err|':>11} {'max |err|':>10}")
    for g, s in summary.items():
        print(f"{g:<18} {s['points']:6d} {100 * s['geomean_abs_error']:13.1f}% {100 * s['geomean_ratio_error']:13.1f}% "
              f"{100 * s['mean_abs_error']:10.1f}% {100 * s['max_abs_error']:9.1f}%")
    print("\nASTRA-sim (analytical backend) against NCCL rings on 8 H100s: geomean error 9.69%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
