"""BlueConnect's all-reduce time (its eq. 9) against the two-level scheme (eq. 7) and one
ring (eqs. 5-6), 12 to 192 GPUs.

    .venv/bin/python benchmarks/reproductions/blueconnect.py [--size 100M] [--alpha-us 5] [--plot PNG]

BlueConnect: Decomposing All-Reduce for Deep Learning on Heterogeneous Network
Hierarchy (M. Cho, U. Finkler, D. Kung, H. Hunter; SysML 2019,
https://proceedings.mlsys.org/paper_files/paper/2019/hash/0c8abcf158ed12d0dd94480681186fda-Abstract.html).
The equations are ``arborcc.sim.blueconnect_model``'s. The machine is the paper's IBM
setting: 4 GPUs per node joined by NVLink, nodes by 100 Gb/s InfiniBand - here
w0 = 32 GB/s (the paper's "around 32GB/s per lane" NVLink) and w1 = 12.5 GB/s; the
message is ResNet-50's gradient (25.6 M float32, about 100 MB) and alpha a per-message
latency of 5 us (both assumptions of this script, changeable by flags); a second table
varies alpha at 192 GPUs. The paper's claim (section 5, measured): BlueConnect beats
the one-level ring and the two-level scheme, up to 192 GPUs.
"""

from __future__ import annotations

import argparse
import sys

from line_plot import line_plot

from arborcc.sim.blueconnect_model import blueconnect_time, one_level_ring_time, two_level_time
from arborcc.sizes import parse_size
from arborcc.topology.model import GB

GPUS = (12, 16, 24, 32, 48, 64, 96, 128, 192)
PER_NODE = 4


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="102400000", help="bytes (default 25.6 M float32)")
    ap.add_argument("--alpha-us", type=float, default=5.0)
    ap.add_argument("--w0", type=float, default=32.0, help="intra-node GB/s (default 32)")
    ap.add_argument("--w1", type=float, default=12.5, help="inter-node GB/s (default 12.5 = 100 Gb/s)")
    ap.add_argument("--plot", metavar="PNG")
    args = ap.parse_args(argv)
    n = parse_size(args.size)
    alpha = args.alpha_us * 1e-6
    ws = (args.w0 * GB, args.w1 * GB)
    print(f"all-reduce of {n / 1e6:.1f} MB, {PER_NODE} GPUs per node at {args.w0:g} GB/s, nodes at {args.w1:g} GB/s, "
          f"alpha {args.alpha_us:g} us (BlueConnect eqs. 5-9)")
    print(f"{'GPUs':>5} {'ring ms':>9} {'two-level ms':>12} {'BlueConnect ms':>14} {'vs ring':>8} {'vs two-level':>12}")
    rows = []
    for p in GPUS:
        ring = one_level_ring_time(p, n, alpha, ws)
        two = two_level_time(PER_NODE, p, n, alpha, ws[0], ws)
        blc = blueconnect_time((PER_NODE, p // PER_NODE), n, alpha, ws)
        rows.append((p, ring, two, blc))
        print(f"{p:>5} {ring * 1e3:9.2f} {two * 1e3:12.2f} {blc * 1e3:14.2f} {ring / blc:7.2f}x {two / blc:11.2f}x")
    print(f"BlueConnect fastest at every count: {all(b < min(r, t) for _, r, t, b in rows)}; "
          f"speedup over the ring {rows[0][1] / rows[0][3]:.2f}x at {rows[0][0]} GPUs, "
          f"{rows[-1][1] / rows[-1][3]:.2f}x at {rows[-1][0]}")
    p = GPUS[-1]
    print(f"\nat {p} GPUs, by per-message latency alpha (eq. 9 divides a node's uplink among its GPUs, "
          f"eqs. 5-6 give the ring all of it; BlueConnect sends far fewer messages):")
    print(f"{'alpha us':>9} {'ring ms':>9} {'two-level ms':>12} {'BlueConnect ms':>14} {'vs ring':>8}")
    for a_us in (1, 5, 20, 50, 100, 200):
        a = a_us * 1e-6
        ring = one_level_ring_time(p, n, a, ws)
        two = two_level_time(PER_NODE, p, n, a, ws[0], ws)
        blc = blueconnect_time((PER_NODE, p // PER_NODE), n, a, ws)
        print(f"{a_us:>9} {ring * 1e3:9.2f} {two * 1e3:12.2f} {blc * 1e3:14.2f} {ring / blc:7.2f}x")
    if args.plot:
        line_plot(args.plot, [r[0] for r in rows],
                  {name: [r[i] * 1e3 for r in rows] for i, name in
                   ((1, "one ring (eq. 5-6)"), (2, "two-level (eq. 7)"), (3, "BlueConnect (eq. 9)"))},
                  "GPUs", "all-reduce time (ms)", f"BlueConnect model, {n / 1e6:.0f} MB", log2_x=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
