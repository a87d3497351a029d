"""``arborcc simulate``: time an algorithm file on a topology over a range of sizes.

::

    arborcc simulate algo.xml --machine dgx1v --sizes 1K:1G
    arborcc simulate algo.xml --machine dgx-a100 --nodes 2 --sizes 64M --timeline t.png --critical-path
    arborcc simulate algo.xml --machine dgx1v --gpus 1,4,5,6 --sizes 8:8G:4 --protocol LL --json

Prints an nccl-tests-like table (size, count and type as float32 sum, time in us,
algbw and busbw in GB/s); ``--json`` prints one object whose ``results`` are rows with
``size``, ``time_us``, ``algbw_gbps``, ``busbw_gbps``. Sizes use nccl-tests' units
(K = 1024). ``--timeline`` draws link utilization over time for the largest size
(``.png``, ``.svg`` or ``.pdf``); ``--critical-path`` and ``--links`` describe that size too.
The timeline and the critical path come from a run that keeps every pipeline iteration:
one of more than :data:`MAX_RECORDED_PIECES` pieces (steps x iterations) is refused
before it starts, with the largest size that fits.

The algorithm is verified first (as ``arborcc verify`` does, without a dialect's
runtime limits): one the verifier rejects is refused with its first finding, exit
status 2 like every bad input, and nothing is simulated.
"""

from __future__ import annotations

import argparse


