"""A tuning plan on disk: a directory of MSCCL XML files, one per size bucket, each
with its ``minBytes``/``maxBytes`` - which is all a runtime needs, since MSCCL picks
among loaded algorithms by those attributes (``MSCCL_ALGO_DIR`` for the new executors
and RCCL, ``MSCCL_XML_FILES`` for the original fork) - or MSCCL++ execution plans with
``min_message_size``/``max_message_size`` (``arborcc tune --format mscclpp``; MSCCL++'s
executor refuses a call outside a plan's range), plus ``plan.json``, an index for
tools and arborcc's own runtime::

    {"format": "arborcc-plan", "version": 1,
     "collective": "allreduce", "ranks": 8, "topology": "dgx1v", "dialect": "executor",
     "fidelity": "v100",
     "algorithms": [{"file": "allreduce-0-nccl-ring-x2-LL.xml", "min_bytes": 0,
                     "max_bytes": 65535, "strategy": "nccl-ring", "instances": 2,
                     "protocol": "LL", "predicted_us": {"1024": 18.2, ...}}, ...]}

``min_bytes``/``max_bytes`` repeat the files' attributes (0 = no upper limit); sizes
are nccl-tests sizes in bytes. Every file is verified (and checked against the
dialect's limits) before it is written: one bad file in an algorithm directory stops
a runtime from starting.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from arborcc.errors import InputError, VerificationError

if TYPE_CHECKING:
    from arborcc.tune.search import TuneResult

INDEX = "plan.json"
FORMAT = "arborcc-plan"
VERSION = 1


@dataclass(frozen=True)
class PlanEntry:
    """One algorithm of a plan."""

    file: str
    min_bytes: int
    max_bytes: int
    strategy: str = ""
    instances: int = 1
    protocol: str = ""

    def covers(self, size: int) -> bool:
        """MSCCL's rule: ``min_bytes <= size <= max_bytes``, ``max_bytes`` 0 meaning no limit."""
        return self.min_bytes <= size and (self.max_bytes == 0 or size <= self.max_bytes)


#: the algorithm file formats a plan folder can hold (``arborcc tune --format``)
FORMATS = ("xml", "mscclpp")


def write_plan(result: "TuneResult", directory: str | os.PathLike, fmt: str = "xml") -> list[Path]:
    """Write one verified algorithm file per bucket and ``plan.json`` into ``directory``:
    MSCCL XML with ``minBytes``/``maxBytes`` (``fmt`` ``xml``), or MSCCL++ execution plans
    with ``min_message_size``/``max_message_size`` (``mscclpp``; the writer lowers the
    upper bound to what fits MSCCL++'s scratch, and the index repeats each plan's own
    range). Every file is made and checked before the first is written."""
    from arborcc.files import write_output

    out = Path(directory)
    files, entries = [], []
    for k, bucket in enumerate(result.buckets):
        algo = result.algorithm(bucket)
        c = bucket.choice
        stem = f"{result.collective}-{k}-{c.strategy}-x{c.instances}-{c.protocol}"
        if fmt == "mscclpp":
            name, text, low, high = stem + ".json", *mscclpp_bucket_plan(algo)
        else:
            name, text, low, high = stem + ".xml", xml_bucket_file(algo, result.dialect), bucket.min_bytes, \
                bucket.max_bytes
        files.append((name, text))
        entries.append({"file": name, "min_bytes": low, "max_bytes": high,
                        "strategy": c.strategy, "instances": c.instances, "protocol": c.protocol,
                        "predicted_us": {str(s): round(t * 1e6, 3) for s, t in sorted(bucket.times.items())}})
    index = {"format": FORMAT, "version": VERSION, "collective": result.collective, "ranks": result.ranks,
             "topology": result.topology, "dialect": result.dialect, "fidelity": result.fidelity,
             "algorithms": entries}
    files.append((INDEX, json.dumps(index, indent=2) + "\n"))
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in files:
        write_output(out / name, text)
        written.append(out / name)
    return written


def xml_bucket_file(algo, dialect: str) -> str:
    """A bucket's algorithm as MSCCL XML, verified against the dialect's limits first."""
    from arborcc.ir.msccl_xml import write_msccl_xml
    from arborcc.verify import verify_algorithm

    report = verify_algorithm(algo, dialect)
    if not report.ok:
        raise VerificationError(f"tuned algorithm {algo.name} fails the {dialect} checks: {report.violations[0]}")
    return write_msccl_xml(algo, dialect)


def mscclpp_bucket_plan(algo) -> tuple[str, int, int]:
    """A bucket's algorithm as an MSCCL++ execution plan (read back, translated, verified
    and checked for races before it is returned) and its size range in the index's terms
    (``min_bytes``, ``max_bytes``; 0 = no upper limit)."""
    from arborcc.cli.plan_output import mscclpp_plan_text

    text = mscclpp_plan_text(algo, source=f"tuned algorithm {algo.name!r}")
    doc = json.loads(text)
    high = doc["max_message_size"]
    return text, doc["min_message_size"], 0 if high >= 2**63 - 1 else high


@dataclass(frozen=True)
class PlanIndex:
    """A plan directory's ``plan.json``: what the plan is for and its entries."""

    path: Path  #: the plan.json file
    collective: str
    ranks: int
    entries: list[PlanEntry]

    def file(self, entry: PlanEntry) -> Path:
        """The algorithm file of ``entry`` (in the plan's folder)."""
        return self.path.parent / entry.file


def read_plan(directory: str | os.PathLike) -> list[PlanEntry]:
    """The entries of a plan directory: from ``plan.json`` when there is one
    (:func:`read_index`), else from the ``minBytes``/``maxBytes`` of every XML file in it
    (any MSCCL algorithm directory)."""
    from arborcc.ir.msccl_xml import read_msccl_xml

    d = Path(directory)
    if not d.is_dir():
        raise InputError("is not a directory", source=str(d))
    if (d / INDEX).exists():
        return read_index(d).entries
    entries = []
    for path in sorted(d.glob("*.xml")):
        algo = read_msccl_xml(path)
        entries.append(PlanEntry(path.name, algo.min_bytes, algo.max_bytes, protocol=algo.protocol.value))
    return entries


def read_index(directory: str | os.PathLike) -> PlanIndex:
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
    entries = []
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
        entries.append(PlanEntry(name, low, high, field(a, place, "strategy", str, "a strategy name", False, ""),
                                 instances, field(a, place, "protocol", str, "a protocol name", False, "")))
    return PlanIndex(path, collective, ranks, entries)


def select(entries: list[PlanEntry], size: int) -> PlanEntry | None:
    """The entry MSCCL would run for ``size`` bytes (the first that covers it), or None
    (the runtime falls back to its own algorithms)."""
    return next((e for e in entries if e.covers(size)), None)
