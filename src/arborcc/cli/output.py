"""Output helpers shared by the subcommands: one JSON object for ``--json``, files
written atomically (nothing half-written on failure)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from arborcc.errors import InputError
from arborcc.files import write_text_atomically


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Write an output file named on the command line, creating its folder if needed;
    nothing is half-written, and a failure is an InputError naming the file."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot create the folder: {e.strerror or e}", source=str(path)) from None
    write_text_atomically(path, text)


def render_algorithm(algo, fmt: str, dialect: str = "executor") -> str:
    """An Algorithm as MSCCL XML of ``dialect`` (``fmt="xml"``) or as arborcc JSON."""
    if fmt == "json":
        from arborcc.ir.json_io import algorithm_to_json

        return algorithm_to_json(algo)
    from arborcc.ir.msccl_xml import write_msccl_xml

    return write_msccl_xml(algo, dialect)
