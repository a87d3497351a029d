"""Where in the user's program an operation was written.

DSL errors must point at the user's line (``allreduce.py:14: ...``), not at arborcc's
internals. :func:`user_location` walks the Python stack to the first frame whose code
lives outside the arborcc package; :func:`program_error` builds a
:class:`~arborcc.errors.ProgramError` whose message starts with that place.
"""

from __future__ import annotations

import os
import sys

from arborcc.errors import ProgramError

#: directory of the arborcc package; frames below it are arborcc's own
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _is_internal(filename: str) -> bool:
    return filename.startswith(PACKAGE_DIR)


def user_location(skip: int = 1) -> tuple[str, int]:
    """(file, line) of the innermost stack frame outside arborcc (skipping ``skip`` frames).

    Library algorithms live inside arborcc; for them the walk ends at whoever called the
    library, which is the line a user can act on.
    """
    f = sys._getframe(skip)
    while f is not None and _is_internal(f.f_code.co_filename):
        f = f.f_back
    if f is None:  # everything is internal (e.g. called from arborcc's CLI)
        f = sys._getframe(skip)
    return (f.f_code.co_filename, f.f_lineno)


def format_location(loc: tuple[str, int] | None) -> str:
    if not loc:
        return "<program>"
    return f"{os.path.basename(loc[0])}:{loc[1]}"


def program_error(message: str, loc: tuple[str, int] | None = None) -> ProgramError:
    """A ProgramError ``file:line: message`` at ``loc`` (default: the caller's user line)."""
    if loc is None:
        loc = user_location(2)
    return ProgramError(f"{format_location(loc)}: {message}")
