"""``arborcc synth``: synthesize a collective for a topology, verify it, write it.

::

    arborcc synth --machine dgx1v --gpus 1,4,5,6 --collective allreduce -o algo.xml
    arborcc synth --machine dgx-a100 --nodes 2 --strategy trees --json -o a.xml

Prints the bound the links allow, the algbw the emitted algorithm reaches in the
steady-state bandwidth model (a property of the schedule, not its speed), the simulated
time of a call of ``--size`` bytes (without it, 64 MiB: the size ``auto`` ranks at) of
the file as written - the number ``arborcc simulate FILE`` gives - against NCCL's
(saying so when NCCL is faster), the number of trees and the strategy. The algorithm is
verified (and, for XML, checked against the dialect's runtime limits) before anything
is written: exit 1 when it fails that check, 2 for bad input. The file claims exactly
the calls (in-place, out-of-place) in which the verifier proves it correct;
``--inplace``/``--outofplace`` require one (exit 2 when it is not proven):
``--outofplace`` has the lowerings emit an out-of-place program (the input read, the
result left in the output), and ``auto`` keeps only candidates proven in it. The strategies
are those of the registry (``arborcc.synth.registry``).
"""

from __future__ import annotations

import argparse
import sys

from arborcc.cli.output import (ALGORITHM_SUFFIXES, check_image_outputs, check_outputs, print_json, render_algorithm,
                                warn_suffix, write_output)
from arborcc.cli.topology_args import add_topology_arguments, topology_from_args
from arborcc.synth.registry import strategy_names, synthesizable_collectives
from arborcc.sizes import size_argument


