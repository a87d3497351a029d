"""Failures end in errors that name the rank, never in hangs; /dev/shm is left as found.

Each case runs a small script on local ranks with ``arborcc run`` (a subprocess with a
hard timeout) and reads what every rank printed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from support.segments import leftovers, segments
from support.cli_runs import said_by_rank


HARD_TIMEOUT = 60

PRELUDE = """
import os, signal, sys, time
import numpy as np
from arborcc.runtime import Communicator, CommunicationError
rank = int(os.environ["RANK"])
def report(what):  # one write per line: lines of different ranks never interleave
    os.write(1, f"RANK{rank}: {what}".replace("\\n", " ")[:3000].encode() + b"\\n")
"""


@pytest.fixture
def shm_unchanged():
    before = segments()
    yield
    assert leftovers(before) == set(), "an arborcc shared-memory segment was left in /dev/shm"


def launch(tmp_path, nranks: int, body: str) -> tuple[int, dict[int, str]]:
    script = tmp_path / "case.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    proc = subprocess.run([sys.executable, "-m", "arborcc.cli.main", "run", "-n", str(nranks), "--timeout",
                           str(HARD_TIMEOUT - 10), str(script)], capture_output=True, text=True,
                          timeout=HARD_TIMEOUT)
    return proc.returncode, said_by_rank(proc.stdout)


def test_normal_run_leaves_nothing(tmp_path, shm_unchanged):
    code, said = launch(tmp_path, 3, """
        comm = Communicator.from_env(timeout=10)
        x = np.ones(1000, np.float32)
        comm.allreduce(x)
        report(f"ok {x[0]}")
    """)
    assert code == 0
    assert said == {0: "ok 3.0", 1: "ok 3.0", 2: "ok 3.0"}


def test_rank_killed_with_sigkill_is_named(tmp_path, shm_unchanged):
    code, said = launch(tmp_path, 3, textwrap.dedent("""
        comm = Communicator.from_env(timeout=30)
        x = np.ones(1 << 16, np.float32)
        comm.allreduce(x)
    """) + KILL_RANK_2_DURING.format(call="comm.allreduce(x)"))
    assert_rank_2_found_dead(code, said)


#: rank 2 kills itself; the others time the next call (``call``) and report its error
KILL_RANK_2_DURING = """
if rank == 2:
    os.kill(os.getpid(), signal.SIGKILL)
t0 = time.monotonic()
try:
    {call}
    report("no error")
except CommunicationError as e:
    report(f"{{time.monotonic() - t0:.1f}}s {{e}}")
