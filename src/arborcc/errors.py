"""The one exception hierarchy of arborcc.

Every error meant for a user derives from :class:`ArborccError`; its ``str()`` is a
single line that names the input and what is wrong with it, e.g.
``topology.yaml:12: link gpu3->gpu9: gpu9 is not defined``. The CLI prints that line
and exits with status 2 (the verifier's "algorithm is wrong" answer is exit 1).
"""

from __future__ import annotations

import re

#: a run of non-blank characters this long in a problem is an echoed value: its middle is cut
_LONG_WORD = re.compile(r"\S{121,}")


class ArborccError(Exception):
    """Base class of all errors arborcc reports to users."""


class InputError(ArborccError):
    """Malformed or inconsistent input: a file, a dump, a flag value.

    ``source`` names the input (a path, ``<flag --gpus>``), ``place`` where in it
    (``12`` for a line, ``links[3]``, ``row GPU2 column GPU5``), ``problem`` what is wrong.
    A value the problem quotes from the input is cut in the middle when it is long, so
    the line stays readable whatever the input holds.
    """

    def __init__(self, problem: str, source: str | None = None, place: str | int | None = None):
        self.problem = _LONG_WORD.sub(lambda m: f"{m.group()[:60]}...{m.group()[-40:]}", problem)
        self.source = source
        self.place = place
        super().__init__(self._render())

    def _render(self) -> str:
        where = ":".join(str(p) for p in (self.source, self.place) if p not in (None, ""))
        line = f"{where}: {self.problem}" if where else self.problem
        return line.replace("\r", "\\r").replace("\n", "\\n")  # one line, whatever the input holds


class TopologyError(InputError):
    """A topology (file, dump, machine description, allocation) is malformed or inconsistent."""


class IRFormatError(InputError):
    """An algorithm file (MSCCL XML, JSON) cannot be read."""


class ProgramError(ArborccError):
    """A DSL program misuses the language; the message points at the user's line.

    ``problem`` is the message without that place (for a library algorithm run by the
    command line, where the place is arborcc's own)."""

    def __init__(self, message: str, problem: str | None = None):
        self.problem = message if problem is None else problem
        super().__init__(message)


class VerificationError(ArborccError):
    """An algorithm violates its postcondition or a structural rule (verifier exit 1)."""


class SynthesisError(ArborccError):
    """A strategy cannot produce an algorithm for this topology and collective."""


class SolverLimitError(SynthesisError):
    """A solver hit its time or iteration limit before reaching the requested quality."""


class MissingDependencyError(ArborccError):
    """An optional library (NVML, torch, MPI, matplotlib) is needed but not installed."""

    def __init__(self, what: str, package: str, extra: str | None = None):
        hint = f"pip install 'arborcc[{extra}]'" if extra else f"pip install {package}"
        super().__init__(f"{what} needs the optional package '{package}', which is not installed ({hint})")
