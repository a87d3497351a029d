"""Load an algorithm file, whatever its form: ``.xml`` (MSCCL, either dialect) or ``.json``.

Every failure - missing file, unknown extension, malformed content - is an
:class:`~arborcc.errors.IRFormatError` naming the file (the CLI turns it into one
line and exit status 2).
"""

from __future__ import annotations

import os
from pathlib import Path

from arborcc.errors import IRFormatError
from arborcc.ir.json_io import algorithm_from_json
from arborcc.ir.model import Algorithm
from arborcc.ir.msccl_xml import read_msccl_xml

READERS = {".xml": "MSCCL XML", ".json": "arborcc JSON"}


def load_algorithm(path: str | os.PathLike, dialect: str | None = None) -> Algorithm:
    """Read ``path``; ``dialect`` (XML only) enforces that dialect's required attributes."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in READERS:
        raise IRFormatError(f"unknown algorithm file type {p.suffix or '(no extension)'!r}; expected "
                            + " or ".join(f"{ext} ({what})" for ext, what in READERS.items()), source=str(p))
    if not p.is_file():
        raise IRFormatError("no such file" if not p.exists() else "not a regular file", source=str(p))
    if suffix == ".xml":
        return read_msccl_xml(p, source=str(p), dialect=dialect)
    return algorithm_from_json(p, source=str(p))
