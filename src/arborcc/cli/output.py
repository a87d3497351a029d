"""Output helpers shared by the subcommands: one JSON object for ``--json``, files
written atomically (nothing half-written on failure)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same folder and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def render_algorithm(algo, fmt: str, dialect: str = "executor") -> str:
    """An Algorithm as MSCCL XML of ``dialect`` (``fmt="xml"``) or as arborcc JSON."""
    if fmt == "json":
        from arborcc.ir.json_io import algorithm_to_json

        return algorithm_to_json(algo)
    from arborcc.ir.msccl_xml import write_msccl_xml

    return write_msccl_xml(algo, dialect)
