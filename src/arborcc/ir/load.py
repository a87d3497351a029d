"""Load an algorithm file, whatever its form: ``.xml`` (MSCCL, either dialect) or ``.json``
(arborcc's own JSON, or an MSCCL++ execution plan: a JSON document with ``gpus`` is a
plan, read by :mod:`arborcc.ir.mscclpp.plan` and translated to the IR by
:mod:`arborcc.ir.mscclpp.translate`).

Every failure - missing file, unknown extension, malformed content, a plan whose
operations have no IR form - is an :class:`~arborcc.errors.IRFormatError` naming the
file (the CLI turns it into one line and exit status 2).
"""

from __future__ import annotations

import gc
import os
from contextlib import contextmanager
from pathlib import Path

from arborcc.errors import IRFormatError
from arborcc.ir.model import Algorithm

READERS = {".xml": "MSCCL XML", ".json": "arborcc JSON or an MSCCL++ execution plan"}


def load_algorithm(path: str | os.PathLike, dialect: str | None = None) -> Algorithm:
    """Read ``path``; ``dialect`` (XML only) enforces that dialect's required attributes."""
    return load_algorithm_file(path, dialect)[0]


def load_algorithm_file(path: str | os.PathLike, dialect: str | None = None) -> tuple[Algorithm, str]:
    """The algorithm of ``path`` and the form it was read from: ``"xml"``, ``"json"`` (arborcc)
    or ``"mscclpp"`` (a plan: MSCCL XML's runtime limits do not apply to it; MSCCL++'s were
    checked as it was read)."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in READERS:
        raise IRFormatError(f"unknown algorithm file type {p.suffix or '(no extension)'!r}; expected "
                            + " or ".join(f"{ext} ({what})" for ext, what in READERS.items()), source=str(p))
    if not p.is_file():
        raise IRFormatError("no such file" if not p.exists() else "not a regular file", source=str(p))
    if suffix == ".xml":
        from arborcc.ir.msccl_xml import read_msccl_xml

        return read_msccl_xml(p, source=str(p), dialect=dialect), "xml"
    return load_json_algorithm(p)


def load_json_algorithm(path: Path) -> tuple[Algorithm, str]:
    """An algorithm from a ``.json`` file: arborcc's JSON form or an MSCCL++ plan (the
    content decides; the file is read and parsed once)."""
    from arborcc.documents import load_json
    from arborcc.files import read_input_bytes
    from arborcc.ir.json_io import algorithm_from_dict, json_items
    from arborcc.ir.mscclpp.plan import is_mscclpp_plan, plan_from_document
    from arborcc.limits import limit

    source = str(path)
    text = read_input_bytes(path, IRFormatError, "algorithm-bytes")
    limit("algorithm-items").check(json_items(text), source, what="objects and arrays", error=IRFormatError)
    with cycle_collection_paused():
        doc, _ = load_json(text, source, IRFormatError, exact=False)
        if is_mscclpp_plan(doc):
            from arborcc.ir.mscclpp.translate import plan_to_algorithm

            return plan_to_algorithm(plan_from_document(doc, source), source), "mscclpp"
        return algorithm_from_dict(doc, source), "json"


@contextmanager
def cycle_collection_paused():
    """Python's cycle collector off while a file's millions of objects are built: they
    form no cycles, and the collector would walk them again and again as they grow
    (a third of reading a 1024-rank algorithm). Back to how it was afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
