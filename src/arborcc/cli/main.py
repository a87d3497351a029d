"""The ``arborcc`` command: one subcommand per pipeline stage, plus ``demo``.

Each subcommand lives in its own module of this package exposing
``register(parser)``, which adds the command's arguments to its parser and sets
``func``. Only the invoked command's module is imported and registered; the others
appear in ``arborcc --help`` by the name and one-line help of :data:`COMMANDS`. So
``arborcc --help`` loads no stage and no command module, and ``arborcc synth`` loads
only ``synth``'s. Errors derived from :class:`arborcc.errors.ArborccError` become one
line on stderr and exit status 2.
"""

from __future__ import annotations

import importlib
import os
import sys

from arborcc import __version__
from arborcc.cli.parsing import ArgumentParser, UsageError, dash_value_hint
from arborcc.errors import ArborccError

#: the subcommands in the order data flows: name and one-line help; each is defined by
#: the module ``arborcc.cli.<name>``
COMMANDS = (
    ("topo", "show, classify and export topologies"),
    ("synth", "synthesize a collective algorithm for a topology"),
    ("compile", "compile a DSL program or a library algorithm to a verified MSCCL XML / JSON file"),
    ("verify", "prove an algorithm correct: postcondition, no deadlock, no race, runtime limits"),
    ("convert", "rewrite an algorithm file for another MSCCL runtime (dialect, in-place-ness, limits)"),
    ("show", "summarize an algorithm file (ranks, thread blocks, links, steps)"),
    ("simulate", "simulate an algorithm (MSCCL XML or JSON) on a topology over sizes"),
    ("compare", "simulate every strategy and the NCCL baselines side by side"),
    ("tune", "pick the fastest algorithm per size bucket and write an MSCCL plan"),
    ("run", "run a Python script on N local ranks (torchrun's environment)"),
    ("bench", "benchmark collectives on local ranks (nccl-tests flags), vs gloo and MPICH"),
    ("demo", "run the pipeline on an embedded default (DGX-1V)"),
)

#: top-level options that take a value (the next word is not the command)
_VALUED_OPTIONS = ("--limit",)


def invoked_command(argv: list[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is not a top-level option or
    an option's value; None where there is none (``arborcc --help``); ``"*"`` (every
    command) where that word names no command, so that argparse reads the line whole
    and says what is wrong."""
    words = iter(argv)
    for word in words:
        if word.startswith("-"):
            if "=" not in word and any(o.startswith(word) for o in _VALUED_OPTIONS if len(word) > 2):
                next(words, None)  # its value (argparse takes abbreviations: --lim)
            continue
        return word if word in dict(COMMANDS) else "*"
    return None


def build_parser(command: str | None = "*") -> ArgumentParser:
    """The command line's parser, with the arguments of ``command`` only (every
    command's for ``"*"``, none for None); the others are listed by name and help."""
    parser = ArgumentParser(
        prog="arborcc",
        description="Synthesize, compile, verify and run collective algorithms for your topology.",
    )
    parser.add_argument("--version", action="version", version=f"arborcc {__version__}")
    parser.add_argument("--limit", action="append", default=[], metavar="NAME=N",
                        help="raise or lower a limit for this run, e.g. --limit ranks=65536 "
                             "(the limits: docs/limits.md; also ARBORCC_MAX_<NAME>)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, summary in COMMANDS:
        p = sub.add_parser(name, help=summary)
        if command in ("*", name):
            importlib.import_module(f"arborcc.cli.{name}").register(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    from arborcc.collector import collect_less_often

    collect_less_often()
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(invoked_command(argv))
    try:  # --help and --version end here, before logging is set up
        args, extra = parser.parse_known_args(argv)
        if extra:  # name the subcommand that does not know them, not the top level
            prog = " ".join(["arborcc", *(getattr(args, k) for k in ("command", "topo_command")
                                          if getattr(args, k, None))])
            raise UsageError(prog, f"{' '.join(extra)}: unrecognized argument{'s' if len(extra) > 1 else ''}")
    except UsageError as e:
        print(f"{e}{dash_value_hint(e.message, argv)}", file=sys.stderr)
        return 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    import logging

    logging.basicConfig(
        level=logging.DEBUG if os.environ.get("ARBORCC_DEBUG") else logging.WARNING,
        format="arborcc: %(levelname)s: %(message)s",
    )
    try:
        from arborcc.limits import reset_limits, set_limit

        reset_limits()  # limits set by an earlier main() of this process (tests) do not carry over
        for assignment in args.limit:
            set_limit(assignment)
        return int(args.func(args) or 0)
    except UsageError as e:
        print(e, file=sys.stderr)
        return 2
    except ArborccError as e:
        print(f"arborcc: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("arborcc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
