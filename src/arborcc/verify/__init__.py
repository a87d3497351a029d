"""The verifier: proves an IR algorithm correct for its collective, or says what is wrong.

Public API::

    verify_algorithm(algo, dialect=None, *, slots=8, modes=None) -> VerificationReport
    check_algorithm(algo, dialect=None) -> None   # raises VerificationError
    supported_modes(algo, known=()) -> (Mode, ...)  # the calls in which algo is correct
    claiming_supported_modes(algo) -> Algorithm      # algo claiming exactly those calls

See :mod:`arborcc.verify.checker` for the order of the checks and ``docs/ir.md`` for
the model (chunk layouts, FIFO slots, what orders steps, what a race is).
"""

from arborcc.lazy import lazy_exports

#: public name -> module that defines it (imported on first use)
EXPORTS = {
    "verify_algorithm": "arborcc.verify.checker",
    "check_algorithm": "arborcc.verify.checker",
    "supported_modes": "arborcc.verify.checker",
    "claiming_supported_modes": "arborcc.verify.checker",
    "VerificationReport": "arborcc.ir.report",
    "Violation": "arborcc.ir.report",
    "DEFAULT_SLOTS": "arborcc.ir.limits",
}
__getattr__, __dir__ = lazy_exports(__name__, EXPORTS)
__all__ = list(EXPORTS)
