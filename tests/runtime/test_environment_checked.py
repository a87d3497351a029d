"""Every environment variable the runtime and the torch backend read is checked in one place
(arborcc.runtime.environment): a bad value is one InputError naming the variable and the
value, before any rank waits for another; `arborcc run` and `arborcc bench` refuse it in
one line before starting a rank."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborcc.errors import ArborccError, InputError
from arborcc.runtime.communicator import Options, check_start
from arborcc.runtime.environment import (BY_NAME, MAX_RANKS, OPTION_VARIABLES, VARIABLES, check_option,
                                         runtime_settings, variables_markdown)
from arborcc.runtime.launch import run_ranks
from support.cli_runs import arborcc, refused
from support.segments import leftovers, segments

SRC = Path(__file__).resolve().parents[2] / "src" / "arborcc"
LAUNCHED = {"RANK": "0", "WORLD_SIZE": "2"}


def refusal(env: dict) -> str:
    """The one line runtime_settings refuses ``env`` with."""
    with pytest.raises(InputError) as e:
        runtime_settings(env)
    line = str(e.value)
    assert "\n" not in line
    return line


@pytest.mark.parametrize("name, value", [
    ("ARBORCC_TIMEOUT", "nan"), ("ARBORCC_TIMEOUT", "inf"), ("ARBORCC_TIMEOUT", "-1"), ("ARBORCC_TIMEOUT", "0"),
    ("ARBORCC_TIMEOUT", "1e400"), ("ARBORCC_TIMEOUT", "soon"), ("ARBORCC_TIMEOUT", "1e12"),
    ("MASTER_PORT", "99999"), ("MASTER_PORT", "0"), ("MASTER_PORT", "abc"), ("MASTER_PORT", "-5"),
    ("ARBORCC_MASTER_PORT", "65536"), ("ARBORCC_SLICE_BYTES", "1e20"), ("ARBORCC_SLICE_BYTES", "2G"),
    ("ARBORCC_SLICE_BYTES", "1"), ("ARBORCC_SLICE_BYTES", "-4K"), ("ARBORCC_CMA_THRESHOLD", "-1"),
    ("ARBORCC_REDUCE_CMA_THRESHOLD", "nan"), ("ARBORCC_SLOTS", "17"), ("ARBORCC_SLOTS", "0"),
    ("ARBORCC_SLOT_BYTES", "1K"), ("ARBORCC_CHANNELS", "33"), ("ARBORCC_WORKERS", "-2"),
    ("ARBORCC_SPIN_US", "-3"), ("ARBORCC_YIELD_US", "inf"), ("ARBORCC_TUNE", "maybe"), ("ARBORCC_PIN", "2"),
    ("ARBORCC_PUSH", "yes please"), ("ARBORCC_STREAM_BYTES", "-1"), ("ARBORCC_STAGED_BYTES", "1.5"),
    ("ARBORCC_STAGED_SLICE_BYTES", "1K"), ("RANK", "-1"), ("RANK", "one"), ("WORLD_SIZE", "0"),
    ("LOCAL_RANK", "x"), ("LOCAL_WORLD_SIZE", "0"), ("GROUP_RANK", "-1"), ("ARBORCC_HOST", "a\nb"),
    ("MASTER_ADDR", "two words"), ("ARBORCC_PLAN", "/nonexistent/plan"), ("ARBORCC_TOPOLOGY", "/nonexistent.yaml"),
])
def test_a_bad_value_is_one_line_naming_the_variable_and_the_value(name, value):
    env = {**LAUNCHED, name: value}
    line = refusal(env)
    assert line.startswith(f"${name}: "), line
    shown = value if name in ("ARBORCC_PLAN", "ARBORCC_TOPOLOGY") else repr(value)
    assert shown in line, line


@pytest.mark.parametrize("name, value, expected", [
    ("ARBORCC_TIMEOUT", "2.5", 2.5), ("ARBORCC_SLICE_BYTES", "64K", 65536), ("ARBORCC_SLICE_BYTES", "1.5M", 1572864),
    ("ARBORCC_CMA_THRESHOLD", "0", 0), ("ARBORCC_STAGED_BYTES", "0", 0), ("ARBORCC_PIN", "off", False),
    ("ARBORCC_TUNE", "TRUE", True), ("ARBORCC_WORKERS", "0", 0), ("ARBORCC_SPIN_US", "-1", -1.0),
    ("ARBORCC_SLOTS", " 4 ", 4), ("ARBORCC_SLOT_BYTES", "64KiB", 65536),
])
def test_good_values_set_the_options(name, value, expected):
    opts = Options.from_env({name: value})
    assert getattr(opts, BY_NAME[name].option) == expected


def test_an_empty_variable_is_unset():
    assert Options.from_env({"ARBORCC_TIMEOUT": "", "ARBORCC_PIN": " "}) == Options()


@pytest.mark.parametrize("env, needle", [
    ({"RANK": "2", "WORLD_SIZE": "2"}, r"^\$RANK: 2 is not a rank .*WORLD_SIZE=2"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "2"}, r"^\$LOCAL_RANK: 2 .*WORLD_SIZE=2"),
    ({"RANK": "0", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "3"}, r"^\$LOCAL_RANK: .*LOCAL_WORLD_SIZE=2"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "3"}, r"^\$LOCAL_WORLD_SIZE: 3 .*WORLD_SIZE=2"),
])
def test_rank_variables_must_agree(env, needle):
    assert re.search(needle, refusal(env))


@pytest.mark.parametrize("env, needle", [
    ({"WORLD_SIZE": "2"}, r"^\$RANK: not set"),
    ({"RANK": "0"}, r"^\$WORLD_SIZE: not set"),
    ({"RANK": "0", "WORLD_SIZE": str(MAX_RANKS + 1)}, rf"^\$WORLD_SIZE: {MAX_RANKS + 1} ranks: .* at most {MAX_RANKS}"),
    ({**LAUNCHED, "MASTER_ADDR": "192.0.2.7"}, r"^\$MASTER_ADDR: '192\.0\.2\.7' is not a loopback address"),
    ({**LAUNCHED, "MASTER_PORT": "65535"}, r"^\$MASTER_PORT: 65535 leaves no port .*ARBORCC_MASTER_PORT"),
])
def test_the_runtimes_own_rendezvous_needs_a_local_launch(env, needle):
    with pytest.raises(InputError, match=needle):
        runtime_settings(env).local_launch()


def test_the_rendezvous_port_follows_master_port_unless_set():
    assert runtime_settings({**LAUNCHED, "MASTER_PORT": "65535", "ARBORCC_MASTER_PORT": "4000"}).local_launch()[4] == 4000
    assert runtime_settings({**LAUNCHED, "MASTER_PORT": "6000"}).local_launch()[4] == 6001
    assert runtime_settings({**LAUNCHED, "MASTER_ADDR": "localhost"}).local_launch()[3] == "localhost"


@pytest.mark.parametrize("name, value", [("timeout", math.nan), ("timeout", 0), ("slice_bytes", 10**30),
                                         ("slots", 99), ("workers", -7), ("tune", "sometimes"), ("channels", True)])
def test_options_given_in_code_follow_the_same_rules(name, value):
    with pytest.raises(InputError, match=rf"^{name}: "):
        Options.from_env({}, **{name: value})


def test_options_constructed_directly_are_checked_too():
    with pytest.raises(InputError, match=r"^slot_bytes: '100' is out of range"):
        Options(slot_bytes=100)
    assert Options(timeout=30).timeout == 30.0


def test_an_unknown_option_is_named():
    with pytest.raises(InputError, match=r"^colour: unknown runtime option"):
        check_option("colour", "red")


def test_a_segment_too_large_for_the_address_space_names_its_variables():
    opts = Options.from_env({"ARBORCC_SLOT_BYTES": "1G", "ARBORCC_SLOTS": "16"})
    with pytest.raises(InputError, match=r"^\$ARBORCC_SLOT_BYTES, \$ARBORCC_SLOTS: 64\^2 ranks .* TiB segment"):
        check_start(64, opts, "$WORLD_SIZE")
    check_start(2, opts, "$WORLD_SIZE")  # 2 ranks: 2 TiB of address space, fine
    with pytest.raises(InputError, match=r"^world_size: 65 ranks"):
        check_start(65, Options(), "world_size")


def test_every_variable_the_runtime_and_backend_name_is_checked():
    """A name in quotes in src/arborcc/runtime or src/arborcc/torch that looks like an
    environment variable must be one of VARIABLES (or the limits', or the bench's own)."""
    pattern = re.compile(r"[\"'`]((?:ARBORCC|MASTER|LOCAL|GROUP)_[A-Z_]+|RANK|WORLD_SIZE)[\"'`]")
    named = set()
    for folder in ("runtime", "torch"):
        for path in (SRC / folder).glob("*.py"):
            named |= set(pattern.findall(path.read_text()))
    unchecked = {n for n in named if n not in BY_NAME and not n.startswith("ARBORCC_MAX_")}
    assert not unchecked, unchecked


def test_docs_runtime_md_shows_the_table_of_the_code():
    doc = (SRC.parents[1] / "docs" / "runtime.md").read_text()
    assert variables_markdown() in doc
    assert len(variables_markdown().splitlines()) == len(VARIABLES) + 2


# ------------------------------------------------------------------ property tests
def values_for(name: str):
    """Random text, and text close to what the variable takes (numbers, sizes, switches)."""
    numbers = st.one_of(st.integers(-2**70, 2**70).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr),
                        st.sampled_from(["nan", "inf", "-inf", "0", "-1", "1e400", "0x10", "1_000", " 7 ", "+3"]))
    sizes = st.builds(lambda n, u: f"{n}{u}", st.one_of(st.integers(-10, 2**66), st.floats(-1e3, 1e22)),
                      st.sampled_from(["", "K", "M", "G", "T", "KB", "MiB", "X"]))
    switches = st.sampled_from(["1", "0", "on", "off", "TRUE", "no", "2", "maybe", "yes "])
    addresses = st.sampled_from(["localhost", "127.0.0.1", "::1", "10.1.2.3"])
    return st.one_of(st.text(max_size=30), numbers, sizes, switches, addresses)


@pytest.mark.parametrize("name", [v.name for v in VARIABLES if v.name not in ("ARBORCC_PLAN", "ARBORCC_TOPOLOGY")])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_values_give_settings_or_one_error_naming_the_variable(name, data):
    value = data.draw(values_for(name))
    if "\0" in value:
        return  # an environment cannot hold NUL
    env = {**LAUNCHED, name: value}
    try:
        settings_ = runtime_settings(env)
    except InputError as e:
        assert str(e).startswith(f"${name}: ") and "\n" not in str(e), str(e)
        return
    opts = Options.from_settings(settings_)
    if name == "MASTER_ADDR" and value.strip() not in ("localhost", "127.0.0.1", "::1", "10.1.2.3"):
        return  # local_launch would ask the resolver about random names
    try:
        check_start(2, opts, "$WORLD_SIZE")
        settings_.local_launch()
    except InputError as e:  # what only the runtime's own rendezvous needs: still the variable
        assert str(e).startswith(f"${name}: ") and "\n" not in str(e), str(e)
    if name in OPTION_VARIABLES and value.strip():
        chosen = getattr(opts, OPTION_VARIABLES[name].option)
        assert not isinstance(chosen, float) or math.isfinite(chosen)


# ------------------------------------------------------------------ real runs
def allreduce_with(env: dict):
    """A rank: set ``env``, join, all-reduce; the options in force and the sum."""
    from arborcc.runtime.communicator import Communicator

    os.environ.update(env)
    comm = Communicator.from_env()
    try:
        x = np.arange(100_000, dtype=np.float32) + comm.rank
        comm.allreduce(x)
        return comm.options, float(x[1])
    finally:
        comm.close()


def test_two_ranks_run_with_unusual_but_valid_variables():
    before = segments()
    env = {"ARBORCC_TIMEOUT": "20", "ARBORCC_SLOTS": "2", "ARBORCC_SLOT_BYTES": "64K", "ARBORCC_CHANNELS": "2",
           "ARBORCC_CMA_THRESHOLD": "0", "ARBORCC_REDUCE_CMA_THRESHOLD": "0", "ARBORCC_SLICE_BYTES": "4K",
           "ARBORCC_STAGED_BYTES": "0", "ARBORCC_PIN": "off", "ARBORCC_WORKERS": "0", "ARBORCC_SPIN_US": "0"}
    results = run_ranks(allreduce_with, 2, (env,), timeout=60)
    for opts, value in results:
        assert (opts.slots, opts.slot_bytes, opts.channels, opts.cma_threshold, opts.pin) == (2, 65536, 2, 0, False)
        assert value == 2 * 1 + 1  # element 1: 1 on rank 0, 2 on rank 1
    assert not leftovers(before)


def test_two_ranks_refuse_a_bad_variable_before_waiting_for_each_other():
    before = segments()
    with pytest.raises(ArborccError, match=r"rank \d failed: InputError: \$ARBORCC_TIMEOUT: 'nan' is not a finite"):
        run_ranks(allreduce_with, 2, ({"ARBORCC_TIMEOUT": "nan"},), timeout=60)
    assert not leftovers(before)


# ------------------------------------------------------------------ the launchers refuse before starting ranks
@pytest.mark.parametrize("name, value", [("ARBORCC_TIMEOUT", "nan"), ("ARBORCC_SLICE_BYTES", "1e20"),
                                         ("ARBORCC_PLAN", "missing-plan")])
def test_arborcc_run_refuses_a_bad_variable_in_one_line(tmp_path, name, value):
    (tmp_path / "train.py").write_text("raise SystemExit('a rank started')\n")
    run = arborcc("run", "-n", "4", "--timeout", "60", "train.py", cwd=tmp_path, env={name: value})
    refused(run, rf"^arborcc: error: \${name}: ", re.escape(value))


@pytest.mark.parametrize("name, value", [("ARBORCC_CMA_THRESHOLD", "-1"), ("ARBORCC_TIMEOUT", "inf"),
                                         ("ARBORCC_SLOTS", "64")])
def test_arborcc_bench_refuses_a_bad_variable_in_one_line(tmp_path, name, value):
    run = arborcc("bench", "-n", "2", "-b", "4K", "-e", "8K", "--no-membw", cwd=tmp_path, env={name: value})
    refused(run, rf"^arborcc: error: \${name}: ", re.escape(value))
    assert "n/a" not in run.out
