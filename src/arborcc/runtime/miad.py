"""Online slice-size tuning by multiplicative increase, additive decrease (MIAD).

Blink (Wang et al., "Blink: Fast and Generic Collectives for Distributed ML", MLSys
2020, section 4.2.1): start with a small chunk, multiply it while the measured
throughput grows; once it drops, step back additively until it stops improving, and
keep the best size seen. A tuner converges after at most ``log_factor(max/min)``
increases plus ``decrease_steps`` decreases; after that it stays put.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class MIADTuner:
    """Proposes a slice size (bytes) per call and learns from the measured throughput."""

    initial: int = 64 * 1024
    factor: float = 2.0
    minimum: int = 4 * 1024
    maximum: int = 64 * 1024 * 1024
    decrease_steps: int = 4  #: the additive step is 1/decrease_steps of the last increase
    tolerance: float = 0.03  #: relative gain that counts as an improvement
    value: int = 0
    phase: str = "increase"  #: increase, decrease, steady
    best_value: int = 0
    best_throughput: float = 0.0
    history: list[tuple[int, float]] = field(default_factory=list)
    _step: int = 0
    _anchor: int = 0

    def __post_init__(self) -> None:
        self.value = min(max(self.initial, self.minimum), self.maximum)

    @property
    def converged(self) -> bool:
        return self.phase == "steady"

    def observe(self, throughput: float) -> int:
        """Record the throughput of a call at ``value``; returns the size for the next call."""
        previous = self.history[-1][1] if self.history else 0.0
        self.history.append((self.value, throughput))
        improved = throughput > self.best_throughput * (1 + self.tolerance)
        if throughput > self.best_throughput:
            self.best_throughput, self.best_value = throughput, self.value
        if self.phase == "increase":
            if improved and self.value < self.maximum:
                self.value = min(int(self.value * self.factor), self.maximum)
            elif improved or self.value <= self.best_value:
                self.phase, self.value = "steady", self.best_value
            else:  # overshot: walk back towards the best size in additive steps
                self._anchor = self.best_value
                self._step = max(1, (self.value - self.best_value) // self.decrease_steps)
                self.phase = "decrease"
                self.value = max(self.value - self._step, self.minimum)
        elif self.phase == "decrease":
            # keep stepping down while each step still helps and the anchor is not reached
            if throughput > previous * (1 + self.tolerance) and self.value - self._step > self._anchor:
                self.value -= self._step
            else:
                self.phase, self.value = "steady", self.best_value
        return self.value
