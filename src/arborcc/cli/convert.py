"""``arborcc convert IN.xml [--dialect legacy|executor] [--format xml|json|mscclpp] [--inplace|--outofplace]
-o OUT``: rewrite an algorithm file for another MSCCL runtime, or as an MSCCL++ execution plan.

The output has every attribute the target runtime requires (the executors fail at
communicator start without ``outofplace``, ``minBytes`` and ``maxBytes``), the
target's name for the collective (``reduce_scatter`` / ``reducescatter``), and thread
blocks within its limits - too long ones are spread over more channels
(:func:`arborcc.ir.convert.convert_for_dialect`). ``--inplace`` / ``--outofplace`` say
which call the output is for (default: the calls the input claims); the algorithm must
be correct in it. The output is verified in the target dialect before it is written;
when there is no correct conversion the command says why, exits with status 2 and
writes nothing. ``--format mscclpp`` writes an MSCCL++ execution plan (``docs/mscclpp.md``)
for one call form, read back and verified in it before it is written.
"""

from __future__ import annotations

import argparse

from arborcc.ir.limits import DIALECTS

FORMATS = ("xml", "json", "mscclpp")


def register(p: argparse.ArgumentParser) -> None:
    p.description = __doc__.split("\n\n")[1]
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("algorithm", metavar="IN", help="algorithm file: .xml (MSCCL, either dialect) or .json")
    p.add_argument("-o", "--output", metavar="OUT", help="file to write (.xml, or .json for arborcc JSON; "
                                                          "default: standard output, XML)")
    p.add_argument("--dialect", choices=sorted(DIALECTS), default="executor",
                   help="runtime to write for (default executor: the MSCCL executor for NCCL and RCCL)")
    p.add_argument("--format", choices=FORMATS,
                   help="xml (MSCCL), json (arborcc) or mscclpp (an MSCCL++ execution plan, JSON; one call "
                        "form: in-place unless --outofplace or the input claims only that); default: from "
                        "the suffix of -o, else xml")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--inplace", dest="mode", action="store_const", const="inplace",
                      help="the output is for in-place calls (send and receive buffers are the same memory)")
    mode.add_argument("--outofplace", dest="mode", action="store_const", const="outofplace",
                      help="the output is for out-of-place calls")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import sys

    from arborcc.cli.output import check_outputs, print_json, render_algorithm, write_output
    from arborcc.files import is_stream
    from arborcc.ir.aliasing import Mode, declared_modes, with_modes
    from arborcc.ir.convert import ConversionError, convert_for_dialect
    from arborcc.ir.load import load_algorithm
    from arborcc.verify import verify_algorithm

    source = str(args.algorithm)
    if args.output == "-":
        args.output = None
    check_outputs(output=args.output)
    algo = load_algorithm(args.algorithm)
    modes = (Mode(args.mode),) if args.mode else declared_modes(algo)
    if not modes:
        raise ConversionError("claims neither in-place nor out-of-place calls; name one with --inplace or "
                              "--outofplace", source=source)
    before = verify_algorithm(algo, modes=modes)
    if not before.ok:
        raise ConversionError(f"cannot be converted: the algorithm is not correct {' and '.join(before.failed_modes)}"
                              f": {before.violations[0]}", source=source)
    fmt = args.format or ("json" if (args.output or "").lower().endswith(".json") else "xml")
    if fmt == "mscclpp":
        return _write_plan(args, algo, modes, source)
    out = with_modes(convert_for_dialect(algo, args.dialect, source), modes)
    after = verify_algorithm(out, args.dialect if fmt == "xml" else None)
    if not after.ok:
        raise ConversionError(f"cannot be converted: rewritten for the {args.dialect} runtimes it is not correct: "
                              f"{after.violations[0]}", source=source)
    text = render_algorithm(out, fmt, args.dialect)
    if args.output:
        write_output(args.output, text)
    else:
        sys.stdout.write(text)
    summary = {
        "input": source, "output": args.output, "format": fmt, "dialect": args.dialect if fmt == "xml" else None,
        "modes": after.modes, "collective": out.collective, "ranks": out.num_ranks,
        "thread_blocks": out.num_threadblocks, "thread_blocks_before": algo.num_threadblocks,
        "channels": out.num_channels, "channels_before": algo.num_channels, "steps": out.num_steps,
    }
    if args.json:
        print_json(summary)
        return 0
    grown = (f", {algo.num_threadblocks} -> {out.num_threadblocks} thread blocks over {out.num_channels} channels"
             if out.num_threadblocks != algo.num_threadblocks else "")
    print(f"{source} -> {args.output or 'stdout'}: {out.collective} on {out.num_ranks} ranks for the "
          f"{args.dialect} runtimes, {after.modes_text}{grown}; verified",
          file=sys.stderr if is_stream(args.output) else sys.stdout)
    return 0


def _write_plan(args: argparse.Namespace, algo, modes, source: str) -> int:
    """``convert --format mscclpp``: one plan, for the in-place call when it is among ``modes``."""
    import sys

    from arborcc.cli.output import print_json, write_output
    from arborcc.files import is_stream
    from arborcc.ir.aliasing import Mode

    from arborcc.verify.mscclpp_plan import mscclpp_plan_text

    mode = Mode.INPLACE if Mode.INPLACE in modes else Mode.OUTOFPLACE
    text = mscclpp_plan_text(algo, mode, source)
    if args.output:
        write_output(args.output, text)
    else:
        sys.stdout.write(text)
    summary = {"input": source, "output": args.output, "format": "mscclpp", "dialect": None,
               "modes": [mode.label], "collective": algo.collective, "ranks": algo.num_ranks,
               "thread_blocks_before": algo.num_threadblocks, "steps": algo.num_steps}
    if args.json:
        print_json(summary)
        return 0
    print(f"{source} -> {args.output or 'stdout'}: {algo.collective} on {algo.num_ranks} ranks as an MSCCL++ "
          f"execution plan for {mode.label} calls; read back and verified",
          file=sys.stderr if is_stream(args.output) else sys.stdout)
    return 0
