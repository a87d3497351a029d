"""Start-up time of the ``arborcc`` command, against a bare interpreter in the same run.

Targets: ``arborcc --help`` under 0.25 s and ``arborcc compile ring-allreduce
--ranks 128 --dialect legacy -o r.xml`` under 0.8 s wall, medians of 5 runs. Each run is
a fresh process; the baseline rows (``python -c pass``, ``python -c "import numpy"``) show
what the machine gives any Python program right now, so a slow row on a busy machine can
be told from a slow arborcc. CPU time (user + system of the child) is printed too, and
whether Python may cache bytecode: with ``PYTHONDONTWRITEBYTECODE`` set, every run
compiles the sources it imports (the 128-rank compile took 0.82 s so, 0.72 s with the
cache, on a machine where a 20-million-iteration Python loop takes 3.9 s).

    python benchmarks/cli/startup.py             # 5 runs per command
    python benchmarks/cli/startup.py --runs 9

Prints one table; exit status 0 whatever the result (a benchmark, not a test).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _arborcc() -> list[str]:
    """The installed console script next to this interpreter, else the module."""
    script = Path(sys.executable).parent / "arborcc"
    return [str(script)] if script.exists() else [sys.executable, "-m", "arborcc.cli.main"]


def _time(cmd: list[str], cwd: str) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5, help="runs per command (median; default 5)")
    args = p.parse_args(argv)
    arborcc = _arborcc()
    rows = [
        ("python -c pass", [sys.executable, "-c", "pass"], None),
        ('python -c "import numpy"', [sys.executable, "-c", "import numpy"], None),
        ("arborcc --help", arborcc + ["--help"], 0.25),
        ("arborcc compile ring-allreduce --ranks 128 --dialect legacy -o r.xml",
         arborcc + ["compile", "ring-allreduce", "--ranks", "128", "--dialect", "legacy", "-o", "r.xml"], 0.8),
    ]
    bytecode = "off (PYTHONDONTWRITEBYTECODE is set: every run compiles arborcc's sources)" \
        if os.environ.get("PYTHONDONTWRITEBYTECODE") else "on"
    print(f"{args.runs} runs per command, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}, "
          f"bytecode cache {bytecode}")
    header = f"{'command':<72} {'median s':>9} {'min s':>7} {'cpu s':>7}  target"
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory(prefix="arborcc-startup-") as cwd:
        base = None
        for label, cmd, target in rows:
            _time(cmd, cwd)  # warm the file cache; not counted
            walls, cpus = zip(*(_time(cmd, cwd) for _ in range(args.runs)))
            med = statistics.median(walls)
            base = base if base is not None else med
            verdict = ""
            if target is not None:
                verdict = f"< {target:g} s: {'met' if med < target else 'NOT met'} ({med / base:.1f}x python -c pass)"
            print(f"{label:<72} {med:9.3f} {min(walls):7.3f} {statistics.median(cpus):7.3f}  {verdict}", flush=True)
    print(f"load average now {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