"""


def assert_rank_2_found_dead(code: int, said: dict[int, str]) -> None:
    assert code != 0
    for r in (0, 1):  # found dead at once, well before the 30 s timeout
        assert "rank 2 died" in said[r] or "rank 2 failed" in said[r], said
        assert float(said[r].split("s ", 1)[0]) < 10


def test_rank_that_never_calls_times_out_naming_it(tmp_path, shm_unchanged):
    # every rank makes a first call (its preparation, slow on a busy machine, is then
    # behind it); rank 1 makes no second call until the others have timed out and said so
    # (they leave a file each), so the 2 s timeout cannot race with its arrival
    code, said = launch(tmp_path, 3, f"""
        comm = Communicator.from_env(timeout=2)
        x = np.ones(100, np.float32)
        comm.allreduce(x)
        done = [os.path.join({str(tmp_path)!r}, f"done{{r}}") for r in (0, 2)]
        if rank == 1:
            t0 = time.monotonic()
            while not all(map(os.path.exists, done)) and time.monotonic() - t0 < 40:
                time.sleep(0.05)
        try:
            comm.allreduce(x)
            report("no error")
        except CommunicationError as e:
            report(str(e))
        if rank != 1:
            open(done[rank // 2], "w").close()
    """)
    assert "timed out after 2 s waiting for rank 1" in said[0] or "rank 0 failed" in said[0] or \
        "waiting for rank 1" in said[0], said
    assert "rank 1" in said[2], said
    assert "rank" in said[1] and "no error" not in said[1], said


def test_rank_that_never_arrives_is_named(tmp_path, shm_unchanged):
    # rank 2 stays alive without arriving until the others have given up and said so
    # (they leave a file each): nothing waits longer than their 1 s. Rank 1 may arrive
    # late on a busy machine: rank 0 then names it too, and it hears rank 0's verdict or
    # finds no rank 0 - the checks below hold either way
    code, said = launch(tmp_path, 3, f"""
        done = [os.path.join({str(tmp_path)!r}, f"done{{r}}") for r in (0, 1)]
        if rank == 2:
            t0 = time.monotonic()
            while not all(map(os.path.exists, done)) and time.monotonic() - t0 < 40:
                time.sleep(0.05)
            report("never arrived")
            sys.exit(0)
        try:
            Communicator.from_env(timeout=1)
            report("no error")
        except CommunicationError as e:
            report(str(e))
        open(done[rank], "w").close()
    """)
    assert "never arrived" in said[0] and "2 never arrived" in said[0], said
    assert "rank 0" in said[1], said  # rank 0 never answered it


def test_sigterm_during_collectives(tmp_path, shm_unchanged):
    code, said = launch(tmp_path, 2, """
        comm = Communicator.from_env(timeout=20)
        x = np.ones(1 << 20, np.float32)
        if rank == 1:
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            signal.signal(signal.SIGALRM, lambda *a: os.kill(os.getpid(), signal.SIGTERM))
        try:
            for _ in range(100000):
                comm.allreduce(x)
            report("finished")
        except CommunicationError as e:
            report(str(e))
    """)
    assert code != 0
    assert "rank 1" in said.get(0, ""), said


def test_exception_in_one_rank(tmp_path, shm_unchanged):
    code, said = launch(tmp_path, 2, """
        comm = Communicator.from_env(timeout=20)
        x = np.ones(10, np.float32)
        comm.allreduce(x)
        if rank == 0:
            raise SystemExit(3)
        try:
            comm.allreduce(x)
        except CommunicationError as e:
            report(str(e))
    """)
    assert code == 3
    assert "rank 0" in said.get(1, ""), said


def test_mismatched_calls_are_reported(tmp_path, shm_unchanged):
    code, said = launch(tmp_path, 2, """
        comm = Communicator.from_env(timeout=5)
        x = np.ones(1000 if rank == 0 else 2000, np.float32)
        try:
            comm.allreduce(x)
            report("no error")
        except CommunicationError as e:
            report(str(e))
    """)
    assert any("mismatch" in s or "timed out" in s for s in said.values()), said


def test_messages_larger_than_a_slot(tmp_path, shm_unchanged):
    # with 64 KB slots, the direct algorithms' 1.2 MB chunks travel as one message read
    # from the sender's memory (none can need demoting into a slot); the owner all-reduce
    # sends what it writes and keeps its slices within a slot. Every result equals numpy.
    code, said = launch(tmp_path, 3, """
        comm = Communicator.from_env(timeout=20, slot_bytes=65536)
        n, k = 3, 300_001
        xs = [np.arange(k, dtype=np.float32) * (r + 1) + r for r in range(n)]
        x = xs[rank].copy()
        bad = []
        out = np.zeros(n * k, np.float32)
        comm.allgather(x, out)
        bad += [] if np.array_equal(out, np.concatenate(xs)) else ["allgather"]
        out = np.zeros(n * k, np.float32)
        out[rank * k:(rank + 1) * k] = x
        comm.allgather(out[rank * k:(rank + 1) * k], out)
        bad += [] if np.array_equal(out, np.concatenate(xs)) else ["allgather in place"]
        y = np.zeros(k, np.float32)
        comm.broadcast(x, y, root=1)
        bad += [] if np.array_equal(y, xs[1]) else ["broadcast"]
        y = x.copy()
        comm.broadcast(y, root=2)
        bad += [] if np.array_equal(y, xs[2]) else ["broadcast in place"]
        big = [np.concatenate([xs[r]] * n) + r for r in range(n)]
        part = np.zeros(k, np.float32)
        comm.reduce_scatter(big[rank].copy(), part)
        bad += [] if np.allclose(part, sum(b[rank * k:(rank + 1) * k] for b in big)) else ["reduce_scatter"]
        a2a = np.zeros(n * k, np.float32)
        comm.alltoall(big[rank].copy(), a2a)
        want = np.concatenate([big[r][rank * k:(rank + 1) * k] for r in range(n)])
        bad += [] if np.array_equal(a2a, want) else ["alltoall"]
        s = x.copy()
        comm.allreduce(s)
        bad += [] if np.allclose(s, sum(xs)) else ["allreduce"]
        report("ok" if not bad else "wrong: " + " ".join(bad))
    """)
    assert code == 0, said
    assert said == {0: "ok", 1: "ok", 2: "ok"}, said


def test_send_then_overwrite_with_small_slots(tmp_path, shm_unchanged):
    # an in-place swap: each rank sends a chunk, then receives into that same chunk. The
    # send must capture the data when it is posted (the verifier's semantics), so its
    # slices stay within a slot, where a pinned message is demoted before the overwrite.
    code, said = launch(tmp_path, 2, """
        from arborcc.ir.model import Algorithm, Buffer, Op, RankProgram, Step, ThreadBlock
        IN, OUT = Buffer.INPUT, Buffer.OUTPUT
        progs = [RankProgram(r, 2, 2, 0, [ThreadBlock(0, send=1 - r, recv=1 - r, channel=0, steps=[
            Step(Op.SEND, IN, 1 - r, OUT, r), Step(Op.RECV, IN, r, OUT, 1 - r)])]) for r in range(2)]
        algo = Algorithm("swap-alltoall-2r-inplace", "alltoall", 2, 2, progs, inplace=True, outofplace=False)
        comm = Communicator.from_env(timeout=20, slot_bytes=65536)
        k = 250_000
        mine = [np.arange(2 * k, dtype=np.float32) + 10 * r for r in range(2)]
        bad = 0
        for _ in range(20):
            x = mine[rank].copy()
            comm.run_algorithm(algo, x)
            want = np.concatenate([mine[0][rank * k:(rank + 1) * k], mine[1][rank * k:(rank + 1) * k]])
            bad += not np.array_equal(x, want)
        report(f"wrong {bad}")
    """)
    assert code == 0, said
    assert said == {0: "wrong 0", 1: "wrong 0"}, said


def test_shared_arrays_leave_nothing(tmp_path, shm_unchanged):
    code, said = launch(tmp_path, 2, """
        comm = Communicator.from_env(timeout=10)
        a = comm.shared_array(1000, "float32")
        b = comm.shared_array((2, 1000), "float32")
        a[:] = rank
        comm.allgather(a, b)
        comm.free_shared(a)
        report(f"ok {b[1, 0]} {comm.shared_calls}")
        comm.close()
        b[:] = 7  # the rank's own shared arrays outlive the communicator
        report(f" {b.sum()}")
    """)
    assert code == 0
    assert said == {0: "ok 1.0 1 14000.0", 1: "ok 1.0 1 14000.0"}


def test_mismatched_shared_arrays_are_reported(tmp_path, shm_unchanged):
    code, said = launch(tmp_path, 2, """
        comm = Communicator.from_env(timeout=10)
        try:
            comm.shared_array(1000 + rank, "float32")
            report("no error")
        except CommunicationError as e:
            report(str(e))
    """)
    assert code == 0
    assert all("allocated shared array 0 of" in said[r] for r in (0, 1)), said


def test_rank_killed_during_shared_allgather_is_named(tmp_path, shm_unchanged):
    code, said = launch(tmp_path, 3, textwrap.dedent("""
        comm = Communicator.from_env(timeout=30)
        x = comm.shared_array(1 << 16, "float32")
        out = np.zeros(3 << 16, np.float32)
        comm.allgather(x, out)
    """) + KILL_RANK_2_DURING.format(call="comm.allgather(x, out)"))
    assert_rank_2_found_dead(code, said)


def test_shared_array_on_one_rank_only_is_a_call_mismatch_naming_the_peer(tmp_path, shm_unchanged):
    code, said = launch(tmp_path, 2, """
        comm = Communicator.from_env(timeout=2 if rank == 0 else 8)  # found before either times out
        shared = comm.shared_array(1000, "float32")
        send = shared if rank == 0 else np.ones(1000, np.float32)  # rank 1 passes its own array
        try:
            comm.allgather(send, np.zeros(2000, np.float32))
            report("no error")
        except CommunicationError as e:
            report(str(e))
    """)
    assert "call mismatch" in said[0] and "rank 1" in said[0] and "shared arrays" in said[0], said
    assert "rank 0" in said[1], said


def test_rank_killed_during_staged_allreduce_is_named(tmp_path, shm_unchanged):
    # 1 MB: four slices through the staging ring (the 256 KB of the test above run staged too)
    code, said = launch(tmp_path, 3, textwrap.dedent("""
        comm = Communicator.from_env(timeout=30)
        x = np.ones(1 << 18, np.float32)
        comm.allreduce(x)
        assert comm.staged_calls == 1
    """) + KILL_RANK_2_DURING.format(call="comm.allreduce(x)"))
    assert_rank_2_found_dead(code, said)


def test_mismatched_staged_allreduces_are_reported(tmp_path, shm_unchanged):
    code, said = launch(tmp_path, 2, """
        comm = Communicator.from_env(timeout=5)
        x = np.ones((1 << 17) if rank == 0 else (1 << 18), np.float32)  # 512 KB against 1 MB: both staged
        try:
            comm.allreduce(x)
            report("no error")
        except CommunicationError as e:
            report(str(e))
    """)
    assert any("mismatch" in s and "131072 elements" in s and "262144" in s for s in said.values()), said
    assert all("no error" not in s for s in said.values()), said


def test_rank_missing_a_staged_allreduce_times_out_naming_it(tmp_path, shm_unchanged):
    code, said = launch(tmp_path, 2, f"""
        done = os.path.join({str(tmp_path)!r}, "done0")
        comm = Communicator.from_env(timeout=2 if rank == 0 else 8)  # rank 0 times out first
        x = np.ones(1 << 18, np.float32)
        comm.allreduce(x)
        try:
            if rank == 0:
                comm.allreduce(x)
            else:  # alive, not calling, until rank 0 has timed out and said so (it leaves a file)
                t0 = time.monotonic()
                while not os.path.exists(done) and time.monotonic() - t0 < 40:
                    time.sleep(0.05)
            report("no error" if rank == 0 else "skipped")
        except CommunicationError as e:
            report(str(e))
        if rank == 0:
            open(done, "w").close()
    """)
    assert "timed out after 2 s waiting for rank 1" in said[0] and "staged all-reduce" in said[0], said
