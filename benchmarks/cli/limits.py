"""What the inputs at arborcc's limits cost: the numbers behind docs/limits.md.

Each row runs one ``arborcc`` command in a fresh process at (or near) a limit of
:mod:`arborcc.limits` and prints its wall time, its peak resident memory (``wait4``)
and the size of the file it reads or writes. The first row, ``python -c "import
numpy"``, shows what the machine gives any Python program right now.

    python benchmarks/cli/limits.py            # about two minutes on a quiet 2-core machine
    python benchmarks/cli/limits.py --slow     # also topo classes over all 65,399 DGX-2 allocations

Prints one table; exit status 0 whatever the result (a benchmark, not a test).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _arborcc() -> list[str]:
    script = Path(sys.executable).parent / "arborcc"
    return [str(script)] if script.exists() else [sys.executable, "-m", "arborcc.cli.main"]


def run(cmd: list[str], cwd: str) -> tuple[int, float, int]:
    """(exit status, wall seconds, peak resident bytes) of one fresh process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, time.perf_counter() - start, usage.ru_maxrss * 1024


def big_buffers_algorithm(path: Path, ranks: int, chunks: int) -> None:
    """A JSON all-to-all of one send and receive per rank (incorrect: the verifier walks every chunk
    to say so) whose ranks have ``chunks`` input and output chunks each
    (``ranks * 2 * chunks`` chunks to lay out)."""
    programs = []
    for r in range(ranks):
        tbs = [{"id": 0, "send": (r + 1) % ranks, "recv": (r - 1) % ranks, "channel": 0, "steps": [
            {"op": "s", "src_buf": "i", "src_off": 0, "dst_buf": "o", "dst_off": 0, "count": 1, "dep": None,
             "has_dep": False},
            {"op": "r", "src_buf": "i", "src_off": 0, "dst_buf": "o", "dst_off": 0, "count": 1, "dep": None,
             "has_dep": False}]}]
        programs.append({"rank": r, "input_chunks": chunks, "output_chunks": chunks, "scratch_chunks": 0,
                         "threadblocks": tbs})
    doc = {"format": "arborcc-algorithm", "version": 1, "name": "big-buffers", "collective": "alltoall",
           "num_ranks": ranks, "chunks_per_loop": chunks, "protocol": "Simple", "inplace": False,
           "outofplace": True, "min_bytes": 0, "max_bytes": 0, "ranks": programs}
    path.write_text(json.dumps(doc))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--slow", action="store_true", help="also classify all DGX-2 allocations (minutes)")
    args = ap.parse_args()
    a = _arborcc()
    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)

        def row(limit: str, label: str, cmd: list[str], size_of: str | None = None) -> None:
            code, wall, peak = run(cmd, tmp)
            size = f", {(work / size_of).stat().st_size / 2**20:.1f} MiB" if size_of and (work / size_of).exists() else ""
            rows.append((limit, label, f"exit {code}, {wall:.1f} s, {peak / 2**20:.0f} MB{size}"))

        row("(baseline)", 'python -c "import numpy"', [sys.executable, "-c", "import numpy"])
        row("input-bytes", "topo export --machine dgx-a100 --nodes 512 -o a100x512.yaml (4,096 GPUs)",
            [*a, "topo", "export", "--machine", "dgx-a100", "--nodes", "512", "-o", "a100x512.yaml"], "a100x512.yaml")
        row("input-bytes", "topo show --file a100x512.yaml", [*a, "topo", "show", "--file", "a100x512.yaml"],
            "a100x512.yaml")
        row("algorithm-bytes", "compile ring-allreduce --ranks 128 --channels 4 -o ring128.xml",
            [*a, "compile", "ring-allreduce", "--ranks", "128", "--channels", "4", "-o", "ring128.xml"], "ring128.xml")
        row("algorithm-bytes", "verify ring128.xml", [*a, "verify", "ring128.xml"], "ring128.xml")
        row("ranks", "topo show --machine dgx-a100 --nodes 4096 (32,768 GPUs)",
            [*a, "topo", "show", "--machine", "dgx-a100", "--nodes", "4096"])
        big_buffers_algorithm(work / "big.json", 64, 32768)
        row("buffer-chunks", "verify big.json (64 ranks x 2 x 32,768 chunks = 4 Mi chunks)",
            [*a, "verify", "big.json"], "big.json")
        row("operations", "compile ring-allreduce --ranks 354 --format json -o r354.json (249,924 operations)",
            [*a, "compile", "ring-allreduce", "--ranks", "354", "--format", "json", "-o", "r354.json"], "r354.json")
        row("algorithm-bytes", "verify r354.json", [*a, "verify", "r354.json"], "r354.json")
        row("operations", "--limit operations=500000 compile ring-allreduce --ranks 500 --format json "
            "-o r500.json (499,000 operations)",
            [*a, "--limit", "operations=500000", "compile", "ring-allreduce", "--ranks", "500", "--format", "json",
             "-o", "r500.json"], "r500.json")
        row("matrix-gpus", "topo show --machine dgx-a100 --nodes 16 > show128.txt (128 GPUs, with the matrix)",
            ["bash", "-c", f"{' '.join(a)} topo show --machine dgx-a100 --nodes 16 > show128.txt"], "show128.txt")
        if args.slow:
            row("allocations", "--limit allocations=70000 topo classes --machine dgx2 --min-gpus 3 --max-gpus 16 "
                "(65,399 allocations)", [*a, "--limit", "allocations=70000", "topo", "classes", "--machine", "dgx2",
                                         "--min-gpus", "3", "--max-gpus", "16"])
    width = max(len(r[1]) for r in rows)
    print(f"{'limit':15s} {'command':{width}s} result")
    for limit, label, result in rows:
        print(f"{limit:15s} {label:{width}s} {result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
