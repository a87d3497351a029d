"""Where in the user's program an operation was written.

DSL errors must point at the user's line (``allreduce.py:14: ...``), not at arborcc's
internals. :func:`user_location` walks the Python stack to the first frame whose code
lives outside the arborcc package; :func:`program_error` builds a
:class:`~arborcc.errors.ProgramError` whose message starts with that place.
:func:`program_failure` does the same for any exception a user's program raised (a
syntax error, a failing import, a division by zero): one line at the program's own
file and line, ``prog.py:12: ZeroDivisionError: division by zero``, with no arborcc
frame in it.
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


def program_failure(exc: BaseException, program_file: str, programs: list = ()) -> ProgramError:
    """The one-line :class:`ProgramError` for ``exc``, raised while running the user's
    ``program_file``: placed at the innermost line of that file in the traceback (else
    at the innermost line outside arborcc and Python's import machinery). A method
    called on the None that ``chunk()`` returns for an empty slot is reported as the
    read of an uninitialized chunk (``programs``: the programs the file created)."""
    kind = type(exc).__name__
    text = str(exc).strip().splitlines()
    detail = f"{kind}: {text[0]}" if text else kind
    if isinstance(exc, SyntaxError) and exc.filename:
        where = (_shown_name(exc.filename, program_file), exc.lineno)
        return ProgramError(f"{where[0]}:{where[1]}: {kind}: {exc.msg}" if where[1] else f"{where[0]}: {kind}: {exc.msg}")
    place = _failure_place(exc, program_file)
    empty = [p.empty_chunk for p in programs if getattr(p, "empty_chunk", None)]
    if isinstance(exc, AttributeError) and getattr(exc, "obj", 0) is None and empty:
        detail = (f"chunk ({empty[-1]}) is uninitialized: nothing was copied there before it is read "
                  f"(chunk() returned None, which has no .{exc.name})")
    return ProgramError(f"{place}: {detail}" if place else detail)


def _failure_place(exc: BaseException, program_file: str) -> str | None:
    """``file:line`` of the innermost traceback frame in ``program_file``, else outside
    arborcc and Python's own machinery."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    target = os.path.abspath(program_file)
    for filename, line in reversed(frames):
        if os.path.abspath(filename) == target:
            return f"{program_file}:{line}"
    for filename, line in reversed(frames):
        if not _is_internal(filename) and not filename.startswith("<") and "runpy" not in filename:
            return f"{_shown_name(filename, program_file)}:{line}"
    return program_file


def _shown_name(filename: str, program_file: str) -> str:
    """The program's file as the user named it; another file by its path."""
    return program_file if os.path.abspath(filename) == os.path.abspath(program_file) else filename


def program_error(message: str, loc: tuple[str, int] | None = None) -> ProgramError:
    """A ProgramError ``file:line: message`` at ``loc`` (default: the caller's user line)."""
    if loc is None:
        loc = user_location(2)
    return ProgramError(f"{format_location(loc)}: {message}", problem=message)
