"""The verifier's entry points: :func:`verify_algorithm` and :func:`check_algorithm`.

Order of the checks (GC3 section 4-6 model; docs/ir.md):

1. structure (:mod:`.structure`) and buffer layout (:mod:`.layout`);
2. the dialect's runtime limits when a dialect is named (:mod:`arborcc.ir.limits`);
3. for each kind of call the algorithm accepts (out-of-place, in-place): a symbolic
   run with bounded FIFOs (:mod:`.symbolic`) that finds deadlocks, races,
   uninitialized reads, count mismatches and unreceived data, then the
   postcondition (:mod:`.postconditions`).

Step 3 is skipped when step 1 found the program too malformed to run.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_right

from arborcc.errors import VerificationError
from arborcc.ir.limits import DEFAULT_SLOTS, check_dialect_limits
from arborcc.ir.model import Algorithm
from arborcc.ir.report import VerificationReport, ViolationLog
from arborcc.verify.layout import check_layout, memory_map
from arborcc.verify.postconditions import check_postcondition
from arborcc.verify.structure import check_structure
from arborcc.verify.symbolic import simulate

log_ = logging.getLogger(__name__)


def verify_algorithm(algo: Algorithm, dialect: str | None = None, *, slots: int = DEFAULT_SLOTS,
                     check_races: bool = True) -> VerificationReport:
    """Prove ``algo`` correct or list what is wrong with it.

    ``dialect`` ("legacy" or "executor") adds that runtime's limits; ``slots`` is the
    FIFO depth of every connection (8 = NCCL_STEPS for Simple).
    """
    notes: list[str] = []
    structure = check_structure(algo)
    violations = list(structure.violations)
    notes.extend(structure.notes)
    layout_violations, layout_notes = check_layout(algo)
    capped = ViolationLog()
    capped.extend(layout_violations)
    violations.extend(capped.items)
    notes.extend(layout_notes + capped.omitted_notes())
    if dialect is not None:
        violations.extend(check_dialect_limits(algo, dialect))
    if algo.collective == "custom":
        notes.append("collective 'custom': no postcondition is known; structure, limits, deadlock "
                     "and races were checked")
    postcondition_checked = False
    if structure.fatal:
        notes.append("the program is too malformed to execute: deadlock, race and postcondition "
                     "checks were skipped")
    else:
        modes = [m for m, on in ((False, algo.outofplace), (True, algo.inplace)) if on]
        results = []
        for inplace in modes:
            label = "in-place" if inplace else "out-of-place"
            log = ViolationLog(prefix=f"{label} call: " if len(modes) > 1 else "")
            mm = memory_map(algo, inplace)
            started = time.perf_counter()
            sim = simulate(algo, mm, structure.cuts, log, slots=slots, check_races=check_races)
            log_.debug("%s: %s call: %d steps, %d race candidates, %.2f s", algo.name, label, sim.steps_run,
                       sim.race_candidates, time.perf_counter() - started)
            checked = False
            if sim.finished:
                checked = check_postcondition(algo, mm, sim.memory, _writer_namer(algo), log)
            results.append(checked)
            violations.extend(log.items)
            notes.extend(log.omitted_notes())
            notes.append(f"{label} call: ran {sim.steps_run} steps with {slots} slots per connection"
                         + ("" if sim.finished else " before deadlocking"))
        postcondition_checked = bool(results) and all(results)
    return VerificationReport(ok=not violations, violations=violations,
                              postcondition_checked=postcondition_checked, notes=notes)


def _writer_namer(algo: Algorithm):
    """gid -> "rank r tb t step s" using the same numbering as the simulator."""
    starts: list[tuple[int, int, int]] = []  # (first gid, rank, tb id)
    pos = 0
    for prog in sorted(algo.ranks, key=lambda p: p.rank):
        for tb in prog.threadblocks:
            starts.append((pos, prog.rank, tb.id))
            pos += len(tb.steps)
    firsts = [s[0] for s in starts]

    def name(gid: int) -> str:
        # the last thread block starting at or before gid (empty ones share a start)
        first, rank, tbid = starts[bisect_right(firsts, gid) - 1]
        return f"rank {rank} tb {tbid} step {gid - first}"

    return name


def check_algorithm(algo: Algorithm, dialect: str | None = None, *, slots: int = DEFAULT_SLOTS) -> None:
    """Raise :class:`VerificationError` naming the first violation, if there is one."""
    report = verify_algorithm(algo, dialect, slots=slots)
    if not report.ok:
        first = report.violations[0]
        more = len(report.violations) - 1
        suffix = f" (and {more} more)" if more else ""
        raise VerificationError(f"algorithm {algo.name!r} is incorrect: {first}{suffix}")
