"""Writing what a tune run chose as a plan directory: one verified MSCCL XML file per
size bucket, its ``minBytes``/``maxBytes`` the bucket's, and the index ``plan.json``
(:mod:`arborcc.ir.plan_index`, where its format and its reader live). Every file is
verified (and checked against the dialect's limits) before it is written: one bad file
in an algorithm directory stops a runtime from starting.
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


def write_plan(result: "TuneResult", directory: str | os.PathLike) -> list[Path]:
    """Write one verified MSCCL XML per bucket and ``plan.json`` into ``directory``."""
    from arborcc.files import write_output
    from arborcc.ir.msccl_xml import write_msccl_xml
    from arborcc.verify import verify_algorithm

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written, algorithms = [], []
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
        algorithms.append({"file": name, "min_bytes": bucket.min_bytes, "max_bytes": bucket.max_bytes,
                           "strategy": c.strategy, "instances": c.instances, "protocol": c.protocol,
                           "predicted_us": {str(s): round(t * 1e6, 3) for s, t in sorted(bucket.times.items())}})
    index = plan_index_document(result.collective, result.ranks, algorithms, topology=result.topology,
                                dialect=result.dialect, fidelity=result.fidelity)
    write_output(out / INDEX, json.dumps(index, indent=2) + "\n")
    written.append(out / INDEX)
    return written
