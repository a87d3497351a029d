"""``arborcc bench`` and ``arborcc run`` never print meaningless numbers: a flag no back-end
can run is refused in one line before any process starts, a row that fails or a check
that finds wrong values fails the command, and no NaN or infinity reaches the table or
the JSON. Most cases run in-process with a stand-in back-end (the checks happen before
any rank starts); the cases of the command line itself run ``arborcc`` as a subprocess
(:mod:`support.cli_runs`)."""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import sys
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import arborcc.bench.cli as bench_cli
from arborcc.bench.memory_bandwidth import CACHE_MULTIPLE, busbw_bound, last_level_cache, min_traffic
from arborcc.bench.protocol import Row, Spec, rows_from_timings
from arborcc.bench.report import Machine, json_object, memory_busbw, table
from arborcc.cli.main import build_parser, main
from arborcc.errors import InputError
from arborcc.sizes import MAX_SIZES
from support.cli_runs import arborcc, refused

QUIET = ["--no-membw"]


# ------------------------------------------------------------------ helpers
def timings(spec: Spec, seconds: float = 1e-5, wrong: int = 0, error: str | None = None) -> list[dict]:
    """Every rank's results as the back-ends report them, all calls taking ``seconds``."""
    entry = {"error": error} if error else {"times": [seconds] * min(spec.iters, 3), "wrong": wrong}
    return [{f"{size}:{int(inplace)}": entry for size in spec.sizes for inplace in (False, True)}
            for _ in range(spec.ranks)]


def stand_in(seconds: float = 1e-5, wrong: dict | None = None, error: dict | None = None, seen: list | None = None):
    """A back-end that starts nothing: rows from made-up timings (``wrong``/``error``: per back-end)."""
    def run_backend(backend: str, spec: Spec) -> list[Row]:
        if seen is not None:
            seen.append((backend, spec))
        return rows_from_timings(backend, spec, timings(spec, seconds, (wrong or {}).get(backend, 0),
                                                        (error or {}).get(backend)))
    return run_backend


def bench_in_process(*args: str, backend=None) -> tuple[int, str, str]:
    """``arborcc bench ARGS`` in this process with ``backend`` standing in for the real ones."""
    out, err = io.StringIO(), io.StringIO()
    with mock.patch.object(bench_cli, "run_backend", backend or stand_in()), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["bench", *args])
    return code, out.getvalue(), err.getvalue()


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def request(*args: str):
    return bench_cli.bench_request(build_parser().parse_args(["bench", *args]))


