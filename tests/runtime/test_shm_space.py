"""Too little /dev/shm is one clear error on every rank when the memory is sized, never a
SIGBUS later (containers often have 64 MB).

Each case runs ``arborcc run`` in a private mount namespace whose /dev/shm is a tmpfs of a
given size (``unshare`` + ``mount -t tmpfs``: root, or an unprivileged user namespace);
where that cannot be made, the cases skip and say so."""

from __future__ import annotations

import functools
import re
import shutil
import signal
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.cli_runs import said_by_rank

HARD_TIMEOUT = 90  # a hang guard, not a performance check

PRELUDE = """
import os, sys
import numpy as np
from arborcc.runtime import Communicator, CommunicationError
rank = int(os.environ["RANK"])
def report(what):  # one write per line: lines of different ranks never interleave
    os.write(1, f"RANK{rank}: {what}".replace("\\n", " ").encode() + b"\\n")
try:
    comm = Communicator.from_env(timeout=20)
"""

EPILOGUE = """
    report("ok")
except CommunicationError as e:
    report(str(e))
    sys.exit(1)
"""

#: all-reduces of 4 KB to 16 MB (staged ones through the staging ring, larger ones
#: through the FIFOs' slots)
CALLS = """
    for n in (1 << 10, 1 << 16, 1 << 20, 1 << 22):
        x = np.ones(n, np.float32)
        comm.allreduce(x)
        assert x[0] == comm.world_size
"""

#: a shared array of 8 MB, all-gathered in place
SHARED_ARRAY = """
    g = comm.shared_array((comm.world_size, 1 << 20))
    g[comm.rank] = comm.rank
    comm.allgather(g[comm.rank], g)
"""

PRIVATE_SHM = "mount -t tmpfs -o size={size} tmpfs /dev/shm && exec \"$@\""


@functools.cache
def namespace_command() -> list[str] | None:
    """The unshare command under which /dev/shm can be mounted privately, or None."""
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return None
    for command in (["unshare", "--mount", "--propagation", "private"],
                    ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private"]):
        try:
            probe = subprocess.run([*command, "sh", "-c", PRIVATE_SHM.format(size="1m"), "sh", "true"],
                                   capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return command
    return None


def run_with_shm(tmp_path, size: str, body: str, nranks: int = 2) -> tuple[int, dict[int, str]]:
    """``arborcc run`` of the script ``body`` on a /dev/shm of ``size``: the exit status and
    what each rank reported."""
    command = namespace_command()
    if command is None:
        pytest.skip("cannot mount a small private /dev/shm here (unshare --mount needs root or user namespaces)")
    script = tmp_path / "case.py"
    script.write_text(PRELUDE + body + EPILOGUE)  # body: indented into the try
    proc = subprocess.run([*command, "sh", "-c", PRIVATE_SHM.format(size=size), "sh", sys.executable, "-m",
                           "arborcc.cli.main", "run", "-n", str(nranks), "--timeout", str(HARD_TIMEOUT - 20),
                           str(script)], capture_output=True, text=True, timeout=HARD_TIMEOUT)
    return proc.returncode, said_by_rank(proc.stdout)


SPACE = re.compile(r"not enough shared memory: /dev/shm has (\d+) bytes free \(of (\d+)\), this rank needs (\d+) "
                   r"bytes of it for .*--shm-size")


@pytest.mark.parametrize("size", ["256k", "2m", "8m"])
@pytest.mark.parametrize("what", ["calls", "shared array"])
def test_too_little_shm_is_one_clear_error_on_every_rank(tmp_path, size, what):
    code, said = run_with_shm(tmp_path, size, CALLS if what == "calls" else SHARED_ARRAY)
    assert code != 128 + signal.SIGBUS and code != 0, said
    assert sorted(said) == [0, 1], said  # every rank reported (none died of SIGBUS)
    for text in said.values():
        found = SPACE.search(text)
        assert found, said
        free, total, needed = (int(v) for v in found.groups())
        assert total <= int(size[:-1]) << (10 if size[-1] == "k" else 20)
        assert needed > free


@pytest.mark.parametrize("what", ["calls", "shared array"])
def test_enough_shm_runs(tmp_path, what):
    code, said = run_with_shm(tmp_path, "64m", CALLS if what == "calls" else SHARED_ARRAY)
    assert (code, said) == (0, {0: "ok", 1: "ok"})


#: what a rank may report on a /dev/shm of any size: success, the space error (its own or
#: a peer's, through the abort), or, when rank 0 could not even make the segment, that
SANE = re.compile(r"^ok$|not enough shared memory: /dev/shm has \d+ bytes free|rank 0 could not make it")


@settings(max_examples=4, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kilobytes=st.integers(min_value=4, max_value=48 << 10))
def test_any_shm_size_runs_or_fails_clearly_on_every_rank(tmp_path, kilobytes):
    code, said = run_with_shm(tmp_path, f"{kilobytes}k", CALLS)
    assert code in (0, 1), (kilobytes, code, said)  # 135 would be a SIGBUS
    assert sorted(said) == [0, 1], (kilobytes, said)
    assert all(SANE.search(text) for text in said.values()), (kilobytes, said)
    assert code == 1 or set(said.values()) == {"ok"}


def test_too_little_shm_for_the_header_is_named_on_every_rank(tmp_path):
    # rank 0 cannot make the segment; the others hear why from it (the rendezvous), or,
    # finding the segment gone, are pointed to rank 0's error
    code, said = run_with_shm(tmp_path, "8k", CALLS)
    assert code == 1, said
    assert SPACE.search(said[0]) and "for the communicator's header" in said[0], said
    assert (SPACE.search(said[1]) and "for the communicator's header" in said[1]
            or "rank 0 could not make it: see its error" in said[1]), said
