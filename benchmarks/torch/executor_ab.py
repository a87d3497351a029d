"""The torch.distributed executor against another commit's executor and gloo's own
all-reduce, side by side in one job: 4 ranks as two "hosts" of 2 (``ARBORCC_HOST``, as the
two-host table of ``benchmarks/torch/allreduce.py``), each executor running arborcc's
default all-reduce over one gloo group of all 4 ranks.

    .venv/bin/python benchmarks/torch/executor_ab.py [--against 3ba9240] [--rounds 8] [--sizes 64M,16M]
                                                     [--tile-bytes 4M]

The other executor is ``src/arborcc/torch/executor.py`` as of ``--against`` (default:
3ba9240, an executor on a schedule fixed before the call, with its
``arborcc/torch/schedule.py``), read with ``git show`` into a temporary directory and
imported from there (the schedule module under its own name, which that executor
imports); it must run on this checkout's other ``arborcc`` modules. ``--tile-bytes`` sets the
other executor's tile size. Per round every way is timed as the two-host table times it (a
barrier, one call; 1 warm-up call and 3 samples, the slowest rank's sample counts) in
an order rotated each round; the table shows per way the median over rounds of each
round's median, and gloo's time over the way's, round by round (ratios are taken within
a round, so a change of the machine's load between rounds does not favour a way).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from arborcc.runtime.launch import run_ranks

sys.path.insert(0, str(Path(__file__).resolve().parent))
from allreduce import ROOT, check_sum_of_ones, free_threads_group, rotated, size_list, time_batches, unpinned  # noqa: E402


def module_of(commit: str, path: str, name: str, directory: str):
    """The file ``path`` of ``commit``, imported as module ``name`` (None if that commit
    has no such file)."""
    shown = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True)
    if shown.returncode:
        return None
    file = Path(directory) / f"rank{os.environ['RANK']}" / f"{name.replace('.', '_')}.py"  # (ranks write at once)
    file.parent.mkdir(exist_ok=True)
    file.write_text(shown.stdout)
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def other_executor(commit: str, directory: str):
    """``arborcc/torch/executor.py`` of ``commit`` (with the schedule module it imports, if
    that commit has one), imported under another name."""
    if "arborcc.torch.schedule" not in sys.modules:
        module_of(commit, "src/arborcc/torch/schedule.py", "arborcc.torch.schedule", directory)
    return module_of(commit, "src/arborcc/torch/executor.py", "other_executor", directory)


def rank_times(sizes: list[int], rounds: int, commit: str, directory: str, tile_bytes: int | None) -> dict:
    """On one rank: {way: {size: [[seconds per sample] per round]}}."""
    import torch
    import torch.distributed as dist

    import arborcc.torch
    from arborcc.torch.executor import GroupExecutor

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    os.environ["ARBORCC_HOST"] = f"host{rank * 2 // world}"
    torch.set_num_threads(1)
    arborcc.torch.init(timeout=300)
    gloo = free_threads_group()
    now = GroupExecutor(gloo, timeout=300)
    other = other_executor(commit, directory).GroupExecutor(gloo, timeout=300,
                                                            **({"tile_bytes": tile_bytes} if tile_bytes else {}))
    ways = {"gloo": lambda t: dist.all_reduce(t, group=gloo), "executor": lambda t: now.allreduce(t, "sum"),
            f"executor {commit}": lambda t: other.allreduce(t, "sum")}
    out: dict = {way: {} for way in ways}
    for size in sizes:
        t = torch.ones(size // 4)
        for rnd in range(rounds):
            for way, call in rotated(ways, rnd):
                times, _ = time_batches(lambda: call(t), lambda: gloo.barrier().wait(), 1, 3, 1,
                                        unpinned if way == "gloo" else contextlib.nullcontext)
                out[way].setdefault(size, []).append(times)
        for way, call in ways.items():
            check_sum_of_ones(way, call, t, world)
    dist.destroy_process_group()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--against", default="3ba9240", help="the commit whose executor to compare with")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--sizes", type=size_list, default=[64 << 20, 16 << 20])
    p.add_argument("--tile-bytes", type=size_list, help="the other executor's tile size, e.g. 2M (default: its own)")
    args = p.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as directory:
        per_rank = run_ranks(rank_times, 4, (args.sizes, args.rounds, args.against, directory,
                                                      args.tile_bytes[0] if args.tile_bytes else None), timeout=900)
    for size in args.sizes:
        rounds = {way: [statistics.median(max(s) for s in zip(*(r[way][size][k] for r in per_rank)))
                        for k in range(args.rounds)] for way in per_rank[0]}
        print(f"\n## all-reduce of {size >> 20} MB, 4 ranks as two hosts of 2 (median ms per call over rounds; "
              f"gloo / way: median over rounds, then each round's)")
        for way, times in rounds.items():
            ratios = [g / x for g, x in zip(rounds["gloo"], times)]
            print(f"{way:>17} {statistics.median(times) * 1e3:8.1f} ms  {statistics.median(ratios):5.2f}x  "
                  + " ".join(f"{r:.2f}" for r in ratios))
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
