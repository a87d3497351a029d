"""The command line's argument parser: argparse, with every usage error as one line.

argparse prints the usage and exits; arborcc's parsers raise :class:`UsageError`
instead, which ``main`` prints as one line, ``arborcc synth: --gpus: expected one
argument``, with exit status 2 like every other bad input. ``--help`` is unchanged.
"""

from __future__ import annotations

import argparse
import re

from arborcc.errors import ArborccError


class UsageError(ArborccError):
    """A command line argparse cannot read; ``str()`` is ``prog: what is wrong``."""

    def __init__(self, prog: str, message: str):
        self.prog = prog
        self.message = message
        super().__init__(f"{prog}: {message}")


class ArgumentParser(argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` whose errors are :class:`UsageError` (subparsers too)."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        raise UsageError(self.prog, tidy_message(message))


def tidy_message(message: str) -> str:
    """argparse's wording made to name the flag first: ``argument --gpus: x`` -> ``--gpus: x``;
    ``unrecognized arguments: --a --b`` -> ``--a --b: unrecognized argument(s)``."""
    m = re.fullmatch(r"argument ([^:]+): (.*)", message, re.S)
    if m:
        return f"{m.group(1)}: {m.group(2)}"
    m = re.fullmatch(r"unrecognized arguments: (.*)", message, re.S)
    if m:
        many = " " in m.group(1).strip()
        return f"{m.group(1).strip()}: unrecognized argument{'s' if many else ''}"
    return message


def dash_value_hint(message: str, argv: list[str]) -> str:
    """For ``--gpus -1,2`` (argparse reads ``-1,2`` as an option): how to pass such a value."""
    m = re.match(r"(-[\w/-]+): expected one argument", message)
    if not m:
        return ""
    names = m.group(1).split("/")
    for i, token in enumerate(argv[:-1]):
        if token in names and argv[i + 1].startswith("-"):
            return f" (a value starting with '-' is written {token}={argv[i + 1]})"
    return ""
