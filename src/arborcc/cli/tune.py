"""``arborcc tune``: the fastest algorithm for every size bucket, by simulation, written
as MSCCL XML files with ``minBytes``/``maxBytes`` plus a ``plan.json`` index.

::

    arborcc tune --machine dgx1v --gpus 1,4,5,6 --collective allreduce --sizes 1K:1G -o plan/
    arborcc tune --machine dgx-a100 --sizes 8:1G --instances 1,2,4,8 --dialect legacy -o plan/ --json

Every strategy that builds the collective is tried with each instance count and each
protocol (``--protocol`` fixes one); the winners of consecutive sizes form buckets. Point
a runtime at the directory (``MSCCL_ALGO_DIR=plan/``) and it picks by size.
``--format mscclpp`` writes MSCCL++ execution plans instead, each with its bucket's
``min_message_size``/``max_message_size``. ``-o`` names a
new or empty folder (created when missing): an existing file there, ``/dev/null``, ``-``,
or a folder that already holds a plan or other ``.xml`` files (a runtime pointed at it
would load those with the new ones) is refused before anything is simulated.

``--nccl-tuner-config FILE`` tunes stock NCCL instead: it simulates NCCL's own algorithms,
protocols and channel counts per size and writes rules for NCCL's example tuner plugin
(``NCCL_TUNER_CONFIG_FILE``, NCCL >= 2.27.5), printing what each rule is predicted to gain
over NCCL's default choice::

    arborcc tune --machine dgx-h100 --collective allgather --sizes 1K:1G --nccl-tuner-config nccl_tuner.conf
"""

from __future__ import annotations

import argparse


def register(p: argparse.ArgumentParser) -> None:
    from arborcc.cli.compare import COLLECTIVES
    from arborcc.cli.simulate import add_simulation_arguments
    from arborcc.cli.topology_args import add_topology_arguments

    from arborcc.tune.plan_writer import FORMATS

    p.description = __doc__
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    add_topology_arguments(p)
    p.add_argument("--collective", choices=COLLECTIVES, default="allreduce")
    p.add_argument("--root", type=int, default=0, help="root rank of rooted collectives (default 0)")
    p.add_argument("--strategies", metavar="LIST", help="comma list of strategies (default: all that apply)")
    p.add_argument("--instances", metavar="LIST",
                   help="instance counts to try, each from 1 to MSCCL's 32 channels (default 1,2,4)")
    add_simulation_arguments(p, protocol_default="auto")
    p.add_argument("--format", choices=FORMATS,
                   help="algorithm files of the plan: xml (MSCCL, default) or mscclpp (MSCCL++ execution plans, "
                        "each with its bucket's message-size range)")
    p.add_argument("--dialect", choices=("executor", "legacy"),
                   help="MSCCL XML dialect whose runtime limits every file must meet (default executor)")
    p.add_argument("--nccl-tuner-config", metavar="FILE",
                   help="tune stock NCCL instead: write per-size rules for NCCL's example tuner plugin "
                        "(NCCL_TUNER_CONFIG_FILE) to FILE")
    p.add_argument("-o", "--output", metavar="DIR", help="write the plan (XML files and plan.json) into this new "
                                                          "or empty folder")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_tune)


def check_plan_folder(path: str) -> None:
    """``-o DIR``, before the work: a folder that can be written and holds no plan or
    algorithm file yet (MSCCL runtimes load every ``.xml`` file of ``MSCCL_ALGO_DIR``, so
    an earlier plan's files would be chosen among the new ones)."""
    import os

    from arborcc.errors import InputError
    from arborcc.files import check_output_folder
    from arborcc.ir.plan_index import INDEX

    check_output_folder(path, "-o")
    if not os.path.isdir(path):
        return
    held = sorted(name for name in os.listdir(path) if name == INDEX or name.lower().endswith(".xml"))
    if held:
        what = "an earlier plan" if INDEX in held else "algorithm files"
        raise InputError(f"already holds {what} ({', '.join(held[:3])}{', ...' if len(held) > 3 else ''}), which a "
                         f"runtime pointed at the folder would load with the new files; name a new or empty folder",
                         source=path)


