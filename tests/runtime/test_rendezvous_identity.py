"""The runtime's rendezvous admits only its own job's ranks (arborcc.runtime.rendezvous):
another job's rank, a stray connection, a second claim on a rank are refused and never
count as ranks; rank 0 names exactly the ranks that never proved themselves.

The end-to-end cases start each rank as a subprocess with an explicit environment (the
launcher's ``rank_env``), in the order the case needs, under a hard timeout; the
protocol cases run rank 0 and the other ranks as threads of this process."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.segments import leftovers, segments

from arborcc.errors import InputError
from arborcc.runtime.environment import runtime_settings
from arborcc.runtime.errors import CommunicationError
from arborcc.runtime.launch import free_port_pair, rank_env, run_ranks
from arborcc.runtime.rendezvous import (ANSWER, GREETING, HELLO, MAGIC, NAME, VERSION, LaunchEnv, NameServer,
                                        fetch_name, job_identity, proof)

HARD_TIMEOUT = 60  # seconds any rank process may live (a hang guard)

#: one rank: its imports, "imported" on stderr, then (once a line comes on stdin: the
#: test's go) a communicator from the environment, an all-reduce of CONTRIBUTION, one
#: line on stdout
RANK_SCRIPT = textwrap.dedent("""
    import os, sys
    import numpy as np
    from arborcc.runtime import Communicator, CommunicationError
    print("imported", file=sys.stderr, flush=True)
    sys.stdin.readline()
    try:
        comm = Communicator.from_env()
        x = np.full(4, float(os.environ["CONTRIBUTION"]))
        comm.allreduce(x)
        comm.close()
        print("ok", x[0], flush=True)
    except CommunicationError as e:
        print("error", str(e), flush=True)
        sys.exit(3)
