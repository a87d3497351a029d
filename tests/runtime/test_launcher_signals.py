"""``arborcc run`` passes SIGINT/SIGTERM on to its ranks and exits 128 + the signal; killed
with SIGKILL, it leaves no rank behind (they die with it), and neither does a process
that runs ranks with ``run_ranks`` (``arborcc bench``, the demo).

Each case starts the launcher as a subprocess on ranks that loop on all-reduce, waits
until every rank has written its pid, signals the launcher, and checks by pid that no
rank is left and that /dev/shm holds nothing of the job."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from support.segments import leftovers, segments

HARD_TIMEOUT = 60  # a hang guard, not a performance check
NRANKS = 2

LOOP = """
import os, sys
import numpy as np
from arborcc.runtime import Communicator
comm = Communicator.from_env(timeout=30)
x = np.ones(1 << 14, np.float32)
comm.allreduce(x)
with open(os.path.join(sys.argv[1], f"rank{comm.rank}.pid"), "w") as f:
    f.write(str(os.getpid()))
while True:
    comm.allreduce(x)
"""

#: run_ranks on ranks that write their pids and then wait forever
RUN_RANKS = """
import os, sys, time
from arborcc.runtime.launch import run_ranks
def rank_body(where):
    with open(os.path.join(where, f"rank{os.environ['RANK']}.pid"), "w") as f:
        f.write(str(os.getpid()))
    while True:
        time.sleep(0.1)
run_ranks(rank_body, %d, (sys.argv[1],), timeout=%d)
""" % (NRANKS, HARD_TIMEOUT)


@pytest.fixture
def shm_unchanged():
    before = segments()
    yield
    assert leftovers(before) == set(), "an arborcc shared-memory segment was left in /dev/shm"


def alive(pid: int) -> bool:
    """Process ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def start(tmp_path, command: list[str]) -> tuple[subprocess.Popen, list[int]]:
    """Start ``command`` (SIGINT at its default, whatever this test runner ignores) and
    wait until its ranks have written their pids."""
    with open(tmp_path / "out.txt", "wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    files = [tmp_path / f"rank{r}.pid" for r in range(NRANKS)]
    deadline = time.monotonic() + HARD_TIMEOUT
    while not all(f.exists() and f.read_text() for f in files):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            pytest.fail(f"the ranks did not start: {(tmp_path / 'out.txt').read_text()[-2000:]}")
        time.sleep(0.05)
    return proc, [int(f.read_text()) for f in files]


def wait_gone(pids: list[int]) -> list[int]:
    """The pids still alive after waiting up to the hard timeout for them to end (each
    left one is then killed, so nothing outlives the test)."""
    deadline = time.monotonic() + HARD_TIMEOUT
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [p for p in pids if alive(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    return left


def launcher(tmp_path) -> list[str]:
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    return [sys.executable, "-m", "arborcc.cli.main", "run", "-n", str(NRANKS), str(script), str(tmp_path)]


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)])
def test_a_signal_to_the_launcher_ends_every_rank_and_sets_the_status(tmp_path, shm_unchanged, sig, status):
    proc, pids = start(tmp_path, launcher(tmp_path))
    os.kill(proc.pid, sig)
    try:
        code = proc.wait(HARD_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    assert wait_gone(pids) == []
    said = (tmp_path / "out.txt").read_text()
    assert code == status, said[-2000:]
    assert f"arborcc run: {sig.name}: passed on to every rank" in said


def test_ranks_die_with_a_launcher_killed_by_sigkill(tmp_path, shm_unchanged):
    proc, pids = start(tmp_path, launcher(tmp_path))
    proc.kill()
    proc.wait()
    assert wait_gone(pids) == []


def test_forked_ranks_die_with_the_process_that_runs_them(tmp_path, shm_unchanged):
    script = tmp_path / "ranks.py"
    script.write_text(RUN_RANKS)
    proc, pids = start(tmp_path, [sys.executable, str(script), str(tmp_path)])
    proc.kill()
    proc.wait()
    assert wait_gone(pids) == []


def test_a_child_whose_parent_died_before_it_armed_ends_at_once():
    # the child calls die_with_parent's function after its parent is gone (as when the
    # launcher dies between fork and prctl): it must end instead of running on
    code = textwrap.dedent("""
        import os, time
        from arborcc.runtime.launch import die_with_parent
        arm = die_with_parent()
        parent = os.getpid()
        r, w = os.pipe()
        if os.fork() == 0:  # the child: waits until its parent has exited, then arms
            os.close(w)
            os.read(r, 1)
            while os.getppid() == parent:
                time.sleep(0.01)
            arm()
            print("survived", flush=True)
            os._exit(0)
        os._exit(0)  # the parent exits at once; the pipe's end closes with it
    """)
    helper = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        out, _ = helper.communicate(timeout=HARD_TIMEOUT)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(helper.pid, signal.SIGKILL)  # the child, were it still running
    assert helper.returncode == 0
    assert "survived" not in out


def descendants(pid: int) -> dict[int, str]:
    """Every process below ``pid`` (pid -> command line)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = {}, [pid]
    while frontier:
        here = frontier.pop()
        for child, parent in parents.items():
            if parent == here and child not in found:
                try:
                    with open(f"/proc/{child}/cmdline", "rb") as f:
                        found[child] = f.read().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    found[child] = ""
                frontier.append(child)
    return found


def mpich_segments(pid: int) -> set[str]:
    """The /dev/shm files of MPICH that process ``pid`` maps (it is past MPI_Init)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            return {line.split()[-1] for line in f if "/dev/shm/mpich_shm" in line and "(deleted)" not in line}
    except OSError:
        return set()


def test_mpiexec_and_its_ranks_end_with_a_killed_bench(tmp_path):
    pytest.importorskip("mpi4py", reason="arborcc bench --backend mpi needs mpi4py")
    from arborcc.bench.backends import mpiexec_path
    from arborcc.errors import MissingDependencyError

    try:
        mpiexec_path()
    except MissingDependencyError:
        pytest.skip("no mpiexec")
    bench = subprocess.Popen([sys.executable, "-m", "arborcc.cli.main", "bench", "-n", str(NRANKS), "--backend", "mpi",
                              "-b", "1K", "-e", "1K", "--iters", "100000000"], cwd=tmp_path,
                             env={**os.environ, "TMPDIR": str(tmp_path)},  # its spec file, left when it is killed
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + HARD_TIMEOUT
    below: dict[int, str] = {}
    # wait until every MPI rank is past MPI_Init: its MPICH segment (which MPICH leaves in
    # /dev/shm when its ranks are killed) is then known, and removed after the test
    segments: set[str] = set()
    while sum(bool(mpich_segments(pid)) for pid, line in below.items() if "arborcc.bench.mpi" in line) < NRANKS:
        if bench.poll() is not None or time.monotonic() > deadline:
            below = descendants(bench.pid)
            bench.kill()
            bench.wait()
            wait_gone(list(below))
            pytest.fail("the MPI ranks did not start")
        time.sleep(0.1)
        below = descendants(bench.pid)
    for pid in below:
        segments |= mpich_segments(pid)
    bench.kill()
    bench.wait()
    try:
        assert wait_gone(list(below)) == []
    finally:
        for path in segments:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