def warn_narrowed_ranges(result, folder: str) -> None:
    """One warning per bucket whose file covers less than the bucket (an MSCCL++ plan's
    ``max_message_size`` is what fits MSCCL++'s scratch): larger calls have no plan."""
    from arborcc.cli.output import warn
    from arborcc.sizes import format_size
    from arborcc.ir.plan_index import read_plan_index

    for bucket, entry in zip(result.buckets, read_plan_index(folder).rules):
        if entry.max_bytes != bucket.max_bytes:
            warn(f"{entry.file} covers {format_size(entry.min_bytes)} to {format_size(entry.max_bytes)}, not all of "
                 f"its bucket (to {format_size(bucket.max_bytes) if bucket.max_bytes else 'no limit'}): MSCCL++'s "
                 f"64 MB scratch holds no larger call of it")


def cmd_tune(args: argparse.Namespace) -> int:
    if args.nccl_tuner_config is not None:
        return cmd_nccl_tuner_config(args)
    return cmd_msccl_plan(args)


def cmd_msccl_plan(args: argparse.Namespace) -> int:
    from arborcc.cli.compare import chatter_to_stderr, check_root, progress, strategies_from_args
    from arborcc.cli.output import print_json
    from arborcc.cli.simulate import fidelity_from_args
    from arborcc.cli.topology_args import topology_from_args
    from arborcc.errors import InputError
    from arborcc.ir.limits import MAX_CHANNELS
    from arborcc.sizes import format_size, parse_sizes
    from arborcc.tune.search import tune

    if args.output is not None:
        check_plan_folder(args.output)
    elif args.format is not None:
        raise InputError("names the format of the plan's files, and no -o DIR is given to write them into",
                         source="--format")
    protocols = None
    if args.format == "mscclpp":  # MSCCL++'s executor has two of NCCL's protocols
        protocols = ("Simple", "LL")
        if args.protocol not in (None, "auto") + protocols:
            raise InputError(f"{args.protocol} is no protocol of MSCCL++ plans (--format mscclpp): Simple or LL",
                             source="--protocol")
    sizes = parse_sizes(args.sizes)
    instances = "1,2,4" if args.instances is None else args.instances
    dialect = args.dialect or "executor"
    try:
        counts = sorted({int(x) for x in instances.split(",") if x.strip()})
    except ValueError:
        raise InputError(f"expected a comma list of integers, got {instances!r}", source="--instances") from None
    if not counts or counts[0] < 1 or counts[-1] > MAX_CHANNELS:
        raise InputError(f"instance counts are integers from 1 to {MAX_CHANNELS} (MSCCL's channels), "
                         f"got {instances!r}", source="--instances")
    strategies = strategies_from_args(args.strategies)
    topology = topology_from_args(args)
    check_root(args.root, topology)
    fidelity = fidelity_from_args(args, topology)
    with chatter_to_stderr():
        result = tune(topology, args.collective, sizes, strategies, counts, args.protocol, args.root, dialect,
                      fidelity, progress, protocols)
    written = []
    if args.output:
        from arborcc.tune.plan_writer import write_plan

        written = [str(p) for p in write_plan(result, args.output, args.format or "xml")]
        warn_narrowed_ranges(result, args.output)
    if args.json:
        print_json({"topology": result.topology, "ranks": result.ranks, "collective": result.collective,
                    "dialect": result.dialect, "fidelity": result.fidelity,
                    "buckets": [{"min_bytes": b.min_bytes, "max_bytes": b.max_bytes, "strategy": b.choice.strategy,
                                 "instances": b.choice.instances, "protocol": b.choice.protocol,
                                 "results": [{"size": s, "time_us": round(t * 1e6, 3),
                                              "algbw_gbps": round(s / t / 1e9, 4)} for s, t in sorted(b.times.items())]}
                                for b in result.buckets],
                    "skipped": result.skipped, "written": written, "seconds": round(result.seconds, 3)})
        return 0
    print(f"{result.collective} on {result.topology} ({result.ranks} GPUs), {result.dialect} dialect, "
          f"{result.fidelity} profile: {len(result.buckets)} buckets")
    print(f"  {'min bytes':>12} {'max bytes':>12}  {'strategy':<20} {'inst':>4} {'proto':>6}  busbw GB/s at the tuned sizes")
    from arborcc.sim.simulate import bus_factor

    factor = bus_factor(result.collective, result.ranks)
    for b in result.buckets:
        bws = ", ".join(f"{format_size(s)} {s / t * factor / 1e9:.2f}" for s, t in sorted(b.times.items()))
        top = "no limit" if b.max_bytes == 0 else str(b.max_bytes)
        print(f"  {b.min_bytes:>12} {top:>12}  {b.choice.strategy:<20} {b.choice.instances:>4} "
              f"{b.choice.protocol:>6}  {bws}")
    if result.skipped:
        print(f"  left out: {'; '.join(result.skipped[:6])}" + (" ..." if len(result.skipped) > 6 else ""))
    print(f"  {result.seconds:.1f} s")
    for w in written:
        print(f"  wrote {w}")
    return 0


