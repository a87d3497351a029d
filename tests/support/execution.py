"""Running an algorithm on the numpy reference executor and comparing with numpy."""

from __future__ import annotations

import numpy as np

from arborcc.ir.aliasing import declared_modes
from arborcc.ir.model import Algorithm
from arborcc.ir.reference import make_inputs, reference, run


def alltonext_reference(inputs: list[np.ndarray]) -> list[np.ndarray | None]:
    """What AllToNext (a custom collective) leaves: rank r holds rank r-1's input."""
    return [None] + [inputs[r - 1].copy() for r in range(1, len(inputs))]


def assert_executes(algo: Algorithm, expected=None, slots: int = 2, seed: int = 0, elems: int = 3,
                    modes=None) -> None:
    """Run ``algo`` on random inputs as a call in each of ``modes`` (default: every mode it
    claims) and compare every rank's result with the reference (``expected(inputs)`` when
    given, else the collective's numpy reference)."""
    inputs = make_inputs(algo, elems, seed)
    want = expected(inputs) if callable(expected) else reference(algo, inputs)
    for mode in declared_modes(algo) if modes is None else modes:
        outputs = run(algo, inputs, slots=slots, mode=mode)
        for r, (got, exp) in enumerate(zip(outputs, want)):
            if exp is None:
                continue
            if got.shape != exp.shape:
                raise AssertionError(f"{mode.label}: rank {r}: result has {got.shape[0]} chunks, "
                                     f"expected {exp.shape[0]}")
            if not np.allclose(got, exp, equal_nan=False):
                bad = [i for i in range(exp.shape[0]) if not np.allclose(got[i], exp[i])]
                raise AssertionError(f"{mode.label}: rank {r}: result chunks {bad[:10]} differ from the reference")
