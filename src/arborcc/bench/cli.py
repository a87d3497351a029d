"""What ``arborcc bench`` does with its flags (the command module only parses them).

:func:`bench_request` checks every flag and what the back-ends can run, starting
nothing; :func:`run_bench` then runs the sweep and reports it. The command fails (exit
status 1, one line on stderr) when a row could not run or a back-end's check found
wrong values: a table of rows without numbers, or of numbers from a run that is not the
collective it names, is never the result.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from arborcc.bench.backends import check_backend, run_backend
from arborcc.bench.protocol import Row, Spec
from arborcc.bench.report import Machine, comparison, json_object, plot, table
from arborcc.errors import InputError, MissingDependencyError
from arborcc.ir.collectives import ROOTED
from arborcc.limits import limit
from arborcc.sizes import parse_factor, sweep

#: seconds an arborcc rank waits without progress (the runtime's ``timeout`` option): this,
#: or --timeout when shorter
RANK_TIMEOUT = 120.0
#: threads per rank ``--workers`` may ask for
MAX_WORKERS = 1024


@dataclass
class BenchRequest:
    """A checked ``arborcc bench`` command line: what to sweep, on which back-ends."""

    spec: Spec
    backends: list[str]


def _check_memory(ranks: int, maxbytes: int) -> None:
    """Refuse a sweep whose largest call cannot fit in this machine's memory: every rank
    holds at least a send and a receive buffer of the largest size (a lower bound)."""
    import os

    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return
    need = 2 * ranks * maxbytes
    if need > physical:
        raise InputError(f"the largest size needs at least {need / 2**30:.1f} GiB (2 buffers x {ranks} ranks x "
                         f"{maxbytes:,} bytes), more than this machine's {physical / 2**30:.1f} GiB", source="-e")


def _at_least(value: int, least: int, flag: str, what: str) -> None:
    if value < least:
        raise InputError(f"{what} must be at least {least}, got {value}", source=flag)


def _algorithm_shape(args) -> tuple[int | None, str, int | None]:
    """(ranks, collective, root) of ``--xml`` (its ranks checked against -n), else (-n,
    --collective, None)."""
    if not args.xml:
        return args.ranks, args.collective, None
    from arborcc.ir.load import load_algorithm
    from arborcc.runtime.plan import require_verified

    algo = require_verified(load_algorithm(args.xml), args.xml)
    if args.ranks is not None and args.ranks != algo.num_ranks:
        raise InputError(f"the algorithm has {algo.num_ranks} ranks, -n asks for {args.ranks}", source="-n")
    if algo.collective == "custom":
        raise InputError("custom collectives have no benchmark (no reference result)", source=args.xml)
    return algo.num_ranks, algo.collective, algo.effective_root


def bench_request(args) -> BenchRequest:
    """Every flag of ``arborcc bench`` checked (one-line InputError naming it), before any
    process starts."""
    from arborcc.runtime.arrays import FLOAT_DTYPES
    from arborcc.runtime.launch import check_timeout

    ranks, collective, file_root = _algorithm_shape(args)
    ranks = 2 if ranks is None else ranks
    _at_least(ranks, 1, "-n", "the rank count")
    limit("local-ranks").check(ranks, "-n", what="local ranks")
    root = args.root if args.root is not None else file_root or 0
    if not 0 <= root < ranks:
        raise InputError(f"root {root} is not a rank of {ranks} (0-{ranks - 1})", source="-r")
    if file_root is not None:  # an algorithm runs from its own root
        if collective in ROOTED and root != file_root:
            raise InputError(f"the algorithm's root is {file_root}, -r asks for {root}", source="-r")
        root = file_root
    if args.op == "avg" and args.datatype not in FLOAT_DTYPES:
        raise InputError(f"avg is defined for floating-point types only, not {args.datatype}",
                         source=f"-o avg -d {args.datatype}")
    _at_least(args.warmup_iters, 0, "-w", "the warm-up call count")
    _at_least(args.iters, 1, "--iters", "the timed call count")
    check_timeout(args.timeout)
    if args.workers is not None and not 0 <= args.workers <= MAX_WORKERS:
        raise InputError(f"threads per rank: 0 (one per thread block) to {MAX_WORKERS}, got {args.workers}",
                         source="--workers")
    sizes = sweep(args.minbytes, args.maxbytes, parse_factor(args.stepfactor, "-f"), "-b/-e/-f")
    _check_memory(ranks, sizes[-1])
    options = {k: v for k, v in (("slice_bytes", args.slice_bytes), ("workers", args.workers),
                                 ("tune", args.tune or None), ("timeout", min(args.timeout, RANK_TIMEOUT)))
               if v is not None}
    from arborcc.runtime.communicator import Options
    from arborcc.runtime.launch import ranks_environment

    Options.from_env(ranks_environment(ranks), **options)  # what every rank will read, checked once before
    spec = Spec(collective=collective, ranks=ranks, sizes=sizes, dtype=args.datatype, op=args.op, root=root,
                warmup=args.warmup_iters, iters=args.iters, check=bool(args.check), xml=args.xml, options=options,
                timeout=args.timeout, shared_buffers=args.shared_buffers)
    backends = list(dict.fromkeys(args.backend or ["arborcc"]))
    for backend in backends:
        check_backend(backend, spec)
    if args.plot:
        import importlib.util

        from arborcc.cli.output import check_image_outputs

        check_image_outputs(plot=args.plot)
        if importlib.util.find_spec("matplotlib") is None:
            raise MissingDependencyError("--plot", "matplotlib", "plot")
    return BenchRequest(spec, backends)


def measure_machine(ranks: int) -> Machine:
    """The copy bandwidth of ``ranks`` copies at once and the last-level cache."""
    from arborcc.bench.memory_bandwidth import copy_bandwidth, last_level_cache

    return Machine(copy_bandwidth(ranks), last_level_cache())


def failures(rows: list[Row], backends: list[str]) -> list[str]:
    """One line per back-end whose rows failed or whose check found wrong values."""
    lines = []
    for b in backends:
        failed = [r for r in rows if r.backend == b and r.failed]
        if failed:
            lines.append(f"--backend {b}: {len(failed)} of {sum(r.backend == b for r in rows)} rows did not run: "
                         f"{failed[0].note}")
        wrong = sum(r.wrong or 0 for r in rows if r.backend == b)
        if wrong:
            lines.append(f"--backend {b}: the check found {wrong:,} wrong values: its timings are not of a correct "
                         f"collective")
    return lines


def write_plot(path: str, spec: Spec, rows: list[Row], backends: list[str], machine: Machine) -> None:
    """The plot, written to ``path`` by the output rules in the format its suffix names (:mod:`arborcc.plotting`)."""
    plot(spec, rows, backends, path, machine)


def run_bench(args) -> int:
    from arborcc.cli.output import warn
    from arborcc.runtime.launch import oversubscription

    request = bench_request(args)
    spec, backends = request.spec, request.backends
    crowded = oversubscription(spec.ranks)
    if crowded:
        warn(crowded)
    machine = Machine() if args.no_membw else measure_machine(spec.ranks)
    rows = []
    for b in backends:
        if not args.json:
            print(f"# running {b} ...", flush=True)
        rows += run_backend(b, spec)
    if args.json:
        print(json.dumps(json_object(spec, rows, machine, backends), indent=1, allow_nan=False))
    else:
        for b in backends:
            print(table(spec, b, rows, machine))
            print()
        text = comparison(spec, rows, backends)
        if text:
            print(text)
    if args.plot:
        write_plot(args.plot, spec, rows, backends, machine)
        if not args.json:
            print(f"# plot: {args.plot}")
    problems = failures(rows, backends)
    if problems:
        print(f"arborcc: error: {'; '.join(problems)}", file=sys.stderr)
        return 1
    return 0