def cmd_nccl_tuner_config(args: argparse.Namespace) -> int:
    """``--nccl-tuner-config FILE``: rules for NCCL's example tuner plugin
    (:mod:`arborcc.tune.nccl_tuner_config`); the file is checked before anything is
    simulated, the MSCCL plan's flags are refused."""
    import sys

    from arborcc.cli.compare import chatter_to_stderr, check_root, progress
    from arborcc.cli.output import check_outputs, print_json, write_output
    from arborcc.cli.simulate import fidelity_from_args
    from arborcc.cli.topology_args import topology_from_args
    from arborcc.errors import InputError
    from arborcc.files import STDOUT
    from arborcc.sizes import format_size, parse_sizes
    from arborcc.tune import nccl_tuner_config as ntc

    path = args.nccl_tuner_config
    check_outputs(nccl_tuner_config=path)
    for flag, value in (("-o", args.output), ("--strategies", args.strategies), ("--instances", args.instances),
                        ("--dialect", args.dialect), ("--format", args.format)):
        if value is not None:
            raise InputError("belongs to an MSCCL plan; --nccl-tuner-config tunes NCCL's own algorithms "
                             "(run tune twice for both)", source=flag)
    ntc.check_tuner_collective(args.collective)
    sizes = parse_sizes(args.sizes)
    topology = topology_from_args(args)
    check_root(args.root, topology)
    source = args.file or ("--gpus" if args.gpus is not None else "--detect" if args.detect else "--machine")
    nodes, ranks = ntc.job_shape(topology, source)
    fidelity = fidelity_from_args(args, topology)
    from arborcc.tune.nccl import NcclBaseline

    with chatter_to_stderr():
        baseline = NcclBaseline(topology, fidelity)
        protocols = None if args.protocol == "auto" else [args.protocol]
        choices = ntc.tuner_choices(baseline, args.collective, sizes, args.root, protocols, progress)
    rules = ntc.tuner_rules(choices, args.collective, nodes, ranks)
    write_output(path, ntc.tuner_config_text(rules, topology.name, fidelity.name))
    if args.json:
        print_json({"topology": topology.name, "nodes": nodes, "ranks": ranks, "collective": args.collective,
                    "fidelity": fidelity.name, "file": path,
                    "rules": [{"line": r.line(), "gains": r.gains,
                               "sizes": [{"size": c.size, "nccl_default": c.default.key(),
                                          "nccl_default_us": round(c.default.time * 1e6, 3),
                                          "rule_us": round(c.chosen.time * 1e6, 3),
                                          "gain": round(c.gain if c.gains else 0.0, 4)} for c in r.choices]}
                              for r in rules]})
        return 0
    out = sys.stderr if path == STDOUT else sys.stdout
    gaining = sum(r.gains for r in rules)
    print(f"{args.collective} on {topology.name} ({nodes} node(s), {ranks} GPUs), {fidelity.name} profile: "
          f"{len(rules)} rules, {gaining} gaining over NCCL's default choice", file=out)
    print(f"  {'min bytes':>12} {'max bytes':>20}  {'rule':<22} {'NCCL default':<22}  predicted gain over NCCL's "
          f"default at the tuned sizes",
          file=out)
    for r in rules:
        o = r.option
        d = r.choices[0].default
        rule = f"{o.algorithm}/{o.protocol}/{o.channels}ch"
        default = f"{d.algorithm}/{d.protocol}/{d.channels}ch"
        gain = r.gain_text(format_size) if r.gains else \
            "none: restates NCCL's choice (a size no rule matches would run on 1 channel)"
        print(f"  {r.min_bytes:>12} {r.max_bytes:>20}  {rule:<22} {default:<22}  {gain}", file=out)
    if path != STDOUT:
        print(f"  wrote {path} (NCCL_TUNER_CONFIG_FILE={path})", file=out)
    return 0
