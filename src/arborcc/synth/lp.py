"""An LP that grows between solves (rows for cutting planes, columns for column
generation), solved warm by HiGHS through highspy.

scipy's ``linprog`` rebuilds and re-solves from scratch on every call, which costs
milliseconds even for a handful of rows; synthesis re-solves its master problems tens
of times per topology, each time after adding a few cuts or trees, so the previous
basis is almost optimal and the dual simplex needs a few pivots (Huangfu & Hall,
"Parallelizing the dual revised simplex method", 2018, is the solver behind both).
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass

import numpy as np

from arborcc.errors import SolverLimitError, SynthesisError

INF = float("inf")
#: the simplex work one LP may do over all its solves, in iterations x (rows + columns) at
#: each solve (an iteration's cost grows with the LP): a count, not a time, so what a solve
#: returns does not depend on the machine's load. The LPs of
#: ``benchmarks/synthesis/xml_snapshot.py`` take under 1e7 (at most 865 iterations);
#: all-gather trees on 8 x DGX A100 (64 roots) 1.5e8, about 20 CPU seconds; 16 x DGX A100
#: needs more and is refused after about 25 CPU seconds (a 30 s clock limit did before).
WORK_LIMIT = 200_000_000


@dataclass
class Solution:
    """Column values, row duals (d objective / d row bound) and the objective."""

    x: np.ndarray
    row_dual: np.ndarray
    objective: float


@contextlib.contextmanager
def quiet_stdout():
    """Silence the C library's stdout: highspy prints its banner when the first solver is
    made (before any option can turn output off), and the HiGHS bundled with scipy a
    debug line from its MIP heuristics ("transformNewIntegerFeasibleSolution") even with
    disp off - either would corrupt ``arborcc synth --json``."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError):  # no real stdout (embedded interpreters)
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _packed(entries, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(starts, index, value)``: ``count`` lines of ``(indices, values)`` pairs (or
    None, an empty line) laid end to end, as HiGHS takes them."""
    lengths = np.zeros(count, dtype=np.int64)
    index: list = []
    value: list = []
    for j, line in enumerate(entries or ()):
        if line is not None:
            idx, val = line
            lengths[j] = len(idx)
            index.append(np.asarray(idx, dtype=np.int32))
            value.append(np.asarray(val, dtype=float))
    starts = np.zeros(count, dtype=np.int32)
    np.cumsum(lengths[:-1], out=starts[1:])
    if not index:
        return starts, np.zeros(0, dtype=np.int32), np.zeros(0)
    return starts, np.concatenate(index), np.concatenate(value)


class GrowingLP:
    """``minimize c x`` subject to ``row_lo <= A x <= row_hi`` and column bounds, with
    rows and columns added between solves. Each solve starts from the last basis; all of
    them together may do ``work_limit`` simplex work (:data:`WORK_LIMIT`)."""

    def __init__(self, name: str, work_limit: int = WORK_LIMIT):
        import highspy

        self.name = name
        self.work_limit = work_limit
        self.work = 0
        with quiet_stdout():
            self._h = highspy.Highs()
        self._h.setOptionValue("output_flag", False)
        self.num_cols = 0
        self.num_rows = 0

    def add_cols(self, cost, lower, upper, entries=None) -> int:
        """Add columns; ``entries[j]`` is ``(row indices, values)`` of column j in the
        existing rows (or None). Returns the index of the first new column."""
        return self.add_packed_cols(cost, lower, upper, *_packed(entries, len(cost)))

    def add_packed_cols(self, cost, lower, upper, starts, index, value) -> int:
        """Add columns given compressed: column j's entries are ``index[starts[j]:
        starts[j + 1]]`` (rows) and ``value[...]``. Returns the index of the first new column."""
        k = len(cost)
        if k == 0:
            return self.num_cols
        first = self.num_cols
        self._h.addCols(k, np.asarray(cost, dtype=float), np.asarray(lower, dtype=float),
                        np.asarray(upper, dtype=float), len(index), np.asarray(starts, dtype=np.int32),
                        np.asarray(index, dtype=np.int32), np.asarray(value, dtype=float))
        self.num_cols += k
        return first

    def add_rows(self, lower, upper, entries) -> int:
        """Add rows ``lower[i] <= sum entries[i] <= upper[i]``; ``entries[i]`` is
        ``(column indices, values)``. Returns the index of the first new row."""
        starts, index, value = _packed(entries, len(lower))
        first = self.num_rows
        self._h.addRows(len(starts), np.asarray(lower, dtype=float), np.asarray(upper, dtype=float), len(index),
                        starts, index, value)
        self.num_rows += len(starts)
        return first

    def add_row(self, lower: float, upper: float, cols, vals) -> int:
        """Add ``lower <= sum vals[i] x[cols[i]] <= upper``; returns its index."""
        cols = np.asarray(cols, dtype=np.int32)
        self._h.addRow(float(lower), float(upper), len(cols), cols, np.asarray(vals, dtype=float))
        self.num_rows += 1
        return self.num_rows - 1

    def solve(self) -> Solution:
        """Solve (warm); raises SolverLimitError when the LP's simplex work reaches its
        ``work_limit``, SynthesisError if the LP is infeasible or unbounded."""
        import highspy

        h = self._h
        size = self.num_rows + self.num_cols
        h.setOptionValue("simplex_iteration_limit", max((self.work_limit - self.work) // max(size, 1), 0))
        h.run()
        self.work += h.getInfo().simplex_iteration_count * size
        status = h.getModelStatus()
        if status == highspy.HighsModelStatus.kIterationLimit:
            raise SolverLimitError(f"{self.name}: LP used its simplex work limit of {self.work_limit:.3g} "
                                   f"(iterations x (rows + columns))")
        if status != highspy.HighsModelStatus.kOptimal:
            raise SynthesisError(f"{self.name}: LP ended {h.modelStatusToString(status)}")
        sol = h.getSolution()
        return Solution(np.array(sol.col_value), np.array(sol.row_dual), h.getInfo().objective_function_value)
