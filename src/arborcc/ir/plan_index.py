"""A plan directory's index, ``plan.json``: its format and its one reader.

A tuning plan on disk (written by :func:`arborcc.tune.plan_writer.write_plan`) is a
directory of algorithm files, one per size bucket: MSCCL XML files, each with its ``minBytes``/``maxBytes`` -
which is all a runtime needs, since MSCCL picks among loaded algorithms by those
attributes (``MSCCL_ALGO_DIR`` for the new executors and RCCL, ``MSCCL_XML_FILES`` for
the original fork) - or of MSCCL++ execution plans with ``min_message_size``/``max_message_size``
(``arborcc tune --format mscclpp``; MSCCL++'s executor refuses a call outside a plan's
range), plus ``plan.json``, an index for tools and arborcc's own runtime
(:meth:`arborcc.runtime.plan.Plan.load`, what ``ARBORCC_PLAN`` names)::

    {"format": "arborcc-plan", "version": 1,
     "collective": "allreduce", "ranks": 8, "topology": "dgx1v", "dialect": "executor",
     "fidelity": "v100",
     "algorithms": [{"file": "allreduce-0-nccl-ring-x2-LL.xml", "min_bytes": 0,
                     "max_bytes": 65535, "strategy": "nccl-ring", "instances": 2,
                     "protocol": "LL", "predicted_us": {"1024": 18.2, ...}}, ...]}

``min_bytes``/``max_bytes`` repeat the files' attributes (0 = no upper limit); sizes
are nccl-tests sizes in bytes. The index lives here, below both the tuner that writes it
and the runtime that reads it: :func:`plan_index_document` is the document the writer
writes, :func:`read_plan_index` the one reader of a user's ``plan.json``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from arborcc.errors import InputError

INDEX = "plan.json"
FORMAT = "arborcc-plan"
VERSION = 1


@dataclass(frozen=True)
class SizeRule:
    """One algorithm of a plan and the call sizes it runs: ``min_bytes <= size <=
    max_bytes``, ``max_bytes`` 0 meaning no limit (MSCCL's rule)."""

    file: str
    min_bytes: int
    max_bytes: int
    strategy: str = ""
    instances: int = 1
    protocol: str = ""


@dataclass(frozen=True)
class PlanIndex:
    """A plan directory's ``plan.json``: what the plan is for and its size rules, in order."""

    path: Path  #: the plan.json file
    collective: str
    ranks: int
    rules: list[SizeRule]

    def file(self, rule: SizeRule) -> Path:
        """The algorithm file of ``rule`` (in the plan's folder)."""
        return self.path.parent / rule.file


def plan_index_document(collective: str, ranks: int, algorithms: list[dict], **about) -> dict:
    """The ``plan.json`` of a plan: ``algorithms`` one object per file (``file``,
    ``min_bytes``, ``max_bytes`` and what the writer adds), ``about`` what it was tuned for
    (topology, dialect, fidelity)."""
    return {"format": FORMAT, "version": VERSION, "collective": collective, "ranks": ranks, **about,
            "algorithms": algorithms}


def read_plan_index(directory: str | os.PathLike) -> PlanIndex:
    """``plan.json`` of a plan directory, read within the limits (input bytes, nesting:
    :func:`arborcc.files.read_input_bytes`, :func:`arborcc.documents.load_json`) and checked
    entry by entry: one InputError naming plan.json, the line and the entry."""
    from arborcc.documents import load_json, path_text
    from arborcc.files import read_input_bytes
    from arborcc.ir.collectives import COLLECTIVES
    from arborcc.limits import limit
    from arborcc.sizes import MAX_BYTES

    path = Path(directory) / INDEX
    source = str(path)
    doc, locate = load_json(read_input_bytes(path), source)

    def fail(place: tuple, problem: str) -> InputError:
        return InputError(f"{path_text(place)}: {problem}" if place else problem, source=source,
                          place=locate(place) if place else None)

    def field(obj: dict, place: tuple, key: str, kind, what: str, required: bool = True, default=None):
        if key not in obj:
            if required:
                raise fail(place, f"the field {key!r} is missing ({what})")
            return default
        value = obj[key]
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise fail(place + (key,), f"{value!r} is not a whole number ({what})")
        if kind is str and not isinstance(value, str):
            raise fail(place + (key,), f"{value!r} is not a string ({what})")
        return value

    if not isinstance(doc, dict):
        raise fail((), f"not an {FORMAT} index: a JSON object expected")
    if doc.get("format") != FORMAT or type(doc.get("version")) is not int or doc.get("version") != VERSION:
        raise fail((), f"not an {FORMAT} version {VERSION} index (format {doc.get('format')!r}, "
                       f"version {doc.get('version')!r})")
    collective = field(doc, (), "collective", str, "the collective the plan is for")
    if collective not in COLLECTIVES:
        raise fail(("collective",), f"unknown collective {collective!r} (known: {', '.join(COLLECTIVES)})")
    ranks = field(doc, (), "ranks", int, "the number of ranks")
    max_ranks = limit("ranks").value
    if not 1 <= ranks <= max_ranks:
        raise fail(("ranks",), f"{ranks} ranks is out of range: from 1 to {max_ranks}")
    algorithms = doc.get("algorithms")
    if not isinstance(algorithms, list) or not algorithms:
        raise fail(("algorithms",) if "algorithms" in doc else (),
                   "'algorithms' must be a non-empty list of {file, min_bytes, max_bytes}")
    rules = []
    for i, a in enumerate(algorithms):
        place = ("algorithms", i)
        if not isinstance(a, dict):
            raise fail(place, "not an object {file, min_bytes, max_bytes}")
        name = field(a, place, "file", str, "an algorithm file in the plan's folder")
        if name in ("", ".", "..") or "/" in name or "\\" in name or not name.isprintable():
            raise fail(place + ("file",), f"{name!r} is not a file name inside the plan's folder")
        if Path(name).suffix.lower() not in (".xml", ".json"):
            raise fail(place + ("file",), f"{name!r} is not an algorithm file (.xml or .json)")
        if not (path.parent / name).is_file():
            raise fail(place + ("file",), f"{name!r}: no such file in {path.parent}")
        bounds = []
        for key in ("min_bytes", "max_bytes"):
            value = field(a, place, key, int, "bytes, 0 to 2^63 - 1")
            if not 0 <= value <= MAX_BYTES:
                raise fail(place + (key,), f"{value} is out of range: bytes from 0 to 2^63 - 1")
            bounds.append(value)
        low, high = bounds
        if high and low > high:
            raise fail(place, f"min_bytes {low} is above max_bytes {high} (0: no upper limit)")
        instances = field(a, place, "instances", int, "instance count, from 1", required=False, default=1)
        if instances < 1:
            raise fail(place + ("instances",), f"{instances} is out of range: an instance count from 1")
        rules.append(SizeRule(name, low, high, field(a, place, "strategy", str, "a strategy name", False, ""),
                              instances, field(a, place, "protocol", str, "a protocol name", False, "")))
    return PlanIndex(path, collective, ranks, rules)

