"""The verifier's entry points: :func:`verify_algorithm` and :func:`check_algorithm`.

Order of the checks (GC3 section 4-6 model; docs/ir.md):

1. structure (:mod:`.structure`) and buffer layout (:mod:`.layout`);
2. the dialect's runtime limits when a dialect is named (:mod:`arborcc.ir.limits`);
3. for each kind of call the algorithm claims (out-of-place, in-place; buffers laid out
   by :mod:`arborcc.ir.aliasing`): the symbolic run with bounded FIFOs, made once
   in compiled code (:mod:`.proof`), that finds deadlocks, races, uninitialized
   reads, count mismatches, unreceived data and wrong output chunks (the
   postcondition, :mod:`.postconditions`), worded by :mod:`.findings`; a program with
   numbers beyond 32 bits, which that run cannot hold, is not verified (a violation
   says so). A file that claims both modes must be correct in both; every violation
   names the mode it was found in;
4. when those runs finish without a violation, the deadlock check with steps cut into
   the runtimes' pieces (:mod:`.pieces`), which the one-message-per-step FIFOs of step
   3 do not see (``pieces=False`` skips it).

Steps 3 and 4 are skipped when step 1 found the program too malformed to run.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_right

from arborcc.collector import collector_paused
from arborcc.errors import VerificationError
from arborcc.ir.aliasing import Mode, declared_modes, rank_layout, with_modes
from arborcc.ir.collectives import has_signature
from arborcc.ir.limits import DEFAULT_SLOTS, check_dialect_limits
from arborcc.ir.model import Algorithm, Buffer
from arborcc.ir.report import VerificationReport, Violation, ViolationLog
from arborcc.verify.encoding import encodings
from arborcc.verify.findings import StepNames, report_findings
from arborcc.verify.layout import check_layout, memory_map
from arborcc.verify.pieces import check_pieces
from arborcc.verify.proof import symbolic_run
from arborcc.verify.semantics import OPS
from arborcc.verify.structure import check_structure

log_ = logging.getLogger(__name__)

#: why a program the symbolic run cannot hold is not verified
UNFOLLOWED = ("a buffer size, offset, count or dependency step beyond 2,147,483,647 (32 bits): the symbolic run "
              "cannot follow this program, so it is not verified")


def verify_algorithm(algo: Algorithm, dialect: str | None = None, *, slots: int = DEFAULT_SLOTS,
                     check_races: bool = True, modes=None, pieces: bool = True, also=()) -> VerificationReport:
    """Prove ``algo`` correct or list what is wrong with it.

    ``dialect`` ("legacy" or "executor") adds that runtime's limits; ``slots`` is the
    FIFO depth of every connection (8 = NCCL_STEPS for Simple). ``modes`` (default: the
    modes the algorithm claims, :func:`arborcc.ir.aliasing.declared_modes`) are the
    kinds of call checked; each gets its own buffer layout, run and postcondition, and
    every violation they find names its mode. ``pieces``: also check for deadlock with
    steps cut into the MSCCL runtimes' pieces (:mod:`.pieces`; independent of ``slots``).

    ``also``: further modes to try in the same symbolic run (:func:`.proof.symbolic_run`:
    the schedule is shared, each mode has its own memory): one proved correct -
    layout, run, postcondition and the pieces check free of violations, the dialect's
    limits aside - is appended to the report's ``modes`` with a note; one that is not
    is left out, and its violations are not the report's.
    """
    with collector_paused():  # the runs allocate a tuple or list per step, all acyclic: see compile_program
        with encodings.active():  # the structure rules, the proof and the pieces run read one encoding
            return _verify(algo, dialect, slots, check_races, modes, pieces, also)


def _verify(algo: Algorithm, dialect: str | None, slots: int, check_races: bool, modes, pieces: bool,
            also) -> VerificationReport:
    """:func:`verify_algorithm` with the cyclic garbage collector off."""
    notes: list[str] = []
    structure = check_structure(algo)
    violations = list(structure.violations)
    notes.extend(structure.notes)
    checked = tuple(declared_modes(algo) if modes is None else modes)
    tried = checked + tuple(m for m in dict.fromkeys(also) if m not in checked)
    if not checked:
        violations.append(Violation(None, None, None, "layout",
                                    "neither in-place nor out-of-place: no call can select this algorithm"))
    failed: list[str] = []
    for mode in tried:
        layout_violations, layout_notes = check_layout(algo, mode)
        if mode not in checked:
            if layout_violations:
                failed.append(mode.label)
            continue
        capped = ViolationLog()
        capped.extend(layout_violations)
        violations.extend(capped.items)
        notes.extend(n for n in layout_notes + capped.omitted_notes() if n not in notes)
        if layout_violations:
            failed.append(mode.label)
    if dialect is not None:
        violations.extend(check_dialect_limits(algo, dialect))
    if algo.collective == "custom":
        notes.append("collective 'custom': no postcondition is known; structure, limits, deadlock "
                     "and races were checked")
    postcondition_checked = False
    proved: list[Mode] = []
    if structure.fatal:
        notes.append("the program is too malformed to execute: deadlock, race and postcondition "
                     "checks were skipped")
    else:
        run_modes = [m for m in tried if m in checked or m.label not in failed]
        logs = [ViolationLog(prefix=f"{mode.label} call: ") for mode in run_modes]
        mms = [memory_map(algo, mode) for mode in run_modes]
        started = time.perf_counter()
        run, proofs, found = symbolic_run(algo, mms, slots, check_races) if run_modes else (None, [], [])
        postcondition_known = has_signature(algo.collective, algo.num_ranks, algo.chunks_per_loop)
        names = StepNames(algo) if not all(proofs) else None
        results, also_ok = [], []
        for v, (mode, mm, log) in enumerate(zip(run_modes, mms, logs)):
            if proofs[v]:  # finished, no violation, the postcondition met where there is one
                finished, ok, steps, candidates, how = True, postcondition_known, run.steps_run, 0, "proved"
            elif found[v] is None:  # numbers the compiled run cannot hold: nothing was followed
                log.add(None, None, None, "structure", UNFOLLOWED)
                finished, ok, steps, candidates, how = False, False, 0, 0, "not run"
            else:  # the compiled run's findings say what is wrong
                report_findings(names, run, found[v], mm, log, slots, _writer_namer(algo))
                finished, steps, candidates = not run.blocked, run.steps_run, found[v].found["race_candidates"]
                ok, how = finished and postcondition_known, "compiled findings"
            log_.debug("%s: %s call: %d steps, %d race candidates, %s, %.2f s", algo.name, mode.label, steps,
                       candidates, how, time.perf_counter() - started)
            if mode not in checked:
                if ok and not len(log):
                    also_ok.append(mode)
                continue
            results.append(ok)
            if len(log) and mode.label not in failed:
                failed.append(mode.label)
            violations.extend(log.items)
            notes.extend(log.omitted_notes())
            if found[v] is not None or proofs[v]:
                notes.append(f"{mode.label} call: ran {steps} steps with {slots} slots per connection"
                             + ("" if finished else " before deadlocking"))
        postcondition_checked = bool(results) and all(results)
        pieces_ok = not pieces
        if pieces and results and not violations:
            found, note = check_pieces(algo)
            violations.extend(found)
            notes.append(note)
            pieces_ok = not found
        elif pieces and also_ok and not [v for v in violations if v.kind != "limit"]:
            pieces_ok = not check_pieces(algo)[0]  # the declared report skips it over limits alone
        if pieces_ok:
            proved = also_ok
        failed.extend(m.label for m in also_ok if m not in proved)
    notes.extend(f"also correct in an {m.label} call (verified)" for m in proved)
    return VerificationReport(ok=not violations, violations=violations,
                              postcondition_checked=postcondition_checked, notes=notes,
                              modes=[m.label for m in checked + tuple(proved)], failed_modes=failed)


def refuted_mode(algo: Algorithm, mode: Mode) -> str | None:
    """A quick proof that ``algo`` is wrong in ``mode`` without running it, or None.

    Out of place the receive buffer holds nothing when the call starts; if some chunk of
    a result the collective requires is written by no step (no step writes the IR buffer
    placed there), the postcondition cannot hold. In-place programs of the public GC3
    tools, which write every access in one buffer, are refuted this way for
    out-of-place calls at the cost of one pass over the steps.
    """
    if mode is not Mode.OUTOFPLACE or not has_signature(algo.collective, algo.num_ranks, algo.chunks_per_loop):
        return None
    for prog in algo.ranks:
        if not 0 <= prog.rank < algo.num_ranks:
            return None
        lay = rank_layout(algo, prog, mode)
        if not lay.result_checked or not lay.received_chunks:
            continue
        written = [False] * lay.received_chunks
        for tb in prog.threadblocks:
            for st in tb.steps:
                info = OPS.get(st.op)
                if info is not None and info.writes_dst and st.dst_buf is Buffer.OUTPUT:
                    for x in range(max(st.dst_off, 0), min(st.dst_off + st.count, lay.received_chunks)):
                        written[x] = True
        if not all(written):
            return (f"{mode.label} call: rank {prog.rank}: output chunk {written.index(False)} is written by no step, "
                    f"but {algo.collective} needs a result there")
    return None


def supported_modes(algo: Algorithm, dialect: str | None = None, *, known=(),
                    slots: int = DEFAULT_SLOTS) -> tuple[Mode, ...]:
    """The kinds of call in which ``algo`` is correct, whatever it claims: the modes in
    ``known`` (verified by the caller already) and every other mode the verifier proves
    (after :func:`refuted_mode`, which rules most out in one pass)."""
    ok = []
    for mode in Mode:
        if mode in known or (refuted_mode(algo, mode) is None
                             and verify_algorithm(algo, dialect, slots=slots, modes=(mode,)).ok):
            ok.append(mode)
    return tuple(ok)


def claiming_supported_modes(algo: Algorithm, dialect: str | None = None, *,
                             slots: int = DEFAULT_SLOTS) -> Algorithm:
    """``algo`` claiming exactly the kinds of call in which it is correct: the ones it
    claims (which the caller has verified) and every other one the verifier proves
    (:func:`supported_modes`). What arborcc writes claims this, so that a runtime that
    selects algorithms by in-place-ness never picks one that would be wrong for the call."""
    return with_modes(algo, supported_modes(algo, dialect, known=declared_modes(algo), slots=slots))


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


def check_algorithm(algo: Algorithm, dialect: str | None = None, *, slots: int = DEFAULT_SLOTS,
                    pieces: bool = True) -> None:
    """Raise :class:`VerificationError` naming the first violation, if there is one
    (``pieces``: as :func:`verify_algorithm`)."""
    report = verify_algorithm(algo, dialect, slots=slots, pieces=pieces)
    if not report.ok:
        first = report.violations[0]
        more = len(report.violations) - 1
        suffix = f" (and {more} more)" if more else ""
        raise VerificationError(f"algorithm {algo.name!r} is incorrect: {first}{suffix}")
