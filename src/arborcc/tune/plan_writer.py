"""Writing what a tune run chose as a plan directory: one verified algorithm file per size
bucket - MSCCL XML with the bucket's ``minBytes``/``maxBytes``, or an MSCCL++ execution
plan with its ``min_message_size``/``max_message_size`` (``arborcc tune --format
mscclpp``) - and the index ``plan.json`` (:mod:`arborcc.ir.plan_index`, where its format
and its reader live). Every file is made and checked (verified, within the dialect's
limits; a plan read back, verified and race- and deadlock-checked) before the first is
written: one bad file in an algorithm directory stops a runtime from starting.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from arborcc.errors import VerificationError
from arborcc.ir.plan_index import INDEX, plan_index_document

if TYPE_CHECKING:
    from arborcc.tune.search import TuneResult


#: the algorithm file formats a plan folder can hold (``arborcc tune --format``)
FORMATS = ("xml", "mscclpp")


def write_plan(result: "TuneResult", directory: str | os.PathLike, fmt: str = "xml") -> list[Path]:
    """Write one verified algorithm file per bucket and ``plan.json`` into ``directory``:
    MSCCL XML with ``minBytes``/``maxBytes`` (``fmt`` ``xml``), or MSCCL++ execution plans
    with ``min_message_size``/``max_message_size`` (``mscclpp``; the writer lowers the
    upper bound to what fits MSCCL++'s scratch, and the index repeats each plan's own
    range)."""
    from arborcc.files import write_output

    out = Path(directory)
    files, algorithms = [], []
    for k, bucket in enumerate(result.buckets):
        algo = result.algorithm(bucket)
        c = bucket.choice
        stem = f"{result.collective}-{k}-{c.strategy}-x{c.instances}-{c.protocol}"
        if fmt == "mscclpp":
            name, text, low, high = stem + ".json", *mscclpp_bucket_plan(algo)
        else:
            name, text, low, high = (stem + ".xml", xml_bucket_file(algo, result.dialect), bucket.min_bytes,
                                     bucket.max_bytes)
        files.append((name, text))
        algorithms.append({"file": name, "min_bytes": low, "max_bytes": high,
                           "strategy": c.strategy, "instances": c.instances, "protocol": c.protocol,
                           "predicted_us": {str(s): round(t * 1e6, 3) for s, t in sorted(bucket.times.items())}})
    index = plan_index_document(result.collective, result.ranks, algorithms, topology=result.topology,
                                dialect=result.dialect, fidelity=result.fidelity)
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
    and checked for races and deadlock before it is returned) and its size range in the
    index's terms (``min_bytes``, ``max_bytes``; 0 = no upper limit)."""
    from arborcc.verify.mscclpp_plan import mscclpp_plan_text

    text = mscclpp_plan_text(algo, source=f"tuned algorithm {algo.name!r}")
    doc = json.loads(text)
    high = doc["max_message_size"]
    return text, doc["min_message_size"], 0 if high >= 2**63 - 1 else high
