"""What is wrong with an algorithm: :class:`Violation` and the verifier's :class:`VerificationReport`.

This vocabulary lives in the IR layer because checks of the IR itself speak it too
(:func:`arborcc.ir.limits.check_dialect_limits`); the verifier (:mod:`arborcc.verify`)
builds on the IR and fills a report with it.

A violation names where it is (rank, thread block id, step index; any of them may be
absent for algorithm-wide problems), a ``kind`` and a one-line message. Kinds:

========================  ===========================================================
``structure``             malformed IR: peers, ids, buffers, counts, step types
``layout``                buffer sizes / chunk counts that do not fit the collective
``bounds``                a step reads or writes outside its rank's buffer
``dependency``            a cross-thread-block dependency that is missing or inert
``connection``            a (sender, receiver, channel) without exactly one sending and
                          one receiving thread block, or with unequal send/receive counts
``mismatch``              a receive whose count differs from the matching send's
``uninitialized``         a step reads a chunk that was never written
``deadlock``              no thread block can progress before all have finished
``unmatched``             data sent that nobody received
``race``                  two unordered steps of one rank touch overlapping chunks,
                          at least one of them writing
``postcondition``         an output chunk does not hold what the collective requires
``limit``                 a runtime (dialect) limit is exceeded
========================  ===========================================================
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Violation:
    """One thing wrong with an algorithm; ``str()`` is one line ``rank 3 tb 2 step 5: ...``.

    ``tb`` is the thread block's ``id`` (as written in the XML), ``step`` the step's
    index within it.
    """

    rank: int | None
    tb: int | None
    step: int | None
    kind: str
    message: str

    @property
    def where(self) -> str:
        parts = []
        for label, value in (("rank", self.rank), ("tb", self.tb), ("step", self.step)):
            if value is not None:
                parts.append(f"{label} {value}")
        return " ".join(parts) if parts else "algorithm"

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "tb": self.tb, "step": self.step, "kind": self.kind,
                "message": self.message}


@dataclass
class VerificationReport:
    """The verifier's answer. ``ok`` is True exactly when ``violations`` is empty.

    ``modes`` are the kinds of call checked (``"out-of-place"``, ``"in-place"``) and
    ``failed_modes`` those in which something is wrong.
    """

    ok: bool
    violations: list[Violation] = field(default_factory=list)
    postcondition_checked: bool = False
    notes: list[str] = field(default_factory=list)
    modes: list[str] = field(default_factory=list)
    failed_modes: list[str] = field(default_factory=list)

    @property
    def modes_text(self) -> str:
        """``in-place``, ``out-of-place and in-place``, or ``no call``."""
        return " and ".join(self.modes) or "no call"

    def summary(self) -> str:
        """One line: verdict (with the modes checked), first violation or what was proven."""
        if self.ok:
            what = "postcondition holds" if self.postcondition_checked else "no postcondition known"
            return f"OK ({self.modes_text}): {what}; no deadlock, no race, structure valid"
        counts = Counter(v.kind for v in self.violations)
        kinds = ", ".join(f"{n} {k}" for k, n in counts.most_common())
        return f"INCORRECT ({kinds}): {self.violations[0]}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "modes": list(self.modes),
            "failed_modes": list(self.failed_modes),
            "violations": [v.to_dict() for v in self.violations],
            "postcondition_checked": self.postcondition_checked,
            "notes": list(self.notes),
        }


class ViolationLog:
    """Collects violations, keeping at most ``per_kind`` of each kind (the rest counted).

    Big algorithms with one systematic mistake would otherwise produce millions of
    identical lines; the count of the ones left out goes into the notes.
    """

    def __init__(self, per_kind: int = 20, prefix: str = ""):
        self.per_kind = per_kind
        self.prefix = prefix
        self.items: list[Violation] = []
        self.counts: Counter[str] = Counter()

    def add(self, rank: int | None, tb: int | None, step: int | None, kind: str, message: str) -> None:
        self.counts[kind] += 1
        if self.counts[kind] <= self.per_kind:
            self.items.append(Violation(rank, tb, step, kind, self.prefix + message))

    def extend(self, violations: list[Violation]) -> None:
        for v in violations:
            self.add(v.rank, v.tb, v.step, v.kind, v.message)

    def omitted_notes(self) -> list[str]:
        return [f"{n - self.per_kind} more '{k}' violations not listed"
                for k, n in sorted(self.counts.items()) if n > self.per_kind]

    def __len__(self) -> int:
        return sum(self.counts.values())
