"""The ``arborcc`` command: one subcommand per pipeline stage, plus ``demo``.

Each subcommand lives in its own module of this package exposing
``register(subparsers)``; the module sets ``func`` on its parser. Errors derived from
:class:`arborcc.errors.ArborccError` become one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from arborcc import __version__
from arborcc.errors import ArborccError

#: subcommand modules, in the order data flows (each defines ``register``)
COMMAND_MODULES = ("topo", "synth", "compile", "verify", "show", "simulate", "compare", "tune", "demo")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="arborcc",
        description="Synthesize, compile, verify and run collective algorithms for your topology.",
    )
    parser.add_argument("--version", action="version", version=f"arborcc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"arborcc.cli.{name}")
        except ModuleNotFoundError as e:  # a stage not built yet is simply absent
            if e.name == f"arborcc.cli.{name}":
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.DEBUG if os.environ.get("ARBORCC_DEBUG") else logging.WARNING,
        format="arborcc: %(levelname)s: %(message)s",
    )
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
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
