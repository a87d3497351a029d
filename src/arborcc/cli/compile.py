"""``arborcc compile``: a DSL program (or a library algorithm) -> a verified algorithm file.

::

    arborcc compile ring-allreduce --ranks 128 --channels 2 -o ring.xml
    arborcc compile my_allreduce.py 8 --protocol LL -o algo.xml
    arborcc compile my_allreduce.py -o algo.json            # JSON by extension

TARGET is a library name (``arborcc compile --list``) or a Python file. A program file
exposes its program in one of two ways:

1. it defines ``arborcc_program(*args)``, called with the program arguments (strings)
   and returning a :class:`~arborcc.lang.program.Program` (traced), an
   :class:`~arborcc.ir.model.Algorithm`, or a library ``Built`` pair;
2. otherwise it is run as ``__main__`` with ``sys.argv = [file, *args]`` and the last
   Program it creates is compiled. Programs written for the public GC3 tools
   (``from msccl.language import *``) run unchanged: ``msccl`` resolves to
   :mod:`arborcc.compat.msccl` when no real ``msccl`` is installed.

Options after TARGET that ``compile`` knows (``-o``, ``--dialect``, ``--format``,
``--json``, ``--inplace``, ``--outofplace``) are taken; everything else goes to the
program (or, for a library name, its parameters). Put arguments after ``--`` to pass
them to the program verbatim. What the program prints goes to stderr, so ``--json``
output stays one object.

The algorithm is verified (:func:`arborcc.verify.verify_algorithm`, with the dialect's
limits) before anything is written: a wrong algorithm is never written; exit status 1
says it was wrong, 2 that the input was. The file claims exactly the kinds of call in
which the algorithm is correct (``inplace``/``outofplace``): the program's own and the
other one too when the verifier proves it (:func:`arborcc.verify.claiming_supported_modes`).
``--inplace`` builds a library algorithm's in-place form and requires an in-place
claim (``--outofplace`` likewise); a program that has no such form is refused (exit 2,
naming what goes wrong in that mode).

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from arborcc.cli.parsing import ArgumentParser, UsageError
from arborcc.errors import ArborccError, InputError, ProgramError
from arborcc.ir.limits import DIALECTS
from arborcc.library.catalog import LIBRARY

FORMATS = ("xml", "json", "mscclpp")


def _epilog() -> str:
    lines = ["library algorithms (arborcc compile NAME --help for their parameters):"]
    for spec in LIBRARY.values():
        flags = " ".join("--inplace|--outofplace" if p.name == "inplace" else p.flag for p in spec.params)
        lines.append(f"  {spec.name:24s} {spec.summary}")
        lines.append(f"  {'':24s}   {flags}")
    return "\n".join(lines)


def _common_options(p: argparse.ArgumentParser, suppress: bool) -> None:
    default = argparse.SUPPRESS if suppress else None
    p.add_argument("-o", "--output", metavar="FILE", default=default,
                   help="write the algorithm here (default: stdout)")
    p.add_argument("--dialect", choices=sorted(DIALECTS), default=default,
                   help="MSCCL XML dialect and runtime limits to verify against (default: executor)")
    p.add_argument("--format", choices=FORMATS, default=default,
                   help="xml (MSCCL), json (arborcc) or mscclpp (an MSCCL++ execution plan); default: from the "
                        "output file's extension, else xml")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS if suppress else False,
                   help="print the summary as one JSON object")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--inplace", dest="mode", action="store_const", const="inplace", default=default,
                      help="the in-place form: send and receive buffers are the same memory (NCCL's in-place "
                           "call); refused if the program has none")
    mode.add_argument("--outofplace", dest="mode", action="store_const", const="outofplace", default=default,
                      help="the out-of-place form (separate send and receive buffers); refused if the program "
                           "has none")


def register(p: argparse.ArgumentParser) -> None:
    p.description = ("Compile a DSL program file or a library algorithm to the IR, verify it, and write it "
                     "as MSCCL XML (either dialect) or arborcc JSON. A program file either defines "
                     "arborcc_program(*args) returning a Program, or creates Programs when run; the last one "
                     "is compiled.")
    p.epilog = _epilog()
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("target", metavar="PROGRAM.py|NAME", nargs="?",
                   help="a Python file with a DSL program, or a library algorithm name")
    p.add_argument("rest", nargs=argparse.REMAINDER, metavar="ARGS",
                   help="program arguments, or the library algorithm's parameters")
    p.add_argument("--list", action="store_true", help="list the library algorithms and exit")
    _common_options(p, suppress=False)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.list:
        if args.json:
            from arborcc.cli.output import print_json

            print_json({"algorithms": [{"name": spec.name, "collective": spec.collective, "summary": spec.summary,
                                        "parameters": [p.flag for p in spec.params]} for spec in LIBRARY.values()]})
            return 0
        for spec in LIBRARY.values():
            print(f"{spec.name:24s} {spec.collective:14s} {spec.summary}")
        return 0
    if not args.target:
        raise InputError("name a program file or a library algorithm (arborcc compile --list)",
                         source="arborcc compile")
    rest = list(args.rest)
    verbatim: list[str] = []
    if "--" in rest:
        cut = rest.index("--")
        rest, verbatim = rest[:cut], rest[cut + 1:]
    if args.target in LIBRARY:
        opts, algo, name = _compile_library(LIBRARY[args.target], rest + verbatim, args)
    else:
        opts, algo, name = _compile_file(args.target, rest, verbatim, args)
    return _verify_and_write(algo, name, opts)


# --- targets ----------------------------------------------------------------------------
def _merge(args: argparse.Namespace, extra: argparse.Namespace) -> argparse.Namespace:
    merged = argparse.Namespace(**vars(args))
    for k, v in vars(extra).items():
        setattr(merged, k, v)
    return merged


def _compile_library(spec, argv: list[str], args):
    p = ArgumentParser(prog=f"arborcc compile {spec.name}", description=spec.summary)
    _common_options(p, suppress=True)
    for prm in spec.params:
        if prm.name == "inplace":
            continue  # --inplace / --outofplace (common options) choose it
        if prm.type is bool:
            p.add_argument(prm.flag, dest=prm.name, action=argparse.BooleanOptionalAction, default=prm.default,
                           help=prm.help)
        else:
            p.add_argument(prm.flag, dest=prm.name, type=prm.type, default=prm.default, choices=prm.choices,
                           help=f"{prm.help} (default {prm.default})")
    try:
        ns = p.parse_args(argv)
    except UsageError as e:
        raise UsageError(e.prog, f"{e.message} (see arborcc compile {spec.name} --help)") from None
    opts = _merge(args, argparse.Namespace(**{k: v for k, v in vars(ns).items()
                                              if k in ("output", "dialect", "format", "json", "mode")}))
    params = {prm.name: getattr(ns, prm.name, prm.default) for prm in spec.params}
    if "inplace" in params and opts.mode is not None:
        params["inplace"] = opts.mode == "inplace"
    _check_output_options(opts)
    from arborcc.lang.program import own_program_budget

    start = time.perf_counter()
    try:
        with own_program_budget():  # arborcc's own program: the budget its size needs (a user's file keeps the default)
            algo, _prog = spec.build(**params)
    except ProgramError as e:  # its place is arborcc's library code: name the command instead
        raise InputError(e.problem, source=f"arborcc compile {spec.name}") from None
    opts.compile_seconds = time.perf_counter() - start
    return opts, algo, spec.name


def _compile_file(target: str, argv: list[str], verbatim: list[str], args):
    path = Path(target)
    if not path.is_file():
        known = ", ".join(LIBRARY)
        raise InputError(f"no such program file, and not a library algorithm (known: {known})",
                         source=target)
    p = ArgumentParser(prog="arborcc compile", add_help=False)
    _common_options(p, suppress=True)
    ns, program_args = p.parse_known_args(argv)
    program_args += verbatim
    opts = _merge(args, ns)
    _check_output_options(opts)
    start = time.perf_counter()
    algo, name = _run_program_file(path, program_args)
    opts.compile_seconds = time.perf_counter() - start
    return opts, algo, name


def _run_program_file(path: Path, program_args: list[str]):
    """Run a program file; returns (Algorithm, name).

    What the program prints is held and then written to stderr (so ``--json`` output
    stays one object). As ``python prog.py`` would, the program's folder comes first on
    ``sys.path`` while it runs (its own modules import). Whatever the program raises becomes one line at its own file and
    line (:func:`arborcc.lang.where.program_failure`; ``ARBORCC_DEBUG=1`` shows the whole
    traceback instead); a program that exits with a non-zero status (argparse does on
    bad arguments) is reported with the last line it printed.
    """
    import contextlib
    import io
    import os
    import runpy

    from arborcc.compat import install_msccl_alias, remove_msccl_alias
    from arborcc.ir.model import Algorithm
    from arborcc.lang.program import Program, recording_programs
    from arborcc.lang.where import program_failure

    aliased = install_msccl_alias()
    old_argv = sys.argv
    sys.argv = [str(path), *program_args]
    folder = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, folder)
    result = None
    printed = io.StringIO()
    failure: BaseException | None = None
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed), \
                recording_programs() as created:
            try:
                namespace = runpy.run_path(str(path), run_name="__main__")
                entry = namespace.get("arborcc_program")
                if callable(entry):
                    result = entry(*program_args)
            except SystemExit as e:
                if e.code not in (None, 0):
                    said = [line for line in printed.getvalue().splitlines() if line.strip()]
                    failure = InputError(f"the program exited with status {e.code}"
                                         + (f": {said[-1].strip()}" if said else ""), source=str(path))
                    if not os.environ.get("ARBORCC_DEBUG"):
                        printed = io.StringIO()  # its last line is in the message (argparse: usage, error)
            except (ArborccError, KeyboardInterrupt):
                raise
            except Exception as e:  # noqa: BLE001 - anything the user's code raises is reported, one line
                if os.environ.get("ARBORCC_DEBUG"):
                    raise
                failure = program_failure(e, str(path), created)
    finally:
        sys.argv = old_argv
        if folder in sys.path:
            sys.path.remove(folder)
        if aliased:
            remove_msccl_alias()
        sys.stderr.write(printed.getvalue())
    if failure is not None:
        raise failure from None
    if result is None:
        if not created:
            raise InputError("the program created no Program and defines no arborcc_program()",
                             source=str(path))
        result = created[-1]
    if isinstance(result, tuple) and result and isinstance(result[0], Algorithm):
        result = result[0]
    if isinstance(result, Algorithm):
        return result, result.name
    if isinstance(result, Program):
        if not result.ops:
            raise ProgramError(f"{path.name}: program {result.name!r} performs no copy or reduce")
        return result.compile(), result.name
    raise InputError(f"arborcc_program() returned {type(result).__name__}, not a Program or an Algorithm",
                     source=str(path))


# --- verification and output ------------------------------------------------------------
def _output_format(opts) -> str:
    return opts.format or ("json" if opts.output and str(opts.output).lower().endswith(".json") else "xml")


def _check_output_options(opts) -> None:
    """Refuse what cannot be written before the program runs; ``-o -`` is standard output."""
    from arborcc.cli.output import ALGORITHM_SUFFIXES, check_outputs, warn_suffix

    if opts.output == "-":
        opts.output = None
    if opts.json and not opts.output:
        raise InputError("--json prints the summary on stdout: name the algorithm file with -o",
                         source="arborcc compile")
    check_outputs(output=opts.output)
    warn_suffix(opts.output, "json" if _output_format(opts) == "mscclpp" else _output_format(opts),
                ALGORITHM_SUFFIXES)


def _verify_and_write(algo, name: str, opts) -> int:
    from arborcc.cli.output import dialect_hint, print_json, render_algorithm, write_output
    from arborcc.files import is_stream
    from arborcc.ir.aliasing import Mode, declared_modes
    from arborcc.ir.limits import dialect_limits
    from arborcc.verify import claiming_supported_modes, verify_algorithm

    dialect = opts.dialect or "executor"
    fmt = _output_format(opts)
    if fmt == "xml":
        if algo.collective not in dialect_limits(dialect).collective_names:
            raise InputError(f"the {dialect} dialect of MSCCL XML cannot name the collective "
                             f"{algo.collective!r}; use --dialect legacy or --format json", source=name)
    start = time.perf_counter()
    report = verify_algorithm(algo, dialect if fmt == "xml" else None)
    verify_seconds = time.perf_counter() - start
    thread_blocks, steps = algo.num_threadblocks, algo.num_steps
    summary = {
        "name": name, "collective": algo.collective, "ranks": algo.num_ranks,
        "thread_blocks": thread_blocks, "steps": steps, "channels": algo.num_channels,
        "chunks_per_loop": algo.chunks_per_loop, "compile_seconds": round(opts.compile_seconds, 4),
        "verify_seconds": round(verify_seconds, 4), "format": fmt,
        "dialect": dialect if fmt == "xml" else None, "output": opts.output, "ok": report.ok,
    }
    if not report.ok:
        first = report.violations[0]
        if opts.json:
            print_json({**summary, "violations": [str(v) for v in report.violations]})
        else:
            more = len(report.violations) - 1
            if all(v.kind == "limit" for v in report.violations):
                what = f"exceeds the {dialect} runtime's limits"
                hint = dialect_hint(algo, dialect)
                if any("steps; at most" in str(v) for v in report.violations):
                    hint += "; or spread the steps over more thread blocks (e.g. more channels)"
            else:
                what, hint = "is wrong", ""
            print(f"arborcc: {name}: the compiled algorithm {what}, nothing written: {first}"
                  + (f" (and {more} more)" if more else "") + hint, file=sys.stderr)
        return 1
    start = time.perf_counter()
    algo = claiming_supported_modes(algo)
    modes = declared_modes(algo)
    verify_seconds += time.perf_counter() - start
    if opts.mode is not None and Mode(opts.mode) not in modes:
        wanted = Mode(opts.mode)
        why = verify_algorithm(algo, modes=(wanted,)).violations
        raise InputError(f"the program has no {wanted.label} form: it is correct "
                         f"{' and '.join(m.label for m in modes)} only"
                         + (f" ({why[0]})" if why else ""), source=name)
    summary.update(modes=[m.label for m in modes], verify_seconds=round(verify_seconds, 4))
    # may refuse (e.g. a custom collective in the executor dialect, a plan that does not verify)
    text = render_algorithm(algo, fmt, dialect, opts.mode)
    if opts.output:
        write_output(opts.output, text)
    else:
        sys.stdout.write(text)
    line = (f"{name}: {algo.collective} on {algo.num_ranks} ranks, {thread_blocks} thread blocks, {steps} steps, "
            f"{' and '.join(m.label for m in modes)}, compiled in {opts.compile_seconds:.2f} s, "
            f"verified in {verify_seconds:.2f} s"
            + (f" -> {opts.output}" if opts.output else ""))
    if opts.json:
        print_json(summary)
    else:
        print(line, file=sys.stderr if is_stream(opts.output) else sys.stdout)
    return 0