def register(p: argparse.ArgumentParser) -> None:
    p.description = __doc__
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    add_topology_arguments(p)
    p.add_argument("--collective", choices=synthesizable_collectives(), default="allreduce")
    p.add_argument("--strategy", choices=("auto", *strategy_names()), default="auto",
                   help="auto tries every strategy that can do the collective and keeps the fastest")
    p.add_argument("--root", type=int, default=0, help="root rank of broadcast/reduce (default 0)")
    p.add_argument("--size", type=size_argument, metavar="BYTES",
                   help="buffer size the algorithm is for (e.g. 4MB, 1GiB): auto picks the fastest simulated "
                        "call of this size, binary-trees uses one tree below MXNet's threshold (40 MB); default: "
                        "large buffers, ranked and reported at 64MiB")
    p.add_argument("--links", choices=("all", "nvlink"), default="all",
                   help="links the trees may use (nvlink: Blink's NVLink-only trees)")
    p.add_argument("-o", "--output", metavar="PATH", help="algorithm file (.xml MSCCL, .json arborcc or MSCCL++)")
    p.add_argument("--format", choices=("xml", "json", "mscclpp"),
                   help="xml (MSCCL), json (arborcc) or mscclpp (an MSCCL++ execution plan); default: from the "
                        "suffix of -o, else xml")
    p.add_argument("--dialect", choices=("executor", "legacy"), default="executor",
                   help="MSCCL XML dialect whose runtime limits the algorithm must meet")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--inplace", dest="mode", action="store_const", const="in-place",
                      help="require an algorithm correct when the output buffer is the input "
                           "(refused, exit 2, when the verifier cannot prove it)")
    mode.add_argument("--outofplace", dest="mode", action="store_const", const="out-of-place",
                      help="require an algorithm correct with separate input and output buffers")
    p.add_argument("--show-trees", action="store_true", help="draw the trees as text")
    p.add_argument("--trees-png", metavar="PATH", help="draw the trees to a PNG file (or .svg, .pdf)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_synth)


#: the largest synthesis docs/synthesis.md measures (128 nodes x 8 GPUs, its slowest
#: collective and its peak memory): what a larger request is estimated against
MEASURED_RANKS, MEASURED_SECONDS, MEASURED_GB = 1024, 14.0, 1.5


def _progress(message: str) -> None:
    if sys.stderr.isatty():
        print(f"arborcc: {message}", file=sys.stderr)


def cmd_synth(args: argparse.Namespace) -> int:
    from arborcc.ir.mscclpp.writer import PROTOCOLS as MSCCLPP_PROTOCOLS
    from arborcc.synth import synthesize

    from arborcc.cli.compare import check_root

    check_outputs(output=args.output)
    check_image_outputs(trees_png=args.trees_png)
    fmt = args.format or ("json" if (args.output or "").lower().endswith(".json") else "xml")
    warn_suffix(args.output, "json" if fmt == "mscclpp" else fmt, ALGORITHM_SUFFIXES)
    topology = topology_from_args(args)
    check_root(args.root, topology)
    if topology.num_ranks > MEASURED_RANKS:
        from arborcc.cli.output import warn

        warn(f"{topology.num_ranks} ranks is beyond the {MEASURED_RANKS} that benchmarks/synthesis/cluster_scale.py "
             f"measures (up to {MEASURED_SECONDS:g} s and {MEASURED_GB:g} GB per collective there on 2 cores); "
             f"bounds and verification grow faster than the rank count: expect minutes")
    # verified once, inside synthesize, with the dialect's runtime limits; they matter
    # only for XML (a JSON file is arborcc's own, run by no MSCCL runtime)
    # written with the protocol fastest at the size among those the format can name
    result = synthesize(topology, args.collective, args.strategy, args.root, args.links, progress=_progress,
                        size=args.size, dialect=args.dialect,
                        protocols=MSCCLPP_PROTOCOLS if fmt == "mscclpp" else None, form=args.mode)
    algo = result.algorithm
    if args.mode is not None and args.mode not in result.report.modes:
        from arborcc.errors import InputError

        strategy = result.strategy.split(":")[-1]
        why = ("its steps race or read the wrong chunk once input and output alias" if args.mode == "in-place"
               else f"its program works in one buffer that input and output share, and {strategy} has no "
                    f"out-of-place lowering of {result.collective}")
        raise InputError(f"{result.strategy} {result.collective} has no {args.mode} form here: it is verified "
                         f"{result.report.modes_text} only ({why}); nothing written",
                         source=f"<flag --{args.mode.replace('-', '')}>")
    violations = result.report.violations if fmt == "xml" else []
    nccl = None
    if result.time is not None:
        from arborcc.tune.compare import nccl_time

        nccl = nccl_time(topology, result.collective, result.size, args.root)
    summary = {
        "topology": topology.name, "ranks": topology.num_ranks, "collective": result.collective,
        "strategy": result.strategy, "bound_gbps": round(result.bound / 1e9, 4),
        "bound_exact": result.bound_exact, "bound_basis": result.bound_basis,
        "modes": list(result.report.modes),
        "algbw_gbps": round(result.algbw / 1e9, 4), "ratio": round(result.ratio, 4),
        "trees": len(result.trees), "chunks": result.chunks, "synth_seconds": round(result.synth_time, 4),
        "thread_blocks": sum(len(r.threadblocks) for r in algo.ranks),
        "steps": sum(len(tb.steps) for r in algo.ranks for tb in r.threadblocks),
        "size": result.size, "size_is_default": result.size_is_default,
        "time_us": None if result.time is None else round(result.time * 1e6, 3),
        "planned_time_us": None if result.planned_time is None else round(result.planned_time * 1e6, 3),
        "nccl_time_us": None if nccl is None else round(nccl * 1e6, 3),
        "output": args.output, "format": fmt, "dialect": args.dialect if fmt == "xml" else None,
        "ok": not violations, "notes": result.notes,
    }
    if violations:
        if args.json:
            print_json({**summary, "violations": [str(v) for v in violations]})
        else:
            from arborcc.cli.output import dialect_hint

            hint = dialect_hint(algo, args.dialect) if all(v.kind == "limit" for v in violations) else ""
            print(f"arborcc: synthesized algorithm fails the {args.dialect} checks, nothing written: "
                  f"{violations[0]}{hint}", file=sys.stderr)
        return 1
    if args.output:
        write_output(args.output, render_algorithm(algo, fmt, args.dialect, args.mode))
    if (args.trees_png or args.show_trees) and not result.trees:
        print(f"arborcc: {result.strategy} built no trees to draw for {result.collective}", file=sys.stderr)
    if args.trees_png and result.trees:
        from arborcc.synth.render import trees_png

        trees_png(result.trees, topology, args.trees_png)
    if args.json:
        print_json(summary)
        return 0
    print(f"{result.collective} on {topology.name} ({topology.num_ranks} GPUs), strategy {result.strategy}")
    print(f"  bound      {result.bound / 1e9:10.2f} GB/s algbw ({'the optimum' if result.bound_exact else 'an upper bound'}:"
          f" {result.bound_basis})")
    print(f"  steady     {result.algbw / 1e9:10.2f} GB/s algbw ({100 * result.ratio:.1f}% of the bound in the "
          f"steady-state bandwidth model: a property of the schedule, not its speed)")
    if result.time is not None:
        from arborcc.sizes import format_size
        from arborcc.tune.compare import against_nccl

        default = (f"; no --size given: {format_size(result.size)}, the size auto ranks at by default"
                   if result.size_is_default else "")
        print(f"  simulated  {result.time * 1e6:10.1f} us  a call of {result.size} bytes as written "
              f"(what arborcc simulate FILE gives{default})")
        print(f"  vs NCCL    {against_nccl(result.time, nccl, result.size)}")
    print(f"  trees      {len(result.trees):10d}    chunks {result.chunks}, {summary['thread_blocks']} thread blocks, "
          f"{summary['steps']} steps")
    print(f"  time       {result.synth_time:10.2f} s; verified for {' and '.join(result.report.modes)} calls")
    for note in result.notes:
        print(f"  note: {note}")
    if args.output:
        print(f"  wrote {args.output} ({fmt}{', ' + args.dialect + ' dialect' if fmt == 'xml' else ''}, verified)")
    if args.show_trees and result.trees:
        from arborcc.synth.render import trees_text

        print()
        print(trees_text(result, topology))
    return 0
