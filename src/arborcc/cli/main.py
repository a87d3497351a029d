"""The ``arborcc`` command: one subcommand per pipeline stage, plus ``demo``.

Each subcommand lives in its own module of this package exposing
``register(subparsers)``; the module sets ``func`` on its parser. Command modules
import only argparse and plain data at their top - everything else where the command
runs - so building the parser (``arborcc --help``) loads no stage. Errors derived from
:class:`arborcc.errors.ArborccError` become one line on stderr and exit status 2.
"""

from __future__ import annotations

import importlib
import os
import sys

from arborcc import __version__
from arborcc.cli.parsing import ArgumentParser, UsageError, dash_value_hint
from arborcc.errors import ArborccError

#: subcommand modules, in the order data flows (each defines ``register(subparsers)``)
COMMANDS = (
    "arborcc.cli.topo",
    "arborcc.cli.synth",
    "arborcc.cli.compile",
    "arborcc.cli.verify",
    "arborcc.cli.convert",
    "arborcc.cli.show",
    "arborcc.cli.simulate",
    "arborcc.cli.compare",
    "arborcc.cli.tune",
    "arborcc.cli.run",
    "arborcc.cli.bench",
    "arborcc.cli.demo",
)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="arborcc",
        description="Synthesize, compile, verify and run collective algorithms for your topology.",
    )
    parser.add_argument("--version", action="version", version=f"arborcc {__version__}")
    parser.add_argument("--limit", action="append", default=[], metavar="NAME=N",
                        help="raise or lower a limit for this run, e.g. --limit ranks=65536 "
                             "(the limits: docs/limits.md; also ARBORCC_MAX_<NAME>)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS:
        importlib.import_module(module).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
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
