"""``dist.all_reduce`` through the ``arborcc`` backend against gloo and the raw runtime,
side by side in one run; the two-"host" job at 64 MB; DDP's time per iteration.

    .venv/bin/python benchmarks/torch/allreduce.py [--quick] [--runs K] [--ranks 4] [--sizes 1M,4M]
                                                   [--parts single,gloo-plain,overhead,gloo-modes,cpu-split,
                                                            two-hosts,ddp]
                                                   [--json OUT.json]

Per rank count (2 and 4), one job of local ranks holds three ways to all-reduce the same
float32 tensor (sum): ``dist.all_reduce`` on the default group (backend ``arborcc``),
``dist.all_reduce`` on a gloo group of the same ranks (its threads, and the calling thread
while gloo runs, free to run on any CPU as in a plain gloo job: :func:`free_threads_group`,
:func:`unpinned`), and the raw shared-memory runtime (the backend's own
:class:`arborcc.runtime.Communicator`, called directly, in place as ``dist.all_reduce``).
For each size the three alternate in rounds (in an order rotated each round, so that
each way runs once in every position); every way is measured as nccl-tests
measures: warm-up calls, then samples of a barrier followed by a batch of calls timed
together (16 up to 1 MB, 16 MB of calls above, one call from 16 MB), the slowest rank's
sample counts, the table shows medians of samples. busbw = size / time * 2(n-1)/n, as
nccl-tests.

gloo as a user gets it (``--parts gloo-plain``): gloo's all-reduce at 64 KB-1 MB timed as
above in a plain gloo job (``init_process_group("gloo")`` on every rank, as ``torchrun
... --backend gloo`` scripts make it: no arborcc, no thread pinned, default options)
against gloo as the tables above time it (a gloo group in an arborcc job, free threads),
jobs alternating.

The backend's own cost (``--parts overhead``): CPU time per call of ``dist.all_reduce``
on the arborcc backend against the raw runtime's call it ends in, on a 4-byte tensor
(where nothing else costs), alternating in one job.

gloo modes (``--parts gloo-modes``): gloo's 1 MB all-reduce on a gloo group made the
usual way after ``init`` (its threads pinned to the rank's CPU) against one with free
threads, alternating in one job.

CPU split (``--parts cpu-split``): 4 ranks of a plain gloo job, 64 MB: gloo's all-reduce,
the plain ring and the executor alone (its default all-reduce; the same in 4 MB tiles;
a one-channel ring), with the CPU time per call by thread (the calling thread, the
executor's posting and waiting threads, gloo's I/O and worker threads).

Two hosts: 4 ranks, two "hosts" of 2 (``ARBORCC_HOST``), at 16 and 64 MB: the backend
(shared memory inside a host, the torch.distributed executor over gloo between hosts),
the executor alone over gloo for all 4 ranks (arborcc's built-in all-reduce as
point-to-point messages), gloo's own all-reduce, and a plain ring (:class:`PlainRing`:
the bytes of a bandwidth-optimal all-reduce as a ring of gloo sends and receives, plus
the reductions, no algorithm, no result); with the CPU time per call
of each process (all threads), which decides on an idle machine where 4 ranks share 2
cores.

Targets: arborcc >= 10x gloo's busbw from 64 KB to 1 MB and >= 1.2x from
16 MB up; arborcc's time <= 1.3x the raw runtime's at every size; two hosts: the
backend (and the executor) no slower than gloo at 64 MB. The machine is shared:
compare within one run and rerun when other work was running (load shown). ``--runs K``
runs every job K times: the times are medians over the samples of all runs, a ratio is
the median of the K runs' ratios (each measured side by side in one job), and the last
column shows each run's ratio, so a row that moves from run to run shows it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from arborcc.ir.collectives import busbw_factor
from arborcc.runtime.launch import run_ranks

KB, MB = 1 << 10, 1 << 20
SIZES = [4 * KB, 64 * KB, 256 * KB, 1 * MB, 4 * MB, 16 * MB, 64 * MB]
QUICK_SIZES = [64 * KB, 1 * MB, 16 * MB]
ROUNDS = 3
ROOT = Path(__file__).resolve().parents[2]


def iterations(size: int, quick: bool) -> tuple[int, int]:
    """(warm-up calls, timed samples per round) for a size."""
    if size >= 16 * MB:
        return 1, 2 if quick else 3
    return 5, 4 if quick else 8


def batch_of(size: int) -> int:
    """Calls timed back to back per sample, as nccl-tests times a batch of iterations after
    its barrier: 16 up to 1 MB, fewer above (at least 16 MB per sample, one call from 16
    MB), so that the ranks' skew as they leave the barrier (tens of us with gloo's
    barrier, which this benchmark uses for every way alike) is shared by many calls."""
    return max(1, min(16, 16 * MB // size))


def time_batches(call, barrier, warmup: int, samples: int, batch: int,
                 around=contextlib.nullcontext) -> tuple[list[float], list[float]]:
    """``warmup`` untimed calls, then ``samples`` times: a barrier, ``batch`` calls timed
    together; seconds per call of each sample, and CPU seconds per call of this process
    (all its threads). All of it runs inside ``around()``."""
    with around():
        for _ in range(warmup):
            call()
        out, cpu = [], []
        for _ in range(samples):
            barrier()
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(batch):
                call()
            out.append((time.perf_counter() - t0) / batch)
            cpu.append((time.process_time() - c0) / batch)
    return out, cpu


def unpinned():
    """The calling thread free of the one CPU the backend pinned it to, while gloo runs:
    a ``torchrun ... --backend gloo`` job pins nothing, so gloo is timed as a user gets it
    (:func:`arborcc.torch.free_threads`; the ``gloo-plain`` table compares with a plain gloo job)."""
    import arborcc.torch

    return arborcc.torch.free_threads()


def free_threads_group():
    """A gloo group of every rank whose threads may run on any of the rank's CPUs
    (:func:`arborcc.torch.free_threads`): made the usual way after ``init``, gloo's threads
    would inherit the one CPU the shared-memory runtime pinned the rank to
    (:func:`gloo_mode_timings`)."""
    import torch.distributed as dist

    import arborcc.torch

    with arborcc.torch.free_threads():
        return dist.new_group(backend="gloo")


class PlainRing:
    """What gloo's point-to-point operations cost an all-reduce of a tensor without any
    algorithm: the bytes a bandwidth-optimal all-reduce sends and receives per rank
    (2(n-1)/n of the tensor) as one ring of ``send``/``recv`` on ``group`` (8 MB messages,
    two in flight, the shape of gloo's own ring), then the n-1 reductions of a block it
    makes. It computes no result. A reference for the executor, not a strict bound: gloo's
    own ring, in C++ and sending from the buffer it reduces into, can be cheaper."""

    MESSAGE = 8 * MB

    def __init__(self, group):
        self.group, self.rank, self.size = group, group.rank(), group.size()
        self.buffers: dict = {}

    def __call__(self, t) -> None:
        import torch

        n, rank = self.size, self.rank
        elements = t.numel() // n * n
        moved = 2 * (n - 1) * elements // n
        if moved not in self.buffers:
            self.buffers[moved] = (torch.ones(moved), torch.empty(moved))
        src, dst = self.buffers[moved]
        step = max(1, self.MESSAGE // 4)
        right, left = (rank + 1) % n, (rank - 1) % n
        recvs, sends = [], []
        for k, start in enumerate(range(0, moved, step)):
            recvs.append(self.group.recv([dst[start:start + step]], left, k % 64))
            sends.append(self.group.send([src[start:start + step]], right, k % 64))
            if len(recvs) >= 2:
                recvs.pop(0).wait()
                sends.pop(0).wait()
        for work in recvs + sends:
            work.wait()
        block = elements // n
        for k in range(n - 1):
            torch.add(t[k * block:(k + 1) * block], dst[k * block:(k + 1) * block], out=dst[k * block:(k + 1) * block])


def check_sum_of_ones(way: str, call, t, world: int) -> None:
    """Run ``call`` on ``t`` filled with ones and check that every rank's sum (``world``)
    arrived at both ends; raises naming the way and the size."""
    t.fill_(1.0)
    call(t)
    if float(t[0]) != world or float(t[-1]) != world:
        raise RuntimeError(f"{way}: wrong all-reduce result at {t.numel() * t.element_size()} bytes: {float(t[0])}")


def rotated(ways: dict, rnd: int) -> list:
    """``ways``' items in the order of round ``rnd``: rotated by one each round, so that no
    way always runs right after the same other one (after gloo's multi-millisecond calls, or
    first in the round) and each is timed in every position."""
    items = list(ways.items())
    k = rnd % len(items)
    return items[k:] + items[:k]


def rank_timings(sizes: list[int], quick: bool, hosts: int) -> dict:
    """On one rank: {way: {size: [seconds per timed call]}}."""
    import torch
    import torch.distributed as dist

    import arborcc.torch
    from arborcc.torch.executor import GroupExecutor

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if hosts > 1:
        os.environ["ARBORCC_HOST"] = f"host{rank * hosts // world}"
    torch.set_num_threads(1)
    arborcc.torch.init(timeout=300)
    gloo = free_threads_group()
    barrier = gloo.barrier
    if hosts > 1:
        executor = GroupExecutor(gloo, timeout=300)
        ways = {"arborcc": lambda t: dist.all_reduce(t), "executor": lambda t: executor.allreduce(t, "sum"),
                "gloo": lambda t: dist.all_reduce(t, group=gloo), "plain ring": PlainRing(gloo)}
    else:
        raw = dist.group.WORLD.transport.local
        ways = {"arborcc": lambda t: dist.all_reduce(t), "gloo": lambda t: dist.all_reduce(t, group=gloo),
                "raw": lambda t: raw.allreduce(t)}
    out: dict = {way: {} for way in ways}
    out.update({f"{way} cpu": {} for way in ways})
    for size in sizes:
        warmup, iters = iterations(size, quick)
        t = torch.ones(size // 4)
        for rnd in range(ROUNDS):
            for way, call in rotated(ways, rnd):
                times, cpu = time_batches(lambda: call(t), lambda: barrier().wait(), warmup, iters, batch_of(size),
                                          unpinned if way == "gloo" else contextlib.nullcontext)
                out[way].setdefault(size, []).extend(times)
                out[f"{way} cpu"].setdefault(size, []).extend(cpu)
        for way, call in ways.items():
            if way == "plain ring":  # computes no result
                continue
            check_sum_of_ones(way, call, t, world)
    dist.destroy_process_group()
    return out


def gloo_timings(sizes: list[int], plain: bool, quick: bool) -> dict:
    """On one rank: gloo's all-reduce of each size timed as :func:`rank_timings` times it,
    in a plain gloo job (``plain``: ``init_process_group("gloo")``, nothing pinned, gloo's
    default options) or as the one-host tables time it: on the gloo group of an arborcc
    job (:func:`free_threads_group`), the calling thread :func:`unpinned`:
    {size: [seconds per call of each sample]}."""
    import datetime

    import torch
    import torch.distributed as dist

    import arborcc.torch

    torch.set_num_threads(1)
    if plain:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
        group = dist.group.WORLD
    else:
        arborcc.torch.init(timeout=300)
        group = free_threads_group()
    out: dict = {}
    for size in sizes:
        warmup, iters = iterations(size, quick)
        t = torch.ones(size // 4)
        out[size] = time_batches(lambda: dist.all_reduce(t, group=group), lambda: group.barrier().wait(), warmup,
                                 ROUNDS * iters, batch_of(size), unpinned)[0]
    dist.destroy_process_group()
    return out


def gloo_plain_table(ranks_list: list[int], sizes: list[int], quick: bool, runs: int) -> list[dict]:
    """gloo's all-reduce in a plain gloo job against the gloo group of the one-host tables
    (:func:`gloo_timings`), ``runs`` jobs of each, alternating; medians of the slowest
    rank's samples pooled over the jobs."""
    print(f"\n## gloo's all-reduce, float32 sum, as a user gets it (a plain gloo job, nothing pinned, default options) "
          f"and as the tables above time it (a gloo group with free threads in an arborcc job, the calling thread "
          f"unpinned while gloo runs); median us per call, "
          f"{runs} jobs of each, alternating")
    print(f"{'ranks':>5} {'size':>7} {'plain gloo us':>14} {'in arborcc job us':>18} {'plain / table':>14}")
    rows = []
    for ranks in ranks_list:
        pooled: dict = {True: {}, False: {}}
        for _ in range(runs):
            for plain in (True, False):
                per_rank = run_ranks(gloo_timings, ranks, (sizes, plain, quick), timeout=900)
                for size in sizes:
                    pooled[plain].setdefault(size, []).extend(max(c) for c in zip(*(r[size] for r in per_rank)))
        for size in sizes:
            plain_us, table_us = (statistics.median(pooled[p][size]) * 1e6 for p in (True, False))
            print(f"{ranks:>5} {fmt_size(size):>7} {plain_us:>14.1f} {table_us:>18.1f} {plain_us / table_us:>13.2f}x")
            rows.append({"ranks": ranks, "size": size, "plain_gloo_us": plain_us, "table_gloo_us": table_us})
    return rows


def overhead_timings(calls: int, rounds: int) -> dict:
    """On one rank of an arborcc job: CPU seconds per call of ``dist.all_reduce`` and of the
    raw runtime's call on a 4-byte tensor, alternating: {way: [per round]}."""
    import torch
    import torch.distributed as dist

    import arborcc.torch

    torch.set_num_threads(1)
    arborcc.torch.init(timeout=300)
    raw = dist.group.WORLD.transport.local
    t = torch.ones(1)
    ways = {"arborcc": lambda: dist.all_reduce(t), "raw": lambda: raw.allreduce(t)}
    out: dict = {way: [] for way in ways}
    for _ in range(rounds):
        for way, call in ways.items():
            out[way] += time_batches(call, raw.barrier, 20, 1, calls)[1]
    dist.destroy_process_group()
    return out


def overhead_table(ranks_list: list[int], calls: int, rounds: int) -> list[dict]:
    """What the backend adds to the raw runtime's call: CPU per call and rank, 4 bytes."""
    print(f"\n## the backend's own cost: CPU us per call and rank of dist.all_reduce of 4 bytes on arborcc and of the "
          f"raw runtime's call it ends in (medians of {rounds} rounds of {calls} calls, alternating; mean over ranks)")
    print(f"{'ranks':>5} {'arborcc cpu us':>15} {'raw cpu us':>11} {'added us':>9}")
    rows = []
    for ranks in ranks_list:
        per_rank = run_ranks(overhead_timings, ranks, (calls, rounds), timeout=600)
        cpu = {way: statistics.median(statistics.mean(rnd) for rnd in zip(*(r[way] for r in per_rank))) * 1e6
               for way in ("arborcc", "raw")}
        print(f"{ranks:>5} {cpu['arborcc']:>15.2f} {cpu['raw']:>11.2f} {cpu['arborcc'] - cpu['raw']:>9.2f}")
        rows.append({"ranks": ranks, "arborcc_cpu_us": cpu["arborcc"], "raw_cpu_us": cpu["raw"]})
    return rows


def gloo_mode_timings(size: int, rounds: int) -> dict:
    """On one rank of a job on the arborcc backend: gloo's all-reduce of ``size`` bytes on
    two gloo groups of every rank, one made the usual way after ``init`` (its threads
    pinned to the rank's CPU) and one with free threads (:func:`free_threads_group`),
    called from the pinned calling thread, and the free one called while the calling
    thread is :func:`unpinned` (as the one-host tables call it), alternating: {mode:
    {"single": [s per call, a barrier before each], "batch": [s per call of batches of 16]}}."""
    import torch
    import torch.distributed as dist

    import arborcc.torch

    torch.set_num_threads(1)
    arborcc.torch.init(timeout=300)
    free = free_threads_group()
    modes = {"pinned threads": (dist.new_group(backend="gloo"), contextlib.nullcontext),
             "free threads": (free, contextlib.nullcontext), "free, caller too": (free, unpinned)}
    t = torch.ones(size // 4)
    out: dict = {name: {"single": [], "batch": []} for name in modes}
    for _ in range(rounds):
        for name, (group, around) in modes.items():
            def call(group=group):
                dist.all_reduce(t, group=group)

            out[name]["single"] += time_batches(call, lambda: free.barrier().wait(), 5, 16, 1, around)[0]
            out[name]["batch"] += time_batches(call, lambda: free.barrier().wait(), 0, 4, 16, around)[0]
    dist.destroy_process_group()
    return out


def gloo_modes_table(ranks_list: list[int], size: int, rounds: int) -> list[dict]:
    """What decides whether gloo's 1 MB all-reduce takes 0.5 ms or several: its threads'
    CPU affinity (see :func:`gloo_mode_timings`). Calls of 3 ms or more are the ones
    that waited at least one scheduler tick."""
    print(f"\n## gloo's all-reduce at {fmt_size(size)}, float32 sum: its threads pinned to the rank's CPU or free, the "
          f"calling thread pinned or not "
          f"(a barrier then one call: median and share of calls >= 3 ms; batches of 16 calls: median per call)")
    print(f"{'ranks':>5} {'gloo threads':>16} {'one call us':>12} {'calls >= 3 ms':>14} {'batch us':>9}")
    rows = []
    for ranks in ranks_list:
        per_rank = run_ranks(gloo_mode_timings, ranks, (size, rounds), timeout=900)
        for name in per_rank[0]:
            single = [max(c) for c in zip(*(r[name]["single"] for r in per_rank))]
            batch = [max(c) for c in zip(*(r[name]["batch"] for r in per_rank))]
            slow = sum(x >= 3e-3 for x in single) / len(single)
            row = {"ranks": ranks, "threads": name, "single_us": statistics.median(single) * 1e6,
                   "slow_share": slow, "batch_us": statistics.median(batch) * 1e6}
            print(f"{ranks:>5} {name:>16} {row['single_us']:>12.1f} {100 * slow:>13.0f}% {row['batch_us']:>9.1f}")
            rows.append(row)
    return rows


#: thread names -> what they do, for the CPU split (Python threads by name, gloo's by their Linux name)
THREAD_KINDS = (("MainThread", "main"), ("arborcc-send", "posting"), ("arborcc-recv", "posting"),
                ("arborcc-wait", "waiting"), ("gloo_tcp_loop", "gloo I/O"), ("pt_gloo_runloop", "gloo worker"))


def thread_cpu() -> dict:
    """CPU seconds used so far by this process's threads, summed by kind (THREAD_KINDS;
    "other" for the rest), from /proc (clock ticks)."""
    import threading

    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out: dict = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = names.get(int(tid)) or f.read().strip()
        except OSError:  # the thread ended
            continue
        kind = next((k for prefix, k in THREAD_KINDS if name.startswith(prefix)), "other")
        out[kind] = out.get(kind, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def cpu_split_timings(size: int, rounds: int, calls: int) -> dict:
    """On one rank of a gloo job: gloo's all-reduce, :class:`PlainRing` and the executor
    (arborcc's default all-reduce over the job's gloo group; the same in 4 MB tiles, 2 in
    flight; a one-channel ring all-reduce), alternating; per round and
    way the seconds per call (wall), and CPU seconds per call: user, system and by thread
    kind (:func:`thread_cpu`)."""
    import torch
    import torch.distributed as dist

    from arborcc.library.ring import ring_allreduce
    from arborcc.torch.executor import GroupExecutor

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=__import__("datetime").timedelta(seconds=300))
    group = dist.group.WORLD
    executor = GroupExecutor(group, timeout=300)
    small_tiles = GroupExecutor(group, timeout=300, tile_bytes=4 * MB)
    ring = ring_allreduce(group.size(), channels=1, inplace=True).algorithm
    ways = {"gloo": lambda t: dist.all_reduce(t), "plain ring": PlainRing(group),
            "executor": lambda t: executor.allreduce(t, "sum"),
            "exec 4 MB": lambda t: small_tiles.allreduce(t, "sum"),
            "exec ring": lambda t: executor.run_algorithm(ring, t)}
    t = torch.ones(size // 4)
    out: dict = {way: [] for way in ways}
    for _ in range(rounds):
        for way, call in ways.items():
            call(t)
            dist.barrier()
            threads, times, start = thread_cpu(), os.times(), time.perf_counter()
            for _ in range(calls):
                call(t)
            wall = (time.perf_counter() - start) / calls
            after, times_after = thread_cpu(), os.times()
            cpu = {kind: (after[kind] - threads.get(kind, 0.0)) / calls for kind in after}
            cpu["user"] = (times_after.user - times.user) / calls
            cpu["system"] = (times_after.system - times.system) / calls
            out[way].append((wall, cpu))
    dist.destroy_process_group()
    return out


def cpu_split_table(size: int, rounds: int) -> list[dict]:
    """Where the CPU time of an all-reduce over gloo goes (4 ranks, one machine)."""
    per_rank = run_ranks(cpu_split_timings, 4, (size, rounds, 4), timeout=900)
    kinds = ["user", "system", "main", "posting", "waiting", "gloo I/O", "gloo worker"]
    print(f"\n## CPU per call of an all-reduce of {fmt_size(size)} over one gloo group of 4 ranks (ms, all 4 ranks "
          f"summed; medians of {rounds} rounds of 4 calls; threads: main = the calling thread (the executor's "
          f"reductions and bookkeeping), posting/waiting = the executor's helper threads, gloo I/O and worker = "
          f"gloo's; per-thread times in 10 ms clock ticks)")
    print(f"{'way':>11} {'wall ms':>8} {'cpu ms':>7} " + " ".join(f"{k:>11}" for k in kinds))
    rows = []
    for way in per_rank[0]:
        samples = list(zip(*(r[way] for r in per_rank)))  # per round: every rank's (wall, cpu)
        wall = statistics.median(max(w for w, _ in rnd) for rnd in samples)
        total = statistics.median(sum(c["user"] + c["system"] for _, c in rnd) for rnd in samples)
        split = {k: statistics.median(sum(c.get(k, 0.0) for _, c in rnd) for rnd in samples) for k in kinds}
        print(f"{way:>11} {wall * 1e3:>8.1f} {total * 1e3:>7.1f} "
              + " ".join(f"{split[k] * 1e3:>11.1f}" for k in kinds))
        rows.append({"way": way, "wall_ms": wall * 1e3, "cpu_ms": total * 1e3,
                     **{k: v * 1e3 for k, v in split.items()}})
    return rows


def medians(per_rank: list[dict]) -> dict:
    """{way: {size: median over calls of the slowest rank's time}}."""
    result: dict = {}
    for way in per_rank[0]:
        for size in per_rank[0][way]:
            calls = zip(*(r[way][size] for r in per_rank))
            result.setdefault(way, {})[size] = statistics.median(max(c) for c in calls)
    return result


def fmt_size(size: int) -> str:
    return f"{size // MB} MB" if size >= MB else f"{size // KB} KB"


def pooled_runs(ranks: int, sizes: list[int], quick: bool, hosts: int, runs: int) -> tuple[dict, list[dict]]:
    """``runs`` jobs of :func:`rank_timings`: medians over the samples of all of them, and
    each run's medians."""
    jobs = [run_ranks(rank_timings, ranks, (sizes, quick, hosts), timeout=1800) for _ in range(runs)]
    pooled = [{way: {size: [x for job in jobs for x in job[rank][way][size]] for size in samples}
               for way, samples in jobs[0][rank].items()} for rank in range(ranks)]
    return medians(pooled), [medians(job) for job in jobs]


def per_run(ratio, each: list[dict]) -> str:
    """Each run's value of ``ratio(medians)``, for the tables' last column."""
    return " ".join(f"{ratio(m):.2f}" for m in each) if len(each) > 1 else ""


def run_ratio(ratio, each: list[dict]) -> float:
    """The median over runs of ``ratio(a run's medians)``: each ratio compares ways
    measured side by side in one job (pooling the samples first would compare one way's
    fast runs with another's slow ones when the machine's load changes between jobs)."""
    return statistics.median(ratio(m) for m in each)


def single_host_table(ranks: int, sizes: list[int], quick: bool, runs: int = 1) -> list[dict]:
    med, each = pooled_runs(ranks, sizes, quick, 1, runs)
    factor = busbw_factor("allreduce", ranks)
    rows = []
    print(f"\n## dist.all_reduce, float32 sum, {ranks} ranks (median us per call; busbw GB/s"
          f"{f'; {runs} runs: times pooled, ratios the median of the runs' + chr(39) + ' ratios, last column each run' + chr(39) + 's / raw t' if runs > 1 else ''})")
    print(f"{'size':>7} {'arborcc us':>11} {'gloo us':>10} {'raw us':>10} {'arborcc bw':>10} {'gloo bw':>8} "
          f"{'raw bw':>8} {'x gloo bw':>9} {'/ raw t':>8} {'target':>14}")
    for size in sizes:
        a, g, r = (med[w][size] for w in ("arborcc", "gloo", "raw"))
        bw = {w: size / med[w][size] * factor / 1e9 for w in ("arborcc", "gloo", "raw")}
        vs_gloo = run_ratio(lambda m: m["gloo"][size] / m["arborcc"][size], each)
        vs_raw = run_ratio(lambda m: m["arborcc"][size] / m["raw"][size], each)
        need = 10.0 if 64 * KB <= size <= 1 * MB else (1.2 if size >= 16 * MB else None)
        ok = (need is None or vs_gloo >= need) and vs_raw <= 1.3
        target = (f">={need:g}x,<=1.3 " if need else "<=1.3 ") + ("met" if ok else "MISSED")
        runs_col = per_run(lambda m: m["arborcc"][size] / m["raw"][size], each)
        print(f"{fmt_size(size):>7} {a * 1e6:>11.1f} {g * 1e6:>10.1f} {r * 1e6:>10.1f} {bw['arborcc']:>10.3f} "
              f"{bw['gloo']:>8.3f} {bw['raw']:>8.3f} {vs_gloo:>8.1f}x {vs_raw:>8.2f} {target:>14}  {runs_col}".rstrip())
        rows.append({"ranks": ranks, "size": size, "arborcc_us": a * 1e6, "gloo_us": g * 1e6, "raw_us": r * 1e6,
                     "busbw_gbps": bw, "x_gloo_busbw": vs_gloo, "over_raw": vs_raw, "met": ok,
                     "over_raw_per_run": [m["arborcc"][size] / m["raw"][size] for m in each]})
    return rows


def two_host_table(sizes: list[int], quick: bool, runs: int = 1) -> list[dict]:
    med, each = pooled_runs(4, sizes, quick, 2, runs)
    print("\n## two hosts of 2 ranks on loopback, dist.all_reduce float32 sum (median ms per call; cpu: CPU ms "
          "per call of the busiest rank's process; plain ring: the same bytes as a ring of gloo sends and receives, "
          "plus the reductions" + (f"; {runs} runs: times pooled, ratios the median of the runs' ratios, last "
                                   f"column each run's gloo / executor"
                                   if runs > 1 else "") + ")")
    print(f"{'size':>7} {'arborcc ms':>11} {'executor ms':>12} {'gloo ms':>9} {'ring ms':>9} {'gloo / arborcc':>15} "
          f"{'gloo / executor':>16} {'executor cpu':>13} {'gloo cpu':>9} {'ring cpu':>10}")
    rows = []
    for size in sizes:
        a, e, g, f = (med[w][size] for w in ("arborcc", "executor", "gloo", "plain ring"))
        ec, gc, fc = (med[f"{w} cpu"][size] for w in ("executor", "gloo", "plain ring"))
        runs_col = per_run(lambda m: m["gloo"][size] / m["executor"][size], each)
        vs_arborcc = run_ratio(lambda m: m["gloo"][size] / m["arborcc"][size], each)
        vs_executor = run_ratio(lambda m: m["gloo"][size] / m["executor"][size], each)
        print(f"{fmt_size(size):>7} {a * 1e3:>11.1f} {e * 1e3:>12.1f} {g * 1e3:>9.1f} {f * 1e3:>9.1f} "
              f"{vs_arborcc:>14.2f}x {vs_executor:>15.2f}x {ec * 1e3:>13.1f} {gc * 1e3:>9.1f} {fc * 1e3:>10.1f}"
              f"  {runs_col}".rstrip())
        rows.append({"size": size, "arborcc_ms": a * 1e3, "executor_ms": e * 1e3, "gloo_ms": g * 1e3,
                     "plain_ring_ms": f * 1e3, "executor_cpu_ms": ec * 1e3, "gloo_cpu_ms": gc * 1e3,
                     "plain_ring_cpu_ms": fc * 1e3,
                     "gloo_over_executor_per_run": [m["gloo"][size] / m["executor"][size] for m in each]})
    return rows


def ddp_times(steps: int) -> dict:
    """examples/ddp_train.py on 4 ranks: ms per iteration of each run."""
    proc = subprocess.run([sys.executable, "-m", "arborcc.cli.main", "run", "-n", "4", "--timeout", "600",
                           "examples/ddp_train.py", "--steps", str(steps), "--hook"], capture_output=True, text=True,
                          cwd=ROOT, timeout=700)
    print("\n## DDP (examples/ddp_train.py --hook, 4 ranks)")
    print(proc.stdout.strip() or proc.stderr[-2000:])
    return {m.group(1).strip(): float(m.group(2))
            for m in re.finditer(r"^(arborcc|gloo \+ arborcc hook|gloo)\s+([\d.]+)", proc.stdout, re.M)}


def size_list(text: str) -> list[int]:
    """``"64K,4M"`` -> bytes."""
    units = {"K": KB, "M": MB}
    return [int(v[:-1]) * units[v[-1].upper()] if v[-1].upper() in units else int(v) for v in text.split(",")]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer sizes and calls")
    p.add_argument("--runs", type=int, default=1, help="jobs per table, samples pooled (default 1)")
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4], help="rank counts of the one-host tables")
    p.add_argument("--sizes", type=size_list, help="sizes of the one-host tables, e.g. 1M,4M (default: all)")
    p.add_argument("--parts", default="single,gloo-plain,overhead,gloo-modes,cpu-split,two-hosts,ddp",
                   help="which tables (default: all of single,gloo-plain,overhead,gloo-modes,cpu-split,two-hosts,ddp)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    parts = set(args.parts.split(","))
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    result = {"single_host": [], "gloo_plain": None, "overhead": None, "gloo_modes": None, "cpu_split": None, "two_hosts": None, "ddp_ms": None}
    if "single" in parts:
        for ranks in args.ranks:
            result["single_host"] += single_host_table(ranks, sizes, args.quick, args.runs)
    if "gloo-plain" in parts:
        result["gloo_plain"] = gloo_plain_table(args.ranks, [s for s in sizes if 64 * KB <= s <= MB] or sizes,
                                                args.quick, 2 if args.quick else 3)
    if "overhead" in parts:
        result["overhead"] = overhead_table(args.ranks, 200 if args.quick else 1000, 5 if args.quick else 9)
    if "gloo-modes" in parts:
        result["gloo_modes"] = gloo_modes_table(args.ranks, 1 * MB, 2 if args.quick else 5)
    if "cpu-split" in parts:
        result["cpu_split"] = cpu_split_table(64 * MB, 3 if args.quick else 6)
    if "two-hosts" in parts:
        result["two_hosts"] = two_host_table([16 * MB, 64 * MB], args.quick, args.runs)
    if "ddp" in parts:
        result["ddp_ms"] = ddp_times(10 if args.quick else 30)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
