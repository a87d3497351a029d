"""Run ``arborcc`` as a subprocess within the bad-input budget (docs/limits.md): a hard
timeout (a hang guard, not a performance check) and the child's own peak resident set
(``wait4`` in a small parent process), under an address-space limit that stops a
regression before it can take the machine; :func:`refused` checks the one-line refusal."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ARBORCC = [sys.executable, "-m", "arborcc.cli.main"]
TIME_BUDGET = 30  # seconds
MEMORY_BUDGET = 2**30  # bytes of peak resident memory
ADDRESS_SPACE = 6 * 2**30  # hard limit: a runaway child fails instead of swapping the machine
SAMPLES = Path(__file__).resolve().parents[1] / "topology" / "samples"
IR_SAMPLES = Path(__file__).resolve().parents[1] / "ir" / "samples"


@dataclass
class Run:
    code: int
    out: str
    err: str
    peak_bytes: int
    seconds: float

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


#: runs the command as its own child and writes "PEAK_KB EXIT" to argv[1]: a child forked
#: straight from pytest would report pytest's resident set as its peak (Linux keeps the
#: high-water mark across fork and exec), so the measured process is forked from this
#: small one instead
REAPER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(f"{usage.ru_maxrss} {os.waitstatus_to_exitcode(status)}")
"""


def arborcc(*args: str, cwd: Path, env: dict | None = None, umask: int | None = None,
            seconds: float = TIME_BUDGET, address_space: int | None = ADDRESS_SPACE) -> Run:
    """Run ``arborcc ARGS`` within the budgets (killed at ``seconds``, 30 s unless the command
    is the whole demo); outputs go through files, and the peak memory is the command's
    own (``wait4`` in :data:`REAPER`). ``address_space=None``: no address-space cap (the
    runtime maps its shared-memory segment beyond it)."""
    def setup() -> None:
        if address_space is not None:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
        if umask is not None:
            os.umask(umask)

    environment = dict(os.environ, MPLBACKEND="Agg", **(env or {}))
    if "ARBORCC_DEBUG" not in (env or {}):
        environment.pop("ARBORCC_DEBUG", None)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "peak"
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", REAPER, str(report), *ARBORCC, *args], cwd=cwd,
                                env=environment, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                preexec_fn=setup, start_new_session=True)
        try:
            proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            pytest.fail(f"arborcc {' '.join(args)} ran past {seconds} s")
        seconds = time.perf_counter() - start
        peak_kb, code = (int(x) for x in report.read_text().split())
        out.seek(0)
        err.seek(0)
        return Run(code, out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace"),
                   peak_kb * 1024, seconds)


def refused(run: Run, *needles: str) -> None:
    """Exit 2, one line on stderr naming what is wrong, no traceback, within the budgets."""
    assert run.code == 2, (run.code, run.err[-2000:])
    assert len(run.err_lines) == 1, run.err
    assert "Traceback" not in run.err
    for needle in needles:
        assert re.search(needle, run.err_lines[0]), (needle, run.err_lines[0])
    within_budget(run)


def within_budget(run: Run) -> None:
    assert run.peak_bytes < MEMORY_BUDGET, f"peak {run.peak_bytes / 2**20:.0f} MB"


def said_by_rank(stdout: str) -> dict[int, str]:
    """What each rank printed as ``RANK<r>: text`` lines (a rank's lines joined), by rank."""
    said: dict[int, str] = {}
    for line in stdout.splitlines():
        if line.startswith("RANK"):
            rank, text = line[4:].split(": ", 1)
            said[int(rank)] = said.get(int(rank), "") + text
    return said