def register(p: argparse.ArgumentParser) -> None:
    from arborcc.cli.topology_args import add_topology_arguments

    p.description = __doc__
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("algorithm", metavar="ALGO", help="algorithm file (.xml MSCCL, .json arborcc)")
    add_topology_arguments(p)
    add_simulation_arguments(p)
    p.add_argument("--instances", type=instance_count, default=1, metavar="N",
                   help="run N copies side by side on 1/N of the data each (default 1; the copies' "
                        "channels together at most MSCCL's 32)")
    p.add_argument("--timeline", metavar="PNG", help="draw link utilization over time (largest size) "
                                                     "to a .png, .svg or .pdf file")
    p.add_argument("--critical-path", action="store_true", help="print the critical path (largest size)")
    p.add_argument("--links", action="store_true", help="print per-link utilization (largest size)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_simulate)


def instance_count(text: str) -> int:
    """``--instances N`` as an argparse ``type=``: an integer from 1 to MSCCL's channel count."""
    from arborcc.ir.limits import MAX_CHANNELS

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 1 <= value <= MAX_CHANNELS:
        raise argparse.ArgumentTypeError(f"an instance count is from 1 to {MAX_CHANNELS} (MSCCL's channels), "
                                         f"got {value}")
    return value


#: pipeline pieces (steps x iterations) a recorded run (``--timeline``, ``--critical-path``)
#: may hold: it keeps every one, with its flows; 500,000 took 5.7 s and 400 MB (a 2-rank
#: ring at 166G) and 7.9 s and 600 MB (a 64-rank ring at 3.9G, with the drawing) on 2 cores
MAX_RECORDED_PIECES = 500_000


def check_recording(algo, size: int, protocol: str | None, instances: int, flags: str) -> None:
    """Refuse (naming ``flags``) a recorded run of ``size`` bytes that would hold more than
    :data:`MAX_RECORDED_PIECES` pieces, before it starts: the plain run extrapolates the
    pipeline's steady period, a recorded one simulates and keeps every iteration."""
    from arborcc.errors import InputError
    from arborcc.sim.engine import pipelining
    from arborcc.sim.protocols import PROTOCOL_MODELS, protocol_name
    from arborcc.sim.simulate import chunk_bytes
    from arborcc.sizes import format_size

    slice_bytes = PROTOCOL_MODELS[protocol_name(protocol or algo.protocol)].slice_bytes
    iterations = pipelining(chunk_bytes(algo, size) / instances, slice_bytes)[0]
    steps = max(1, algo.num_steps)
    if iterations * steps <= MAX_RECORDED_PIECES:
        return
    most = MAX_RECORDED_PIECES // steps
    if most < 1:
        hint = "the algorithm's steps alone are more than that"
    else:
        largest = int(most * slice_bytes * instances * size / chunk_bytes(algo, size))
        hint = f"end --sizes at {format_size(1 << (largest.bit_length() - 1))} or below"
    raise InputError(f"records every pipeline iteration of the largest size ({format_size(size)}: {iterations:,} "
                     f"iteration{'s' if iterations > 1 else ''} of {algo.num_steps:,} steps), more than the "
                     f"{MAX_RECORDED_PIECES:,} pieces a recording holds within 30 s and 1 GB; {hint}", source=flags)


def require_correct(algo, source: str) -> None:
    """Refuse (:class:`~arborcc.errors.InputError` naming ``source``) an algorithm the
    verifier rejects, with its first finding: a wrong algorithm has no meaningful time."""
    from arborcc.errors import InputError
    from arborcc.verify import verify_algorithm

    report = verify_algorithm(algo)
    if report.ok:
        return
    first = report.violations[0] if report.violations else "not correct"
    kind = f" [{first.kind}]" if getattr(first, "kind", None) else ""
    wrong = f" {' and '.join(report.failed_modes)}" if report.failed_modes else ""
    raise InputError(f"not a correct algorithm{wrong}, nothing simulated: {first}{kind} "
                     f"(arborcc verify lists every finding)", source=source)


def add_simulation_arguments(p: argparse.ArgumentParser, protocol_default: str | None = None) -> None:
    """``--sizes``, ``--protocol`` and ``--fidelity``, shared by simulate, compare and tune."""
    p.add_argument("--sizes", default="1K:1G", metavar="RANGE",
                   help="MIN:MAX[:FACTOR] (factor 2 by default), a comma list or one size; K = 1024 "
                        "(default 1K:1G)")
    p.add_argument("--protocol", default=protocol_default, choices=("auto", "LL", "LL128", "Simple"),
                   help="NCCL protocol" + (" (default: the algorithm's own)" if protocol_default is None
                                           else f" (default {protocol_default}: the fastest per size)"))
    p.add_argument("--fidelity", metavar="PROFILE",
                   help="machine profile: ideal, v100, p100, a100, h100, generic (default: from --machine)")


def fidelity_from_args(args: argparse.Namespace, topology):
    """The fidelity profile the flags name, else the topology's."""
    from arborcc.errors import InputError
    from arborcc.sim.fidelity import fidelity_for, fidelity_named

    if not args.fidelity:
        return fidelity_for(topology)
    try:
        return fidelity_named(args.fidelity)
    except ValueError as e:
        raise InputError(str(e), source="--fidelity") from None


def cmd_simulate(args: argparse.Namespace) -> int:
    from arborcc.cli.output import check_image_outputs, print_json
    from arborcc.cli.topology_args import topology_from_args
    from arborcc.errors import InputError
    from arborcc.ir.limits import MAX_CHANNELS
    from arborcc.ir.load import load_algorithm
    from arborcc.sim.simulate import bus_factor, simulate
    from arborcc.sizes import parse_sizes

    check_image_outputs(timeline=args.timeline)
    sizes = parse_sizes(args.sizes)
    algo = load_algorithm(args.algorithm)
    topology = topology_from_args(args)
    if algo.num_ranks != topology.num_ranks:
        raise InputError(f"{algo.name} has {algo.num_ranks} ranks but {topology.name} has {topology.num_ranks} "
                         f"GPUs (pick {algo.num_ranks} with --gpus)", source=args.algorithm)
    if algo.num_channels * args.instances > MAX_CHANNELS:
        raise InputError(f"{args.instances} instances of {algo.num_channels} channels each need "
                         f"{algo.num_channels * args.instances}, more than MSCCL's {MAX_CHANNELS}",
                         source="--instances")
    fidelity = fidelity_from_args(args, topology)
    protocol = None if args.protocol in (None, "auto") else args.protocol
    if args.timeline or args.critical_path:
        check_recording(algo, sizes[-1], protocol, args.instances,
                        " and ".join(f for f, on in (("--timeline", args.timeline),
                                                     ("--critical-path", args.critical_path)) if on))
    require_correct(algo, args.algorithm)
    results = []
    for i, size in enumerate(sizes):
        detail = i == len(sizes) - 1 and bool(args.timeline or args.critical_path)
        results.append(simulate(algo, topology, size, protocol, fidelity, args.instances, record=detail))
    last = results[-1]
    if args.timeline:
        from arborcc.sim.timeline import timeline_png

        timeline_png(last, topology, args.timeline)
    if args.json:
        out = {"algorithm": algo.name, "collective": algo.collective, "topology": topology.name,
               "ranks": topology.num_ranks, "fidelity": fidelity.name, "results": [r.row() for r in results]}
        if args.critical_path:
            out["critical_path"] = {k: (v if k == "transfers" else round(v * 1e6, 3))
                                    for k, v in last.critical_path.summary().items()}
        if args.links:
            out["links"] = [{"link": f"{a}->{b}", "utilization": round(u, 4)}
                            for (a, b), u in sorted(last.link_utilization.items(), key=lambda kv: -kv[1])]
        print_json(out)
        return 0
    factor = bus_factor(algo.collective, algo.num_ranks)
    print(f"# {algo.name} ({algo.collective}, {algo.num_ranks} ranks, {algo.chunks_per_loop} chunks) on "
          f"{topology.name}, simulated with the {fidelity.name} profile; busbw = algbw x {factor:.3f}")
    print(f"# {'size':>12} {'count':>12} {'type':>6} {'redop':>6} {'root':>5} {'proto':>7} {'time':>10} "
          f"{'algbw':>8} {'busbw':>8}")
    print(f"# {'(B)':>12} {'(elements)':>12} {'':>6} {'':>6} {'':>5} {'':>7} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8}")
    for r in results:
        root = algo.root if algo.root is not None else -1
        print(f"  {r.size:>12} {r.size // 4:>12} {'float':>6} {'sum':>6} {root:>5} {r.protocol:>7} "
              f"{r.time_us:10.2f} {r.algbw / 1e9:8.2f} {r.busbw / 1e9:8.2f}")
    print(f"# Avg bus bandwidth    : {sum(r.busbw for r in results) / len(results) / 1e9:.4f}")
    for r in results:
        if r.unsettled:
            print(f"# {r.size} B: extrapolated from {r.simulated_iterations:,} of {r.iterations:,} pipeline "
                  f"iterations whose period did not settle, uncertain by {r.uncertainty:.1%} (the largest "
                  f"of the last period estimates)")
    if args.critical_path:
        s = last.critical_path.summary()
        print(f"\ncritical path at {last.size} bytes ({last.time_us:.2f} us): launch {s['launch'] * 1e6:.2f} us, "
              f"{s['transfers']} transfers {s['transfer'] * 1e6:.2f} us, latency {s['latency'] * 1e6:.2f} us, "
              f"compute {s['compute'] * 1e6:.2f} us, waiting {s['waiting'] * 1e6:.2f} us")
        runs = last.critical_path.runs()
        for seg, count in runs[:40]:
            where = "" if seg.rank < 0 else f" rank {seg.rank} tb {seg.tb} step {seg.step}"
            peer = f" -> rank {seg.peer}" if seg.kind == "transfer" else (
                f" from rank {seg.peer}" if seg.kind == "latency" else "")
            times = f" x{count}" if count > 1 else ""
            print(f"  {seg.start * 1e6:10.2f} - {seg.end * 1e6:10.2f} us  {seg.kind:<8}{where}{peer}{times}")
        if len(runs) > 40:
            print(f"  ... {len(runs) - 40} more")
    if args.links:
        print(f"\nlink utilization at {last.size} bytes:")
        for (a, b), u in sorted(last.link_utilization.items(), key=lambda kv: -kv[1]):
            print(f"  {a:>12} -> {b:<12} {100 * u:6.1f}%")
    if args.timeline:
        print(f"\nwrote {args.timeline}")
    return 0
