"""``arborcc verify ALGO.xml|ALGO.json``: prove an algorithm correct, or say what is wrong.

Every kind of call the file claims (``inplace``/``outofplace``) is checked with its own
buffer layout, and the answer names them. Exit status: 0 correct (one summary line), 1
incorrect (the first violation, explained, with the mode it fails in), 2 unreadable
input (an :class:`~arborcc.errors.IRFormatError`, reported by ``main``). ``--json``
prints one object: ``ok``, ``modes``, ``failed_modes``, ``violations``,
``postcondition_checked``, ``notes``, and the runtime limits checked: ``dialects`` (the
dialects whose limits were checked) and ``accepted_by`` (those within whose limits the
algorithm is).

Runtime limits: with ``--dialect`` that MSCCL runtime's; without, both dialects' - the
algorithm is correct when it is within at least one of them, and the line says which.
"""

from __future__ import annotations

import argparse

from arborcc.ir.limits import DEFAULT_SLOTS, DIALECTS


#: the most FIFO slots per connection: the verifier counts them in 32-bit integers (a
#: connection never holds more messages than it sends, so more slots change nothing)
MAX_SLOTS = 2**31 - 1


def _slots(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError("a connection has at least 1 slot")
    if value > MAX_SLOTS:
        raise argparse.ArgumentTypeError(f"{value:,} slots is over the limit of {MAX_SLOTS:,} (2^31 - 1)")
    return value


def register(p: argparse.ArgumentParser) -> None:
    p.description = ("Check an algorithm (MSCCL XML of either dialect, or arborcc JSON): structure, "
                     "the collective's postcondition by symbolic execution, deadlock freedom with "
                     "bounded connection FIFOs, absence of races between thread blocks, and the "
                     "limits of the MSCCL runtimes (of --dialect, else of both dialects: it must be "
                     "within one). Exit 0 if correct, 1 if not, 2 if the file cannot be read.")
    p.add_argument("algorithm", metavar="ALGO", help="algorithm file: .xml (MSCCL) or .json (arborcc)")
    p.add_argument("--dialect", choices=sorted(DIALECTS),
                   help="check this runtime's limits and required attributes (legacy: original MSCCL "
                        "fork; executor: MSCCL executor / RCCL); default: both dialects' limits, "
                        "correct when within one")
    p.add_argument("--slots", type=_slots, default=DEFAULT_SLOTS,
                   help=f"FIFO slots per connection (default {DEFAULT_SLOTS}, NCCL's Simple protocol)")
    p.add_argument("--json", action="store_true", help="print one JSON object with all violations and notes")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from arborcc.cli.output import print_json
    from arborcc.ir.limits import check_dialect_limits
    from arborcc.ir.load import load_algorithm_file
    from arborcc.verify import verify_algorithm

    from arborcc.ir.mscclpp.translate import PlanNotTranslatable

    try:
        algo, form = load_algorithm_file(args.algorithm, dialect=args.dialect)
    except PlanNotTranslatable:  # a plan that deadlocks is incorrect, translated or not
        deadlocks = _plan_violations(args.algorithm, races=False)
        if not deadlocks:
            raise
        return _report_untranslated(args, deadlocks)
    report = verify_algorithm(algo, args.dialect, slots=args.slots)
    dialects = [args.dialect] if args.dialect else sorted(DIALECTS)
    if form == "mscclpp":  # deadlock and races in the plan's own semantics
        found = _plan_violations(args.algorithm)
        if found:
            report.violations[:0] = found
            report.ok = False
    if form == "mscclpp" and not args.dialect:  # MSCCL++'s own limits were checked as it was read
        dialects, accepted, outside = [], [], {}
    elif args.dialect:
        accepted = [] if any(v.kind == "limit" for v in report.violations) else [args.dialect]
        outside: dict = {}
    else:  # both runtimes' limits: correct when within one of them
        outside = {d: check_dialect_limits(algo, d) for d in dialects}
        accepted = [d for d in dialects if not outside[d]]
        if not accepted:
            report.violations.extend(outside[dialects[0]])
            report.ok = False
    if args.json:
        print_json({"file": str(args.algorithm), **report.to_dict(), "dialects": dialects, "accepted_by": accepted})
        return 0 if report.ok else 1
    what = f"{algo.collective} on {algo.num_ranks} ranks, {algo.num_steps} steps, {report.modes_text}"
    if report.ok:
        proven = "postcondition holds" if report.postcondition_checked else "no postcondition known (custom)"
        if args.dialect:
            limits = f"within {args.dialect} limits"
        elif not dialects:
            limits = "within MSCCL++'s limits"
        elif len(accepted) == len(dialects):
            limits = "within the limits of both MSCCL dialects"
        else:
            d = next(d for d in dialects if outside[d])
            limits = f"within {accepted[0]} limits (not {d}'s: {outside[d][0]})"
        print(f"{args.algorithm}: OK ({what}): {proven}, no deadlock with {args.slots} slots, no race, {limits}")
        return 0
    first = report.violations[0]
    more = len(report.violations) - 1
    scope = " (within neither MSCCL dialect's limits)" if not args.dialect and dialects and not accepted else ""
    wrong = f"; wrong {' and '.join(report.failed_modes)}" if report.failed_modes else ""
    print(f"{args.algorithm}: INCORRECT ({what}{wrong}): {first} [{first.kind}]{scope}"
          + (f" (and {more} more; --json lists all)" if more else ""))
    return 1


def _plan_violations(path: str, races: bool = True) -> list:
    """Deadlocks (:mod:`arborcc.ir.mscclpp.deadlock`) and, with ``races``, races
    (:mod:`arborcc.ir.mscclpp.races`) of the plan ``path`` in its own semantics."""
    from arborcc.ir.mscclpp.deadlock import plan_deadlocks
    from arborcc.ir.mscclpp.plan import read_mscclpp_plan
    from arborcc.ir.mscclpp.races import plan_races

    plan = read_mscclpp_plan(path)
    return plan_deadlocks(plan, str(path)) + (plan_races(plan, str(path)) if races else [])


def _report_untranslated(args: argparse.Namespace, deadlocks: list) -> int:
    """The verdict on a plan that deadlocks and has no IR form: exit 1, naming the first
    stuck operation (``--json``: every stuck thread block)."""
    from arborcc.cli.output import print_json
    from arborcc.ir.report import VerificationReport

    report = VerificationReport(ok=False, violations=deadlocks)
    if args.json:
        print_json({"file": str(args.algorithm), **report.to_dict(), "dialects": [], "accepted_by": []})
        return 1
    more = len(deadlocks) - 1
    print(f"{args.algorithm}: INCORRECT (MSCCL++ plan, not translated to the IR): {deadlocks[0]} [deadlock]"
          + (f" (and {more} more; --json lists all)" if more else ""))
    return 1
