"""``arborcc compare``: every strategy that applies and the NCCL baselines, simulated
side by side over a range of sizes.

::

    arborcc compare --machine dgx1v --gpus 1,4,5,6 --collective allreduce --sizes 1K:1G --plot cmp.png
    arborcc compare --machine dgx-a100 --sizes 8:1G --strategies trees,nccl-ring --json

Prints busbw (GB/s) per size and algorithm, the fastest marked; each strategy's row is
its algorithm simulated as its written file runs (MSCCL XML names no route: each pair's
own route, the time ``arborcc simulate FILE`` and ``arborcc synth`` report); ``nccl`` is what NCCL
runs for allreduce, allgather, reducescatter, broadcast and reduce (its rings, its tree
for all-reduce across nodes, its protocol choice, NVLS all-reduce where the switch
reduces), ``nccl-model`` NCCL's own closed-form prediction. ``--json`` prints one object whose ``results`` are
rows with ``strategy``, ``size``, ``protocol``, ``time_us``, ``algbw_gbps``, ``busbw_gbps``.
``--plot`` draws busbw against size into a ``.png``, ``.svg`` or ``.pdf`` file.
Strategies whose synthesis or simulation explodes at the topology's rank count are left
out, each with a ``not compared`` line saying why (``--strategies`` runs them).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

COLLECTIVES = ("allreduce", "broadcast", "reduce", "allgather", "reducescatter", "gather", "scatter")


def register(p: argparse.ArgumentParser) -> None:
    from arborcc.cli.simulate import add_simulation_arguments
    from arborcc.cli.topology_args import add_topology_arguments

    p.description = __doc__
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    add_topology_arguments(p)
    p.add_argument("--collective", choices=COLLECTIVES, default="allreduce")
    p.add_argument("--root", type=int, default=0, help="root rank of rooted collectives (default 0)")
    p.add_argument("--strategies", metavar="LIST",
                   help="comma list of strategies (default: all that apply, less those too slow to synthesize or "
                        "simulate at the topology's rank count, each named in a 'not compared' line)")
    add_simulation_arguments(p, protocol_default="auto")
    p.add_argument("--plot", metavar="PNG", help="draw busbw against size to a .png, .svg or .pdf file")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_compare)


def strategies_from_args(text: str | None) -> list[str] | None:
    """``--strategies a,b`` (shared with tune): the names, each a known strategy; None
    when the flag is not given (every strategy that applies)."""
    from arborcc.errors import InputError
    from arborcc.synth.registry import strategy_names

    if text is None:
        return None
    names = list(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    known = strategy_names()
    if not names:
        raise InputError(f"no strategy named (known: {', '.join(known)})", source="--strategies")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InputError(f"unknown strateg{'ies' if len(unknown) > 1 else 'y'} {', '.join(map(repr, unknown))} "
                         f"(known: {', '.join(known)})", source="--strategies")
    return names


def check_root(root: int, topology) -> None:
    """``--root`` (compare, tune, synth) must be a rank of the topology."""
    from arborcc.errors import InputError

    if not 0 <= root < topology.num_ranks:
        raise InputError(f"root {root} is not a rank of {topology.name} (ranks 0-{topology.num_ranks - 1})",
                         source="--root")


def progress(message: str) -> None:
    if sys.stderr.isatty():
        print(f"arborcc: {message}", file=sys.stderr)


@contextlib.contextmanager
def chatter_to_stderr():
    """Send whatever native libraries print on stdout (the LP solver's banner) to stderr
    while the block runs, so that stdout holds only the command's own output (--json)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def cmd_compare(args: argparse.Namespace) -> int:
    from arborcc.cli.output import check_image_outputs, print_json
    from arborcc.cli.simulate import fidelity_from_args
    from arborcc.cli.topology_args import topology_from_args
    from arborcc.sizes import parse_sizes
    from arborcc.tune.compare import compare, comparison_png, comparison_table

    check_image_outputs(plot=args.plot)
    sizes = parse_sizes(args.sizes)
    strategies = strategies_from_args(args.strategies)
    topology = topology_from_args(args)
    check_root(args.root, topology)
    fidelity = fidelity_from_args(args, topology)
    with chatter_to_stderr():
        result = compare(topology, args.collective, sizes, args.protocol, args.root, strategies, fidelity,
                         progress=progress)
    if args.plot:
        comparison_png(result, args.plot)
    if args.json:
        print_json({"topology": result.topology, "ranks": result.ranks, "collective": result.collective,
                    "results": result.rows, "skipped": result.skipped,
                    "synth_seconds": round(result.synth_seconds, 3), "sim_seconds": round(result.sim_seconds, 3)})
        return 0
    print(comparison_table(result))
    for s in result.skipped:
        print(f"  not compared: {s}")
    print(f"  synthesis {result.synth_seconds:.2f} s, simulation {result.sim_seconds:.2f} s")
    if args.plot:
        print(f"  wrote {args.plot}")
    return 0
