"""Multi-server all-reduce: every multi-node strategy against the bound, side by side.

Rows: 2 and 4 DGX A100 on a fat tree (and on rails, and with a 2:1 oversubscribed
core), two whole DGX-1V, and Blink's fragmented jobs (section 5.4: an 8-GPU job split
3 + 5, 4 + 4, 2 + 6 over two DGX-1V). Columns: the all-reduce bound, then per strategy
(trees, three-phase = Blink 3.5, hierarchical, blueconnect, nccl-ring) the algbw of the
emitted, verified algorithm in the steady-state bandwidth model (GB/s, large buffers)
and its synthesis time; "n/a" when a strategy does not apply (with the reason in the
footnotes). The last column is the best strategy's share of the bound.

    python benchmarks/synthesis/multinode.py
    python benchmarks/synthesis/multinode.py --only "DGX-1V 3+5" "2x8 A100"
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from arborcc.errors import SynthesisError
from arborcc.synth import collective_bound, synthesize

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # the shared topology sets
from topologies import MULTINODE  # noqa: E402

STRATEGIES = ("trees", "three-phase", "hierarchical", "blueconnect", "nccl-ring")
CASES = MULTINODE


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", choices=list(CASES), help="rows to run (default: all)")
    args = ap.parse_args(argv)
    head = f"{'topology':<16} {'ranks':>5} {'bound':>8} " + " ".join(f"{s:>19}" for s in STRATEGIES) + "  best/bound"
    print(head)
    print("-" * len(head))
    notes: list[str] = []
    for label in args.only or CASES:
        t = CASES[label]()
        bound = collective_bound(t, "allreduce").algbw
        cells, best = [], 0.0
        for name in STRATEGIES:
            t0 = time.perf_counter()
            try:
                r = synthesize(t, "allreduce", name)
            except SynthesisError as e:
                notes.append(f"{label} {name}: {e}")
                cells.append(f"{'n/a':>19}")
                continue
            best = max(best, r.algbw)
            cells.append(f"{r.algbw / 1e9:9.2f} ({time.perf_counter() - t0:5.2f} s)")
        print(f"{label:<16} {t.num_ranks:>5} {bound / 1e9:8.2f} " + " ".join(cells) + f"  {best / bound:10.4f}",
              flush=True)
        print(f"[{label} done]", file=sys.stderr, flush=True)
    print("\nGB/s algbw in the steady-state bandwidth model (synthesis time incl. verification)")
    for n in notes:
        print(f"  n/a: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
