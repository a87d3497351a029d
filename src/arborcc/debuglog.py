"""``ARBORCC_DEBUG``: arborcc's debug switch, as ``NCCL_DEBUG`` is NCCL's.

Unset or empty: arborcc logs warnings only. Set: the command line logs at DEBUG (any
value, as it always has), and a program that uses the runtime or the torch backend
logs what they decided through Python's :mod:`logging`, under the ``"arborcc"`` logger
hierarchy (``arborcc.runtime``, ``arborcc.torch``): ``ARBORCC_DEBUG=INFO`` logs at
INFO, any other value at DEBUG (which includes INFO).

:func:`configure_debug_logging` sets that up; the runtime calls it when a communicator
starts, and calling it again changes nothing. When the program has configured logging
itself (the root logger has a handler: ``logging.basicConfig``, the command line, a
framework), the records go to its handlers; otherwise one line per record to standard
error, ``arborcc.runtime INFO: rank 0/2: ...``.
"""

from __future__ import annotations

import logging
import os
import sys

#: the environment variable
VARIABLE = "ARBORCC_DEBUG"
#: the logger every arborcc module logs under
LOGGER = "arborcc"
#: how a record reads on standard error
FORMAT = "%(name)s %(levelname)s: %(message)s"


def debug_level(environ=None) -> int | None:
    """The logging level ``ARBORCC_DEBUG`` asks for: None when unset or empty,
    ``logging.INFO`` for ``INFO`` (any case), else ``logging.DEBUG``."""
    raw = (os.environ if environ is None else environ).get(VARIABLE, "")
    if not raw.strip():
        return None
    return logging.INFO if raw.strip().upper() == "INFO" else logging.DEBUG


class StderrHandler(logging.Handler):
    """Writes to the standard error of the moment (not the one at creation), and only
    while nobody configured the root logger: then the records reach its handlers."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not logging.getLogger().handlers and super().filter(record)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # logging must never break the program
            self.handleError(record)


def configure_debug_logging(environ=None) -> int | None:
    """Configure the ``"arborcc"`` loggers as ``ARBORCC_DEBUG`` asks (see the module doc);
    the level in force, or None when the variable is unset (then nothing changes)."""
    level = debug_level(environ)
    if level is None:
        return None
    logger = logging.getLogger(LOGGER)
    if logger.getEffectiveLevel() > level:
        logger.setLevel(level)
    if not any(isinstance(h, StderrHandler) for h in logger.handlers):
        handler = StderrHandler()
        handler.setFormatter(logging.Formatter(FORMAT))
        logger.addHandler(handler)
    return level
