"""``arborcc bench`` shows the slowest calls beside the median: p99 and max of the slowest
rank's time per call, in the table and in ``--json``."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import asdict

from hypothesis import given, settings
from hypothesis import strategies as st
from pytest import approx
from unittest import mock

from arborcc.bench import cli as bench_cli
from arborcc.bench.protocol import Row, Spec, rows_from_timings
from arborcc.bench.report import Machine, table
from arborcc.cli.main import main


def per_rank_times(spec: Spec, times_of_rank) -> list[dict]:
    """Every rank's results with the call times ``times_of_rank(rank)`` for every size and mode."""
    return [{f"{size}:{int(inplace)}": {"times": times_of_rank(r), "wrong": 0}
             for size in spec.sizes for inplace in (False, True)} for r in range(spec.ranks)]


def test_one_slow_call_on_one_rank_sets_the_max_and_leaves_the_median():
    spec = Spec(ranks=4, sizes=[4096], iters=20)
    slow = 5966e-6

    def times(rank):
        t = [10e-6] * 20
        if rank == 3:
            t[7] = slow
        return t

    for row in rows_from_timings("arborcc", spec, per_rank_times(spec, times)):
        assert row.time_us == approx(10.0)
        assert row.max_us == approx(slow * 1e6)
        assert 10.0 < row.p99_us <= row.max_us


def test_the_slowest_rank_of_each_call_makes_the_call_time():
    """Rank 0 slow in even calls, rank 1 in odd ones: every call is slow, and the median says so."""
    spec = Spec(ranks=2, sizes=[4096], iters=10)
    rows = rows_from_timings("arborcc", spec, per_rank_times(
        spec, lambda rank: [(50e-6 if (i + rank) % 2 == 0 else 5e-6) for i in range(10)]))
    assert all(r.time_us == approx(50.0) and r.max_us == approx(50.0) and r.p99_us == approx(50.0) for r in rows)


def test_the_table_has_p99_and_max_columns_in_both_halves():
    spec = Spec(ranks=2, sizes=[4096])
    rows = rows_from_timings("arborcc", spec, per_rank_times(spec, lambda r: [1e-5] * 19 + [2e-3]))
    text = table(spec, "arborcc", rows, Machine())
    header = next(line for line in text.splitlines() if "#wrong" in line).split()
    assert header.count("p99") == 2 and header.count("max") == 2
    assert header.index("p99") == header.index("time") + 1 and header.index("max") == header.index("time") + 2
    values = next(line for line in text.splitlines() if line.startswith("  ")).split()
    time_col = header.index("time") - 1  # the header line starts with "#"
    time, p99, slowest = (float(v) for v in values[time_col:time_col + 3])
    assert time == 10.0 and 10.0 < p99 <= 2000.0 and slowest == 2000.0


def test_a_row_that_did_not_run_has_no_slowest_call():
    spec = Spec(ranks=2, sizes=[4096])
    entries = [{f"4096:{m}": {"error": "boom"} for m in (0, 1)} for _ in range(2)]
    for row in rows_from_timings("arborcc", spec, entries):
        assert row.p99_us is None and row.max_us is None


def test_bench_json_rows_carry_p99_and_max():
    def stand_in(backend: str, spec: Spec) -> list[Row]:
        return rows_from_timings(backend, spec, per_rank_times(spec, lambda r: [1e-5] * (spec.iters - 1) + [1e-3]))

    out = io.StringIO()
    with mock.patch.object(bench_cli, "run_backend", stand_in), contextlib.redirect_stdout(out):
        assert main(["bench", "-b", "4K", "-e", "16K", "--json", "--no-membw"]) == 0
    for row in json.loads(out.getvalue())["results"]:
        assert row["time_us"] == approx(10.0) and row["max_us"] == approx(1000.0) and 10.0 < row["p99_us"] <= 1000.0


@settings(max_examples=80, deadline=None)
@given(ranks=st.integers(1, 16), iters=st.integers(1, 30), data=st.data())
def test_any_call_times_give_ordered_finite_columns_or_a_failed_row(ranks, iters, data):
    """Median <= p99 <= max, all finite, for any times the ranks report; a row whose median
    is not a positive time fails instead (the JSON never holds NaN)."""
    spec = Spec(ranks=ranks, sizes=[4096], iters=iters)
    times = st.lists(st.floats(0.0, 10.0, allow_nan=False), min_size=iters, max_size=iters)
    per_rank = [{f"4096:{m}": {"times": data.draw(times), "wrong": 0} for m in (0, 1)} for _ in range(ranks)]
    for row in rows_from_timings("arborcc", spec, per_rank):
        json.dumps(asdict(row), allow_nan=False)
        if row.failed:
            assert row.time_us is None and row.max_us is None
        else:
            assert 0 < row.time_us <= row.p99_us * (1 + 1e-12) and row.p99_us <= row.max_us


def test_a_median_below_the_clock_resolution_fails_the_row_instead_of_an_infinite_busbw():
    spec = Spec(ranks=1, sizes=[4096], iters=1)
    per_rank = [{f"4096:{m}": {"times": [2.2250738585072014e-308], "wrong": 0} for m in (0, 1)}]
    for row in rows_from_timings("arborcc", spec, per_rank):
        json.dumps(asdict(row), allow_nan=False)
        assert row.failed and row.busbw_gbps is None
