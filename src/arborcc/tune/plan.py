"""A tuning plan on disk: a directory of MSCCL XML files, one per size bucket, each
with its ``minBytes``/``maxBytes`` - which is all a runtime needs, since MSCCL picks
among loaded algorithms by those attributes (``MSCCL_ALGO_DIR`` for the new executors
and RCCL, ``MSCCL_XML_FILES`` for the original fork) - plus ``plan.json``, an index for
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

from arborcc.errors import InputError, VerificationError
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


def write_plan(result: TuneResult, directory: str | os.PathLike) -> list[Path]:
    """Write one verified MSCCL XML per bucket and ``plan.json`` into ``directory``."""
    from arborcc.files import write_output
    from arborcc.ir.msccl_xml import write_msccl_xml
    from arborcc.verify import verify_algorithm

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written, entries = [], []
    for k, bucket in enumerate(result.buckets):
        algo = result.algorithm(bucket)
        report = verify_algorithm(algo, result.dialect)
        if not report.ok:
            raise VerificationError(f"tuned algorithm {algo.name} fails the {result.dialect} checks: "
                                    f"{report.violations[0]}")
        c = bucket.choice
        name = f"{result.collective}-{k}-{c.strategy}-x{c.instances}-{c.protocol}.xml"
        write_output(out / name, write_msccl_xml(algo, result.dialect))
        written.append(out / name)
        entries.append({"file": name, "min_bytes": bucket.min_bytes, "max_bytes": bucket.max_bytes,
                        "strategy": c.strategy, "instances": c.instances, "protocol": c.protocol,
                        "predicted_us": {str(s): round(t * 1e6, 3) for s, t in sorted(bucket.times.items())}})
    index = {"format": FORMAT, "version": VERSION, "collective": result.collective, "ranks": result.ranks,
             "topology": result.topology, "dialect": result.dialect, "fidelity": result.fidelity,
             "algorithms": entries}
    write_output(out / INDEX, json.dumps(index, indent=2) + "\n")
    written.append(out / INDEX)
    return written


def read_plan(directory: str | os.PathLike) -> list[PlanEntry]:
    """The entries of a plan directory: from ``plan.json`` when there is one, else from
    the ``minBytes``/``maxBytes`` of every XML file in it (any MSCCL algorithm directory)."""
    from arborcc.ir.msccl_xml import read_msccl_xml

    d = Path(directory)
    if not d.is_dir():
        raise InputError("is not a directory", source=str(d))
    index = d / INDEX
    if index.exists():
        try:
            data = json.loads(index.read_text(encoding="utf-8"))
            if data.get("format") != FORMAT or data.get("version") != VERSION:
                raise InputError(f"not an {FORMAT} version {VERSION} index", source=str(index))
            return [PlanEntry(a["file"], int(a["min_bytes"]), int(a["max_bytes"]), a.get("strategy", ""),
                              int(a.get("instances", 1)), a.get("protocol", "")) for a in data["algorithms"]]
        except (ValueError, KeyError, TypeError) as e:
            raise InputError(f"malformed plan index ({e})", source=str(index)) from None
    entries = []
    for path in sorted(d.glob("*.xml")):
        algo = read_msccl_xml(path)
        entries.append(PlanEntry(path.name, algo.min_bytes, algo.max_bytes, protocol=algo.protocol.value))
    return entries


def select(entries: list[PlanEntry], size: int) -> PlanEntry | None:
    """The entry MSCCL would run for ``size`` bytes (the first that covers it), or None
    (the runtime falls back to its own algorithms)."""
    return next((e for e in entries if e.covers(size)), None)
