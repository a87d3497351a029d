"""The ``arborcc`` command: one subcommand per pipeline stage, plus ``demo``.

Each subcommand lives in its own module of this package exposing
``register(subparsers)``; the module sets ``func`` on its parser. Command modules
import only argparse and plain data at their top - everything else where the command
runs - so building the parser (``arborcc --help``) loads no stage. Errors derived from
:class:`arborcc.errors.ArborccError` become one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from arborcc import __version__
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="arborcc",
        description="Synthesize, compile, verify and run collective algorithms for your topology.",
    )
    parser.add_argument("--version", action="version", version=f"arborcc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS:
        importlib.import_module(module).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # --help and --version end here, before logging is set up
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    import logging

    logging.basicConfig(
        level=logging.DEBUG if os.environ.get("ARBORCC_DEBUG") else logging.WARNING,
        format="arborcc: %(levelname)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
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