""")


@pytest.fixture
def ranks():
    """``start(rank, world, port, contribution, timeout, secret=None, go_now=True, **variables)``
    starts a rank process (with ``go_now=False`` it waits, imported, for :func:`go`);
    ``result(proc)`` is its exit status and its line. Every process is killed at the end,
    and /dev/shm must be as before."""
    before = segments()
    started: list[subprocess.Popen] = []

    def start(rank: int, world: int, port: int, contribution: float, timeout: float, secret: str | None = None,
              go_now: bool = True, **variables: str) -> subprocess.Popen:
        base = {k: v for k, v in os.environ.items() if not k.startswith("TORCHELASTIC_")}
        env = rank_env(rank, world, port, base, secret)
        env.update(ARBORCC_TIMEOUT=str(timeout), CONTRIBUTION=str(contribution), **variables)
        proc = subprocess.Popen([sys.executable, "-c", RANK_SCRIPT], env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        started.append(proc)
        if go_now:
            go(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            stream.close()
    assert leftovers(before) == set(), "an arborcc shared-memory segment was left in /dev/shm"


def imported(proc: subprocess.Popen) -> None:
    """Wait until the rank process has done its imports (its first line on stderr)."""
    ready, _, _ = select.select([proc.stderr], [], [], HARD_TIMEOUT)
    assert ready, "the rank process did not finish its imports"
    line = proc.stderr.readline()
    assert line == "imported\n", line + proc.stderr.read()


def go(proc: subprocess.Popen) -> None:
    """Let the rank process start its communicator."""
    proc.stdin.write("go\n")
    proc.stdin.flush()


def result(proc: subprocess.Popen) -> tuple[int, str]:
    out, err = proc.communicate(timeout=HARD_TIMEOUT)
    lines = out.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, (out, err)
    return proc.returncode, lines[0]


def listening(port: int) -> bool:
    """Whether a socket listens on loopback ``port`` (read from /proc, without connecting)."""
    with open("/proc/net/tcp") as f:
        rows = [line.split() for line in f.readlines()[1:]]
    return any(local == f"0100007F:{port:04X}" and state == "0A" for _, local, _, state, *_ in rows)


def wait_listening(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + HARD_TIMEOUT
    while not listening(port):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"nothing listens on {port}"
        time.sleep(0.05)


# ------------------------------------------------------------------------------ whole jobs
def test_two_jobs_on_one_port_the_second_is_refused_and_the_first_is_right(ranks):
    port = free_port_pair()
    rendezvous = f"127.0.0.1:{port + 1}"
    a0 = ranks(0, 3, port, 1, 30, secret="job-a")
    wait_listening(port + 1, a0)
    job_b = [ranks(r, 3, port, 100, 5, secret="job-b") for r in range(3)]
    b0, b1, b2 = (result(p) for p in job_b)
    assert b0[0] != 0 and f"rank 0: cannot listen on {rendezvous}" in b0[1], b0
    for rank, (code, line) in ((1, b1), (2, b2)):
        assert code != 0, line
        assert f"rank {rank}: refused by the rendezvous at {rendezvous}" in line, line
        assert "belongs to another job" in line, line
    job_a = [a0] + [ranks(r, 3, port, 1, 30, secret="job-a") for r in (1, 2)]
    assert [result(p) for p in job_a] == [(0, "ok 3.0")] * 3


def test_stray_connections_do_not_count_as_ranks(ranks):
    port = free_port_pair()
    r0 = ranks(0, 3, port, 1, 30, secret="job")
    wait_listening(port + 1, r0)
    strays = {}
    for kind, first in (("garbage", b"\x00\x00\x00\x01"),  # what claimed rank 1 before ranks proved their job
                        ("http", b"GET / HTTP/1.0\r\n\r\n"), ("silent", b"")):
        strays[kind] = socket.create_connection(("127.0.0.1", port + 1), timeout=HARD_TIMEOUT)
        strays[kind].sendall(first)
    job = [r0] + [ranks(r, 3, port, 1, 30, secret="job") for r in (1, 2)]
    assert [result(p) for p in job] == [(0, "ok 3.0")] * 3
    for kind, stray in strays.items():
        heard = b""
        while part := stray.recv(4096):  # closed by rank 0 (or with it)
            heard += part
        stray.close()
        assert heard.startswith(MAGIC) and b"arborcc-" not in heard, (kind, heard)


#: rank 0's timeout where the case waits for it to pass: rank 1 is started (imported, then
#: let go) once rank 0 listens, and proves itself in milliseconds of that
SHORT_TIMEOUT = 2


def rank_0_listening_then_rank_1(ranks, world: int, port: int, secrets: tuple[str, str]):
    """Rank 0 with :data:`SHORT_TIMEOUT` and rank 1, both imported before rank 0 starts
    its rendezvous, rank 1 let go once rank 0 listens (so rank 1 arrives well within rank
    0's timeout, however slow the machine is to start Python); (rank 0, rank 1)."""
    r0 = ranks(0, world, port, 1, SHORT_TIMEOUT, secret=secrets[0], go_now=False)
    r1 = ranks(1, world, port, 1, 5, secret=secrets[1], go_now=False)
    imported(r0)
    imported(r1)
    go(r0)
    wait_listening(port + 1, r0)
    go(r1)
    return r0, r1


def test_a_rank_with_another_jobs_secret_is_refused(ranks):
    port = free_port_pair()
    r0, r1 = rank_0_listening_then_rank_1(ranks, 2, port, ("ours", "theirs"))
    code, line = result(r1)
    assert code != 0 and f"rank 1: refused by the rendezvous at 127.0.0.1:{port + 1}" in line, line
    assert "another job" in line, line
    code, line = result(r0)
    assert code != 0, line
    assert f"rank 0: rank 1 never arrived within {SHORT_TIMEOUT} s; 1 other connection was refused as not this " \
           "job's rank (1 another job's rank)" in line, line


def test_a_rank_never_started_is_the_only_one_named(ranks):
    port = free_port_pair()
    r0, r1 = rank_0_listening_then_rank_1(ranks, 3, port, ("job", "job"))
    (code0, line0), (code1, line1) = result(r0), result(r1)
    assert code0 != 0 and f"error rank 0: rank 2 never arrived within {SHORT_TIMEOUT} s" in line0, line0
    assert "rank 1" not in line0 and "ranks" not in line0, line0
    assert code1 != 0 and f"rank 1: rank 0 gave up: rank 2 never arrived within {SHORT_TIMEOUT} s" in line1, line1


def test_a_restarted_torchrun_jobs_rank_never_joins_the_one_before(ranks):
    """torchrun's run id and restart count are the job's identity when no secret is set."""
    port = free_port_pair()
    run = {"TORCHELASTIC_RUN_ID": str(uuid.uuid4())}
    r0 = ranks(0, 2, port, 1, 30, TORCHELASTIC_RESTART_COUNT="1", **run)
    wait_listening(port + 1, r0)
    stale = ranks(1, 2, port, 100, 5, TORCHELASTIC_RESTART_COUNT="0", **run)
    code, line = result(stale)
    assert code != 0 and "refused by the rendezvous" in line and "another job" in line, line
    r1 = ranks(1, 2, port, 1, 30, TORCHELASTIC_RESTART_COUNT="1", **run)
    assert [result(p) for p in (r0, r1)] == [(0, "ok 2.0")] * 2


# ------------------------------------------------------------------------------ the protocol, in threads
class Rendezvous:
    """Rank 0's side (:class:`NameServer`) in a thread of this process; ``join(rank)``
    runs a rank's side in another and returns what it got (a name or its error)."""

    def __init__(self, world: int, identity: bytes | None = b"ours", handshake: float = 2.0, timeout: float = 30):
        self.port = free_port_pair() + 1
        self.where = LaunchEnv(0, world, 0, "127.0.0.1", self.port, identity)
        self.server = NameServer(self.where, timeout, handshake)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + HARD_TIMEOUT
        while not listening(self.port):
            assert time.monotonic() < deadline and self.thread.is_alive(), self.error
            time.sleep(0.01)

    def _serve(self) -> None:
        try:
            self.server.accept()
            self.server.send("/arborcc-name")
        except BaseException as e:  # the test reads it
            self.error = e

    def join(self, rank: int, world: int | None = None, identity: bytes | None = b"ours",
             timeout: float = 30) -> list:
        got: list = []

        def run() -> None:
            where = LaunchEnv(rank, world or self.where.world_size, rank, "127.0.0.1", self.port, identity)
            try:
                got.append(fetch_name(where, timeout))
            except CommunicationError as e:
                got.append(e)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self.joining = getattr(self, "joining", []) + [thread]
        return got

    def finish(self) -> None:
        self.thread.join(HARD_TIMEOUT)
        for thread in getattr(self, "joining", []):
            thread.join(HARD_TIMEOUT)
        assert not self.thread.is_alive()


def test_a_silent_connection_does_not_hold_up_the_ranks():
    rdv = Rendezvous(3, handshake=HARD_TIMEOUT)  # the silent connection would last the whole test
    with socket.create_connection(("127.0.0.1", rdv.port), timeout=HARD_TIMEOUT):
        got = [rdv.join(1), rdv.join(2)]
        rdv.finish()
    assert rdv.error is None and got == [["/arborcc-name"], ["/arborcc-name"]]


def test_a_silent_connection_is_closed_after_the_handshake_time_and_counted():
    rdv = Rendezvous(2, handshake=0.2, timeout=30)
    with socket.create_connection(("127.0.0.1", rdv.port), timeout=HARD_TIMEOUT) as silent:
        heard = b""
        while part := silent.recv(4096):  # rank 0 greets it, then closes it
            heard += part
    assert len(heard) == GREETING.size and rdv.thread.is_alive()
    got = rdv.join(1)
    rdv.finish()
    assert got == ["/arborcc-name"] and dict(rdv.server.refused) == {"sent no proof in time": 1}


def test_a_second_process_claiming_a_taken_rank_is_refused_naming_it():
    rdv = Rendezvous(3)
    first = rdv.join(1)
    deadline = time.monotonic() + HARD_TIMEOUT
    while 1 not in rdv.server.conns:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    second = rdv.join(1)
    rdv.joining[-1].join(HARD_TIMEOUT)
    third = rdv.join(2)
    rdv.finish()
    assert isinstance(second[0], CommunicationError), second
    assert str(second[0]) == (f"rank 1: refused by the rendezvous at 127.0.0.1:{rdv.port}: rank 1 has already "
                              "joined (two processes with RANK=1?)")
    assert first == third == ["/arborcc-name"]


@pytest.mark.parametrize("world, identity, needle, reason", [
    (4, b"ours", "this rank says WORLD_SIZE=4, the job listening here has 3 ranks", "another world size"),
    (3, b"theirs", "belongs to another job", "another job's rank"),
    (3, None, "belongs to another job", "another job's rank"),  # no identity where rank 0 has one
])
def test_a_rank_that_is_not_this_jobs_is_refused_and_counted(world, identity, needle, reason):
    rdv = Rendezvous(3)
    refused = rdv.join(1, world=world, identity=identity)
    rdv.joining[-1].join(HARD_TIMEOUT)
    own = [rdv.join(1), rdv.join(2)]  # the job still admits its own ranks
    rdv.finish()
    assert isinstance(refused[0], CommunicationError) and needle in str(refused[0]), refused
    assert str(refused[0]).startswith(f"rank 1: refused by the rendezvous at 127.0.0.1:{rdv.port}: ")
    assert own == [["/arborcc-name"]] * 2 and dict(rdv.server.refused) == {reason: 1}


def test_ranks_started_by_hand_without_an_identity_still_meet():
    rdv = Rendezvous(2, identity=None)
    got = rdv.join(1, identity=None)
    rdv.finish()
    assert got == ["/arborcc-name"]


def test_another_program_on_the_port_is_named():
    server, thread = serve_once(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    with server:
        where = LaunchEnv(1, 2, 1, "127.0.0.1", server.getsockname()[1], b"ours")
        with pytest.raises(CommunicationError, match=r"^rank 1: 127\.0\.0\.1:\d+ is not an arborcc rendezvous"):
            fetch_name(where, 30)
        thread.join(HARD_TIMEOUT)


def serve_once(reply: bytes) -> tuple[socket.socket, threading.Thread]:
    """A listening socket whose first connection gets ``reply``, then is closed."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def answer() -> None:
        conn, _ = server.accept()
        conn.sendall(reply)
        conn.close()

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return server, thread


def test_a_rank_0_of_another_rendezvous_version_is_named():
    server, thread = serve_once(GREETING.pack(MAGIC, VERSION + 1, bytes(16)))
    with server:
        where = LaunchEnv(1, 2, 1, "127.0.0.1", server.getsockname()[1], b"ours")
        with pytest.raises(CommunicationError, match=rf"^rank 1: rank 0 at 127\.0\.0\.1:\d+ speaks rendezvous "
                                                     rf"version {VERSION + 1}, this rank {VERSION} "):
            fetch_name(where, 30)
        thread.join(HARD_TIMEOUT)


def test_a_rank_whose_rank_0_never_listens_says_so_after_its_timeout():
    port = free_port_pair() + 1  # nothing listens there
    with pytest.raises(CommunicationError, match=rf"^rank 1: rank 0 did not answer at 127\.0\.0\.1:{port} within "
                                                 r"0\.3 s \(Connection refused\)$"):
        fetch_name(LaunchEnv(1, 2, 1, "127.0.0.1", port, b"ours"), 0.3)


def test_an_admitted_rank_that_leaves_frees_its_rank():
    rdv = Rendezvous(3)
    with socket.create_connection(("127.0.0.1", rdv.port), timeout=HARD_TIMEOUT) as gone:
        _, _, nonce = GREETING.unpack(gone.recv(GREETING.size, socket.MSG_WAITALL))
        gone.sendall(HELLO.pack(MAGIC, VERSION, 1, 3, proof(b"ours", nonce, 1, 3)))
        deadline = time.monotonic() + HARD_TIMEOUT
        while 1 not in rdv.server.conns:  # admitted as rank 1 ...
            assert time.monotonic() < deadline and rdv.thread.is_alive(), rdv.error
            time.sleep(0.01)
    while 1 in rdv.server.conns:  # ... and freed when it closes
        assert time.monotonic() < deadline and rdv.thread.is_alive(), rdv.error
        time.sleep(0.01)
    got = [rdv.join(1), rdv.join(2)]  # the rank's next process is admitted in its place
    rdv.finish()
    assert rdv.error is None and got == [["/arborcc-name"]] * 2


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blob=st.one_of(st.binary(max_size=80), st.binary(max_size=60).map(lambda b: MAGIC + b),
                      st.binary(max_size=50).map(lambda b: HELLO.pack(MAGIC, VERSION, 1, 2, bytes(32))[:18] + b)))
def test_random_bytes_never_count_as_a_rank(blob):
    rdv = Rendezvous(2, handshake=0.2)
    with socket.create_connection(("127.0.0.1", rdv.port), timeout=HARD_TIMEOUT) as stray:
        stray.sendall(blob)
        got = rdv.join(1)
        rdv.finish()
        heard = b""
        try:
            while part := stray.recv(4096):
                heard += part
        except ConnectionResetError:
            pass
    assert rdv.error is None and got == ["/arborcc-name"]
    assert b"/arborcc-name" not in heard


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blob=st.one_of(st.binary(max_size=80), st.binary(max_size=60).map(lambda b: MAGIC + b),
                      st.binary(max_size=60).map(lambda b: GREETING.pack(MAGIC, VERSION, bytes(16)) + b)))
def test_a_rank_answered_with_random_bytes_fails_in_one_line_or_gets_a_name(blob):
    """Whatever listens on the port and whatever it sends, a rank ends with a name (only
    from a well-formed answer) or one line naming itself - never another exception."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.settimeout(0.01)  # the loop looks at ``stop`` this often
        stop = threading.Event()

        def answer() -> None:
            while not stop.is_set():
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    continue
                conn.sendall(blob)
                conn.close()

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        where = LaunchEnv(1, 2, 1, "127.0.0.1", server.getsockname()[1], b"ours")
        try:
            name = fetch_name(where, 0.05)  # a rank retries until then: a few connections per example
        except CommunicationError as e:
            assert str(e).startswith("rank 1: ") and "\n" not in str(e)
        else:  # only a greeting of this version, then a name answer, gives a name
            kind, length = ANSWER.unpack(blob[GREETING.size:GREETING.size + ANSWER.size])
            assert blob[:10] == GREETING.pack(MAGIC, VERSION, bytes(16))[:10] and kind == NAME
            text = blob[GREETING.size + ANSWER.size:GREETING.size + ANSWER.size + length]
            assert name == text.decode(errors="replace")
        stop.set()
        thread.join(HARD_TIMEOUT)


# ------------------------------------------------------------------------------ identity and launchers
def test_the_identity_comes_from_the_secret_then_torchrun_then_nothing():
    assert job_identity("s", "run", 3) == job_identity("s", None, None)
    assert job_identity(None, "run", 0) != job_identity(None, "run", 1)  # a restart is another job
    assert job_identity(None, "run", 0) != job_identity(None, "other", 0)
    assert job_identity(None, "none", 0) is None and job_identity(None, None, None) is None
    nonce = bytes(16)
    assert proof(b"k", nonce, 1, 2) != proof(b"k", nonce, 2, 2) != proof(b"k", nonce, 1, 3)


def _secret() -> str:
    return os.environ["ARBORCC_JOB_SECRET"]


def test_the_launcher_gives_every_rank_of_a_launch_one_new_secret():
    first, second = run_ranks(_secret, 2, timeout=60), run_ranks(_secret, 2, timeout=60)
    assert first[0] == first[1] and second[0] == second[1] and first[0] != second[0]
    assert len(first[0]) >= 32
    inherited = rank_env(0, 2, 29500, {"ARBORCC_JOB_SECRET": "outer job"})
    assert "ARBORCC_JOB_SECRET" not in inherited  # a launch's ranks never share an outer job's identity


@pytest.mark.parametrize("name, value", [("ARBORCC_JOB_SECRET", "two words"),
                                         ("ARBORCC_JOB_SECRET", "x" * 1025), ("ARBORCC_JOB_SECRET", "a\x01b"),
                                         ("TORCHELASTIC_RUN_ID", "a\nb"), ("TORCHELASTIC_RESTART_COUNT", "-1"),
                                         ("TORCHELASTIC_RESTART_COUNT", "once")])
def test_a_bad_identity_variable_is_one_line_naming_it(name, value):
    with pytest.raises(InputError) as e:
        runtime_settings({"RANK": "0", "WORLD_SIZE": "2", name: value})
    assert str(e.value).startswith(f"${name}: ") and "\n" not in str(e.value)


@settings(max_examples=200, deadline=None)
@given(value=st.text(max_size=1100))
def test_any_job_secret_is_taken_or_refused_without_quoting_it(value):
    try:
        got = runtime_settings({"ARBORCC_JOB_SECRET": value}).job_secret
    except InputError as e:
        line = str(e)
        assert line.startswith("$ARBORCC_JOB_SECRET: not a job secret") and "\n" not in line
        assert len(value.strip()) < 8 or value.strip() not in line
    else:
        assert got == (value.strip() or None)
