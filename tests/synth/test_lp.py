"""The warm-started LP wrapper against scipy's linprog, as rows and columns are added."""

import numpy as np
import pytest
from scipy.optimize import linprog

from arborcc.errors import SolverLimitError, SynthesisError
from arborcc.synth.lp import INF, GrowingLP


def test_growing_rows_and_columns_match_a_cold_solve():
    rng = np.random.default_rng(5)
    A = rng.uniform(0.1, 1.0, (6, 4))
    c = -rng.uniform(0.5, 2.0, 4)
    lp = GrowingLP("test")
    lp.add_cols(c, np.zeros(4), np.full(4, INF))
    for i in range(3):
        lp.add_row(-INF, 1.0, range(4), A[i])
    assert lp.solve().objective == pytest.approx(linprog(c, A_ub=A[:3], b_ub=np.ones(3)).fun)
    lp.add_rows(np.full(3, -INF), np.ones(3), [(range(4), A[i]) for i in range(3, 6)])  # cuts
    assert lp.solve().objective == pytest.approx(linprog(c, A_ub=A, b_ub=np.ones(6)).fun)
    col = rng.uniform(0.1, 1.0, 6)  # a new column (column generation)
    lp.add_cols([-3.0], [0.0], [INF], [(range(6), col)])
    sol = lp.solve()
    want = linprog(np.append(c, -3.0), A_ub=np.column_stack([A, col]), b_ub=np.ones(6))
    assert sol.objective == pytest.approx(want.fun)
    # duals: d objective / d bound, as scipy's marginals
    assert sol.row_dual == pytest.approx(want.ineqlin.marginals, abs=1e-9)


def test_infeasible_and_unbounded_are_errors():
    lp = GrowingLP("bad")
    lp.add_cols([1.0], [0.0], [INF])
    lp.add_row(-INF, -1.0, [0], [1.0])  # x <= -1 with x >= 0
    with pytest.raises(SynthesisError, match="bad: LP ended Infeasible"):
        lp.solve()
    free = GrowingLP("free")
    free.add_cols([-1.0], [0.0], [INF])
    with pytest.raises(SynthesisError, match="free: LP ended Unbounded"):
        free.solve()


def test_solves_stop_at_their_work_limit():
    rng = np.random.default_rng(5)
    A = rng.uniform(0.1, 1.0, (12, 8))
    c = -rng.uniform(0.5, 2.0, 8)
    lp = GrowingLP("capped", work_limit=20)  # one iteration on 12 rows and 8 columns
    lp.add_cols(c, np.zeros(8), np.full(8, INF))
    lp.add_rows(np.full(12, -INF), np.ones(12), [(range(8), A[i]) for i in range(12)])
    with pytest.raises(SolverLimitError, match="capped: LP used its simplex work limit of 20"):
        lp.solve()
    free = GrowingLP("free")
    free.add_cols(c, np.zeros(8), np.full(8, INF))
    free.add_rows(np.full(12, -INF), np.ones(12), [(range(8), A[i]) for i in range(12)])
    assert free.solve().objective == pytest.approx(linprog(c, A_ub=A, b_ub=np.ones(12)).fun)
    assert 0 < free.work <= 20 * 12  # iterations x (rows + columns): a handful of iterations