# ------------------------------------------------------------------ the command line refuses
@pytest.mark.parametrize("args, names", [
    (["--iters", "0"], r"--iters: .*at least 1, got 0"),
    (["-w", "-1"], r"-w: .*at least 0, got -1"),
    (["-o", "avg", "-d", "int32"], r"-o avg -d int32: avg .*floating-point"),
    (["-r", "5", "--collective", "broadcast"], r"-r: root 5 is not a rank of 2"),
    (["-r", "-1"], r"-r: root -1 is not a rank"),
    (["-n", "65"], r"-n: 65 ranks: .*at most 64"),
    (["-b", "inf"], r"-b"),
    (["-b", ""], r"-b"),
    (["-e", "1e400"], r"-e"),
    (["-f", "1"], r"-f: .*greater than 1"),
    (["-f", "0"], r"-f: .*greater than 1"),
    (["--timeout", "nan"], r"--timeout: .*finite .* above 0, got nan"),
    (["--backend", "mpi", "-d", "bfloat16"], r"--backend mpi -d bfloat16"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_bench_refuses_a_flag_no_backend_runs_in_one_line(tmp_path, args, names):
    refused(arborcc("bench", *args, *QUIET, cwd=tmp_path), names)


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_run_refuses_a_timeout_that_is_not_finite_and_positive(tmp_path, value):
    (tmp_path / "s.py").write_text("raise SystemExit(5)\n")
    refused(arborcc("run", "-n", "1", "--timeout", value, "s.py", cwd=tmp_path), r"--timeout: .*got")


@pytest.mark.parametrize("value", ["inf", "-1", "0"])
def test_bench_refuses_a_timeout_that_is_not_finite_and_positive(value):
    with pytest.raises(InputError, match=r"finite number of seconds above 0"):
        request("--timeout", value)


def test_bench_refuses_a_step_factor_that_makes_too_many_sizes():
    with pytest.raises(InputError, match=rf"-b/-e/-f: .*more than {MAX_SIZES}"):
        request("-b", "1", "-e", "1T", "-f", "1.0001")


def test_bench_refuses_a_root_the_algorithm_file_does_not_have(tmp_path):
    from arborcc.ir.msccl_xml import write_msccl_xml
    from arborcc.library import LIBRARY

    path = tmp_path / "ring.xml"
    path.write_text(write_msccl_xml(LIBRARY["ring-allreduce"](ranks=3, channels=1).algorithm))
    with pytest.raises(InputError, match=r"-r: root 3 is not a rank of 3"):
        request("--xml", str(path), "-r", "3")


@pytest.mark.parametrize("collective", ["reduce", "alltoall"])
def test_bench_runs_every_collective_on_gloo_or_refuses_it(collective):
    """gloo runs the rooted reduce and the all-to-all itself (they once gave rows of n/a)."""
    spec = request("--backend", "gloo", "--collective", collective).spec
    assert spec.collective == collective


# ------------------------------------------------------------------ the data plane's rank limit
def test_bench_knows_the_data_planes_rank_limit():
    """One definition: the limit comes from the native module (segment_layout.hpp's
    MAX_RANKS), so -n one over it is refused before a rank starts, -n at it is not."""
    from arborcc.runtime.native import MAX_RANKS

    assert request("-n", str(MAX_RANKS)).spec.ranks == MAX_RANKS
    with pytest.raises(InputError, match=rf"^-n: {MAX_RANKS + 1} ranks: .*at most {MAX_RANKS}$"):
        request("-n", str(MAX_RANKS + 1))
    # gloo and MPI do not run on the data plane: only the local-ranks limit holds for them
    assert request("-n", str(MAX_RANKS + 1), "--backend", "mpi").spec.ranks == MAX_RANKS + 1


# ------------------------------------------------------------------ rows that fail, values that are wrong
def test_bench_fails_naming_the_backend_when_its_rows_do_not_run():
    code, out, err = bench_in_process("-b", "4K", "-e", "8K", *QUIET, backend=stand_in(error={"arborcc": "boom"}))
    assert code == 1
    assert lines(err) == ["arborcc: error: --backend arborcc: 4 of 4 rows did not run: boom"]
    assert "# note: boom" in out


def test_bench_fails_when_the_mpi_baselines_check_finds_wrong_values():
    code, out, err = bench_in_process("-b", "4K", "-e", "4K", "--backend", "arborcc", "--backend", "mpi", *QUIET,
                                      backend=stand_in(wrong={"mpi": 3}))
    assert code == 1
    assert lines(err) == ["arborcc: error: --backend mpi: the check found 12 wrong values: its timings are not of a "
                          "correct collective"]


def test_bench_json_has_no_nan_when_the_timer_measures_nothing():
    """A call timed at 0 s would make algbw infinite: the row fails and says why instead."""
    code, out, err = bench_in_process("-b", "4K", "-e", "4K", "--json", *QUIET, backend=stand_in(seconds=0.0))
    assert code == 1 and "rows did not run: the timer measured 0 s per call" in err
    result = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    assert all(r["failed"] and r["time_us"] is None for r in result["results"])


def test_bench_table_and_json_hold_only_finite_numbers():
    spec = Spec(sizes=[4096, 1 << 30], ranks=2)
    rows = rows_from_timings("arborcc", spec, timings(spec, 1e-3))
    machine = Machine(membw=20e9, cache=32 << 20)
    text = table(spec, "arborcc", rows, machine)
    assert not re.search(r"\b(nan|inf)\b", text, re.I)
    json.dumps(json_object(spec, rows, machine, ["arborcc"]), allow_nan=False)


# ------------------------------------------------------------------ the MPI baseline is what it claims
FAKE_MPIEXEC = """#!{python}
import os, subprocess, sys
n, command = int(sys.argv[2]), sys.argv[3:]
env = {{k: v for k, v in os.environ.items() if not k.startswith(("PMI", "HYDRA", "MPI"))}}
procs = [subprocess.Popen(command, env=env) for _ in range(n)]
sys.exit(max(p.wait(timeout=60) for p in procs))
"""


def test_bench_refuses_an_mpi_baseline_whose_ranks_are_each_alone(tmp_path):
    """An mpiexec that starts -n processes which each see an MPI world of their own (another
    MPI's launcher) once "all-reduced" 16 MB in 1.3 us: refused in one line."""
    pytest.importorskip("mpi4py")
    fake = tmp_path / "mpiexec"
    fake.write_text(FAKE_MPIEXEC.format(python=sys.executable))
    fake.chmod(0o755)
    out, err = io.StringIO(), io.StringIO()
    with mock.patch("arborcc.bench.backends.mpiexec_path", lambda: str(fake)), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["bench", "--backend", "mpi", "-b", "16M", "-e", "16M", "-c", "0", "--json", "--timeout", "120",
                     *QUIET])
    assert code == 2
    assert len(lines(err.getvalue())) == 1
    assert re.match(r"arborcc: error: --backend mpi: .* do not share one MPI world of 2", err.getvalue())
    assert out.getvalue() == ""


# ------------------------------------------------------------------ too many ranks for the cores
def test_bench_warns_once_when_ranks_outnumber_the_cores():
    with mock.patch("os.sched_getaffinity", lambda pid: {0}):
        code, _, err = bench_in_process("-n", "2", "-b", "4K", "-e", "4K", "--backend", "arborcc", "--backend",
                                        "gloo", "--backend", "mpi", *QUIET)
    assert code == 0
    assert lines(err) == ["arborcc: warning: 2 ranks on 1 CPU core available to this job: ranks take turns on the "
                          "cores, so timings measure the scheduler"]


def test_bench_does_not_warn_when_every_rank_has_a_core():
    with mock.patch("os.sched_getaffinity", lambda pid: {0, 1, 2, 3}):
        code, _, err = bench_in_process("-n", "4", "-b", "4K", "-e", "4K", *QUIET)
    assert code == 0 and err == ""


def test_run_warns_once_when_ranks_outnumber_the_cores(tmp_path, capfd):
    script = tmp_path / "ok.py"
    script.write_text("")
    with mock.patch("os.sched_getaffinity", lambda pid: {0}):
        assert main(["run", "-n", "2", "--timeout", "60", str(script)]) == 0
    err = capfd.readouterr().err
    assert lines(err) == ["arborcc: warning: 2 ranks on 1 CPU core available to this job: ranks take turns on the "
                          "cores, so timings measure the scheduler"]


# ------------------------------------------------------------------ %mem: only where it means something
def test_memory_column_is_shown_only_beyond_the_last_level_cache():
    spec = Spec(sizes=[4096, 64 << 20], ranks=2, collective="allgather")
    rows = rows_from_timings("arborcc", spec, timings(spec))
    cache = 32 << 20
    machine = Machine(membw=20e9, cache=cache)
    for row in rows:
        beyond = min_traffic("allgather", 2, row.size, row.inplace) >= CACHE_MULTIPLE * cache
        assert (memory_busbw(spec, row, machine) is not None) == beyond
    assert memory_busbw(spec, rows[-1], Machine(membw=20e9, cache=None)) is None  # cache unknown: not shown


@pytest.mark.parametrize("collective", ["allreduce", "allgather", "reducescatter", "broadcast", "reduce",
                                        "alltoall"])
@pytest.mark.parametrize("ranks", [1, 2, 3, 8])
def test_compulsory_traffic_is_what_every_implementation_must_move(collective, ranks):
    """Every input byte read once and every output byte written once: no implementation
    moves less, so the model never asks more of memory than the call needs."""
    size = 1 << 20
    reads = {"allreduce": ranks, "allgather": 1, "reducescatter": ranks, "broadcast": 1, "reduce": ranks,
             "alltoall": ranks}[collective] * size
    writes = {"allreduce": ranks, "allgather": ranks, "reducescatter": 1, "broadcast": ranks, "reduce": 1,
              "alltoall": ranks}[collective] * size
    assert min_traffic(collective, ranks, size) == reads + writes
    bound = busbw_bound(collective, ranks, size, 1e10)
    assert math.isfinite(bound) and bound >= 0


def test_last_level_cache_is_read_from_sysfs():
    if not Path("/sys/devices/system/cpu/cpu0/cache").exists():
        pytest.skip("no cache description in sysfs here")
    cache = last_level_cache()
    assert cache is not None and cache >= 1 << 16


# ------------------------------------------------------------------ every flag at random
FLAG_VALUES = {
    "-n": st.one_of(st.integers(-2, 300).map(str), st.sampled_from(["", "x", "2.5", "1e3"])),
    "-b": st.sampled_from(["1", "4K", "64K", "1M", "1.5M", "0", "-4K", "inf", "nan", "", "1e400", "1T", "8E"]),
    "-e": st.sampled_from(["1", "4K", "64K", "1M", "2G", "64G", "0", "inf", "", "1e400", "9223372036854775807"]),
    "-f": st.one_of(st.sampled_from(["2", "4", "1.5", "1", "0", "-2", "nan", "inf", "", "x", "1.0001"]),
                    st.floats(allow_nan=True, allow_infinity=True).map(repr)),
    "-o": st.sampled_from(["sum", "prod", "min", "max", "avg", "xor"]),
    "-d": st.sampled_from(["float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8", "int8"]),
    "-r": st.integers(-3, 300).map(str),
    "-w": st.integers(-3, 12).map(str),
    "--iters": st.one_of(st.integers(-3, 12), st.integers(10**6, 10**12)).map(str),
    "--timeout": st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr),
                           st.sampled_from(["0", "-1", "1e-9", "60"])),
    "--collective": st.sampled_from(["allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall",
                                     "gather", "bogus"]),
    "--backend": st.sampled_from(["arborcc", "gloo", "mpi", "nccl"]),
}


