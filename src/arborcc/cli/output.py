"""Output helpers shared by the subcommands: one JSON object for ``--json``, output
files by the rules of :mod:`arborcc.files` (``-`` and ``/dev/stdout`` print, symbolic
links are written through, regular files replaced atomically with the umask's mode,
missing folders created), checked before the work starts, and a warning when an
output's suffix names another format than the one written. Image outputs (``--plot``,
``--timeline``, ``--trees-png``) follow :mod:`arborcc.plotting`: their suffix picks the
format, and one it cannot write is refused before the work too."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from arborcc.files import check_output_path, suffix_mismatch, write_output

__all__ = ["ALGORITHM_SUFFIXES", "check_image_outputs", "check_outputs", "print_json", "render_algorithm", "warn", "warn_suffix",
           "write_output"]

#: algorithm file suffixes -> the format they name
ALGORITHM_SUFFIXES = {".xml": "xml", ".json": "json"}


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def warn(message: str) -> None:
    """One warning line on stderr."""
    print(f"arborcc: warning: {message}", file=sys.stderr)


def check_outputs(**paths: str | os.PathLike | None) -> None:
    """Refuse, before any work, output paths that cannot be written: ``flag=path`` pairs
    (``output=args.output, trees_png=args.trees_png``); None means not asked for."""
    for flag, path in paths.items():
        if path is not None:
            check_output_path(path, "--" + flag.replace("_", "-"))


def check_image_outputs(**paths: str | os.PathLike | None) -> None:
    """:func:`check_outputs` for images (``plot=args.plot``): also refuses, before any
    work, a suffix no image format has, and ``-``."""
    from arborcc.plotting import check_image_output

    for flag, path in paths.items():
        if path is not None:
            check_image_output(path, "--" + flag.replace("_", "-"))


def warn_suffix(path: str | os.PathLike | None, fmt: str, suffixes: dict[str, str]) -> None:
    """Warn when ``path``'s suffix names another format than ``fmt``."""
    if path is not None:
        message = suffix_mismatch(path, fmt, suffixes)
        if message:
            warn(message)


def render_algorithm(algo, fmt: str, dialect: str = "executor", mode=None) -> str:
    """An Algorithm as MSCCL XML of ``dialect`` (``fmt="xml"``), as arborcc JSON, or as an
    MSCCL++ execution plan for calls in ``mode`` (``fmt="mscclpp"``, checked as it reads back)."""
    if fmt == "mscclpp":
        from arborcc.verify.mscclpp_plan import mscclpp_plan_text

        return mscclpp_plan_text(algo, mode)
    if fmt == "json":
        from arborcc.ir.json_io import algorithm_to_json

        return algorithm_to_json(algo)
    from arborcc.ir.msccl_xml import write_msccl_xml

    return write_msccl_xml(algo, dialect)


def dialect_hint(algo, dialect: str) -> str:
    """What to try when ``algo`` exceeds ``dialect``'s runtime limits: another dialect
    only when that one accepts the algorithm (checked), else arborcc's JSON form."""
    from arborcc.ir.limits import DIALECTS, check_dialect_limits

    for other in DIALECTS:
        if other != dialect and not check_dialect_limits(algo, other, max_per_rule=1):
            return f"; the {other} dialect accepts it: --dialect {other}"
    return "; no MSCCL dialect accepts it (--format json writes arborcc's own form)"
