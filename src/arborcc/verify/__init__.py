"""The verifier: proves an IR algorithm correct for its collective, or says what is wrong.

Public API::

    verify_algorithm(algo, dialect=None, *, slots=8) -> VerificationReport
    check_algorithm(algo, dialect=None) -> None   # raises VerificationError

See :mod:`arborcc.verify.checker` for the order of the checks and ``docs/ir.md`` for
the model (chunk layouts, FIFO slots, what orders steps, what a race is).
"""

from arborcc.verify.report import VerificationReport, Violation
from arborcc.verify.checker import check_algorithm, verify_algorithm
from arborcc.verify.symbolic import DEFAULT_SLOTS

__all__ = ["verify_algorithm", "check_algorithm", "VerificationReport", "Violation", "DEFAULT_SLOTS"]