@st.composite
def bench_flags(draw) -> list[str]:
    chosen = draw(st.lists(st.sampled_from(sorted(FLAG_VALUES)), unique=True, max_size=6))
    argv = []
    for flag in chosen:
        argv.append(f"{flag}={draw(FLAG_VALUES[flag])}")  # flag=value: a value may start with '-'
    return argv


@settings(max_examples=200, deadline=None)
@given(bench_flags())
def test_bench_flags_end_in_sane_rows_or_one_line(argv):
    """Random values of every flag: exit 0 with sane rows (finite, positive, the sizes of
    the sweep, a root that is a rank), or exit 2 with one line - never a traceback, never
    a back-end started for a request it cannot run."""
    seen: list[tuple[str, Spec]] = []
    code, out, err = bench_in_process(*argv, "--json", *QUIET, backend=stand_in(seen=seen))
    event(f"exit {code}")
    if code == 2:
        assert len(lines(err)) == 1 and "Traceback" not in err, err
        assert out == "" and not seen
        return
    assert code == 0, (code, err)
    result = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    for _, spec in seen:
        assert 1 <= spec.ranks and spec.iters >= 1 and spec.warmup >= 0
        assert 0 <= spec.root < spec.ranks
        assert math.isfinite(spec.timeout) and spec.timeout > 0
        assert spec.sizes == sorted(set(spec.sizes)) and spec.sizes[0] >= 1
    assert result["results"]
    for row in result["results"]:
        assert row["time_us"] > 0 and row["algbw_gbps"] > 0 and row["busbw_gbps"] >= 0, row
        assert row["wrong"] in (0, None) and not row["failed"]
