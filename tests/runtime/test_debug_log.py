"""ARBORCC_DEBUG: INFO makes the runtime log once per communicator and once per new
(collective, size range) what the plan chose and why; unset, nothing; any value still
turns on the command line's debug logging (arborcc.debuglog)."""

from __future__ import annotations

import logging
import re
from collections import Counter

import pytest

from arborcc.cli.main import main
from arborcc.debuglog import LOGGER, StderrHandler, configure_debug_logging, debug_level
from support.cli_runs import arborcc
from support.in_process import arborcc_in_process
from support.segments import leftovers, segments

#: all-reduces in place and out of place at sizes of two of the default plan's ranges
#: (below 64K: one-shot; 64K to 1M: owner, staged), each repeated, and all-gathers
SCRIPT = """
import numpy as np
from arborcc.runtime import Communicator

comm = Communicator.from_env(timeout=60)
for count in (16, 1000, 16, 1 << 15, 1 << 17, 1 << 15):
    x = np.ones(count, np.float32)
    comm.allreduce(x)
    comm.allreduce(x, np.empty_like(x))
    gathered = np.empty(count * comm.world_size, np.float32)
    comm.allgather(x, gathered)
    assert x[0] == comm.world_size and gathered[-1] == comm.world_size
comm.close()
"""
CHOICE = re.compile(r"^arborcc\.runtime INFO: rank (\d)/2 (\w+): bytes (.+?): \S+ \(protocol \w+\); (.*)$")
START = re.compile(r"^arborcc\.runtime INFO: rank (\d)/2: communicator on /dev/shm/arborcc-\S+ .*options: timeout=60 ")


def run_two_ranks(tmp_path, env: dict):
    (tmp_path / "train.py").write_text(SCRIPT)
    before = segments()
    run = arborcc("run", "-n", "2", "--timeout", "120", "train.py", cwd=tmp_path, env=env, seconds=150,
                  address_space=None)
    assert run.code == 0, run.err
    assert not leftovers(before)
    return run


def test_info_logs_one_line_per_new_collective_and_size_range_per_rank(tmp_path):
    run = run_two_ranks(tmp_path, {"ARBORCC_DEBUG": "INFO"})
    lines = run.err_lines
    starts = Counter(m.group(1) for m in map(START.match, lines) if m)
    choices = Counter((m.group(1), m.group(2), m.group(3)) for m in map(CHOICE.match, lines) if m)
    assert starts == {"0": 1, "1": 1}, run.err
    expected = {(r, c, b) for r in "01" for c, b in (("allreduce", "1-65535"), ("allreduce", "64K-1M"),
                                                     ("allgather", "1 and up"))}
    assert set(choices) == expected and set(choices.values()) == {1}, run.err
    assert len(lines) == 2 + len(expected), run.err  # nothing else
    reasons = {c: m.group(4) for c, m in ((m.group(2) + m.group(3), m) for m in map(CHOICE.match, lines) if m)}
    assert "built-in default: one-shot" in reasons["allreduce1-65535"]
    assert "staged (the staging ring, one slot per call up to 256K)" in reasons["allreduce1-65535"]
    assert "staged (the staging ring, slice 256K)" in reasons["allreduce64K-1M"]


def test_without_the_variable_the_runtime_logs_nothing(tmp_path):
    run = run_two_ranks(tmp_path, {})
    assert run.err_lines == []


def test_info_names_the_plan_entry_that_matched(tmp_path):
    assert main(["tune", "--machine", "dgx1v", "--gpus", "0,1", "--sizes", "1K,1M", "--strategies", "ring",
                 "--instances", "1", "-o", str(tmp_path / "plan")]) == 0
    run = run_two_ranks(tmp_path, {"ARBORCC_DEBUG": "INFO", "ARBORCC_PLAN": "plan"})
    allreduces = [m for m in map(CHOICE.match, run.err_lines) if m and m.group(2) == "allreduce"]
    matched = Counter(m.group(1) for m in allreduces if m.group(4).startswith(
        "plan entry 1 of 2 (plan/allreduce-0-ring-x1-LL.xml), 0-1048575 bytes"))
    assert matched == {"0": 1, "1": 1}, run.err  # in place, every size here is the tuned bucket below 1M
    # out of place (the tuned ring runs in place only): the built-in default's ranges
    assert all(m.group(4).startswith(("plan entry 1 of 2", "built-in default: ")) for m in allreduces), run.err
    assert len({(m.group(1), m.group(3), m.group(4)) for m in allreduces}) == len(allreduces), run.err
    assert any("plan: 2 algorithm(s)" in line for line in run.err_lines)


def test_any_value_still_turns_on_the_command_lines_debug_logging(tmp_path):
    assert arborcc_in_process("compile", "ring-allreduce", "--ranks", "2", "-o", str(tmp_path / "a.json")) == 0
    quiet = arborcc("verify", "a.json", cwd=tmp_path)
    loud = arborcc("verify", "a.json", cwd=tmp_path, env={"ARBORCC_DEBUG": "INFO"})
    assert quiet.code == loud.code == 0
    assert not any("DEBUG" in line for line in quiet.err_lines)
    assert any(line.startswith("arborcc: DEBUG: ") for line in loud.err_lines), loud.err


# ------------------------------------------------------------------ the switch itself
@pytest.fixture
def arborcc_logger():
    """The "arborcc" logger, put back as it was after the test."""
    logger = logging.getLogger(LOGGER)
    level, handlers = logger.level, list(logger.handlers)
    yield logger
    logger.setLevel(level)
    logger.handlers[:] = handlers


@pytest.mark.parametrize("value, level", [(None, None), ("", None), ("  ", None), ("INFO", logging.INFO),
                                          ("info", logging.INFO), ("1", logging.DEBUG), ("DEBUG", logging.DEBUG),
                                          ("0", logging.DEBUG)])
def test_the_level_each_value_asks_for(value, level):
    assert debug_level({} if value is None else {"ARBORCC_DEBUG": value}) == level


def test_configuring_twice_adds_one_handler_and_unset_changes_nothing(arborcc_logger):
    before = list(arborcc_logger.handlers)
    assert configure_debug_logging({}) is None
    assert arborcc_logger.handlers == before
    arborcc_logger.setLevel(logging.NOTSET)
    assert configure_debug_logging({"ARBORCC_DEBUG": "INFO"}) == logging.INFO
    assert configure_debug_logging({"ARBORCC_DEBUG": "INFO"}) == logging.INFO
    assert sum(isinstance(h, StderrHandler) for h in arborcc_logger.handlers) == 1
    assert logging.getLogger("arborcc.runtime").isEnabledFor(logging.INFO)
    assert not logging.getLogger("arborcc.runtime").isEnabledFor(logging.DEBUG)


def test_records_go_to_the_programs_handlers_once_when_it_configured_logging(arborcc_logger, caplog, capsys):
    """pytest configures the root logger (caplog): the record reaches it, and the stderr
    handler stays quiet instead of printing it a second time."""
    configure_debug_logging({"ARBORCC_DEBUG": "INFO"})
    with caplog.at_level(logging.INFO):
        logging.getLogger("arborcc.torch").info("group created")
    assert [r.getMessage() for r in caplog.records if r.name == "arborcc.torch"] == ["group created"]
    assert "group created" not in capsys.readouterr().err
