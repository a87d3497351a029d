"""Stale-segment cleanup removes only this user's arborcc files whose creator is gone.

``remove_stale_segments`` runs at every start (rank 0, before it creates a segment): it
must never remove another user's file (it may run as root), nor one whose creator still
runs, nor a young one (its creator may be in another pid namespace)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arborcc.runtime.communicator import SEGMENT_PREFIX, STALE_AGE, process_start_time, remove_stale_segments


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          timeout=30)
    return int(proc.stdout)


def make(directory, name: str, age: float = 10 * STALE_AGE) -> str:
    path = os.path.join(directory, name)
    with open(path, "wb") as f:
        f.write(b"x")
    then = time.time() - age
    os.utime(path, (then, then))
    return path


@pytest.fixture
def shm_files():
    """Files this test makes in /dev/shm (names unique to it), removed afterwards."""
    made: list[str] = []
    yield made
    for path in made:
        if os.path.lexists(path):
            os.unlink(path)


def test_an_old_segment_of_a_dead_creator_is_removed(shm_files):
    name = f"{SEGMENT_PREFIX}{dead_pid()}-{os.urandom(6).hex()}"
    shm_files.append(make("/dev/shm", name))
    assert name in remove_stale_segments()
    assert not os.path.exists(f"/dev/shm/{name}")


def test_an_old_shared_array_of_a_dead_creator_is_removed(tmp_path):
    name = f"{SEGMENT_PREFIX}{dead_pid()}-0a1b2c3d4e5fw3"
    make(tmp_path, name)
    assert remove_stale_segments(str(tmp_path)) == [name]


def test_a_segment_whose_creator_runs_is_kept(tmp_path):
    name = f"{SEGMENT_PREFIX}{os.getpid()}-{os.urandom(6).hex()}"
    make(tmp_path, name, age=0)  # made after this process started: by it
    assert remove_stale_segments(str(tmp_path), min_age=0) == []
    assert (tmp_path / name).exists()


def test_a_segment_made_before_its_pid_was_reused_is_removed(tmp_path):
    # this process has the pid in the name but started after the file was made: the
    # creator is gone and its pid now names another process
    started = process_start_time(os.getpid())
    name = f"{SEGMENT_PREFIX}{os.getpid()}-{os.urandom(6).hex()}"
    make(tmp_path, name, age=time.time() - started + 10)
    assert remove_stale_segments(str(tmp_path), min_age=0) == [name]


def test_a_young_segment_of_a_gone_pid_is_kept(tmp_path):
    # its creator may run in another pid namespace (a container sharing /dev/shm)
    name = f"{SEGMENT_PREFIX}{dead_pid()}-{os.urandom(6).hex()}"
    make(tmp_path, name, age=0)
    assert remove_stale_segments(str(tmp_path)) == []
    assert (tmp_path / name).exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_another_users_segment_is_kept_even_as_root(shm_files):
    name = f"{SEGMENT_PREFIX}{dead_pid()}-{os.urandom(6).hex()}"
    path = make("/dev/shm", name)
    shm_files.append(path)
    os.chown(path, 12345, 12345)
    then = time.time() - 10 * STALE_AGE
    os.utime(path, (then, then))
    assert name not in remove_stale_segments()
    assert os.path.exists(path)


def test_other_names_and_links_are_kept(tmp_path):
    gone = dead_pid()
    names = [f"{SEGMENT_PREFIX}notapid-x", f"other-{gone}-x"]
    for name in names:
        make(tmp_path, name)
    os.symlink(make(tmp_path, "target"), tmp_path / f"{SEGMENT_PREFIX}{gone}-link")
    assert remove_stale_segments(str(tmp_path)) == []
    assert all((tmp_path / name).exists() for name in names)
    assert (tmp_path / f"{SEGMENT_PREFIX}{gone}-link").is_symlink()



@settings(max_examples=30, deadline=None, database=None)
@given(files=st.lists(st.tuples(st.sampled_from(["gone", "alive", "text", "empty"]),
                                st.text(alphabet="-abcw0123456789", max_size=12),
                                st.sampled_from([0.0, 5.0, 2 * STALE_AGE, 100 * STALE_AGE])),
                      max_size=6, unique_by=lambda f: f[:2]))
def test_only_old_files_of_gone_creators_are_removed(files):
    gone = GONE_PID
    pids = {"gone": str(gone), "alive": str(os.getpid()), "text": "x1", "empty": ""}
    with tempfile.TemporaryDirectory() as where:
        # this process's pid on a file made before it started names a reused pid
        running_for = time.time() - process_start_time(os.getpid())
        expected, either = set(), set()  # either: made within seconds of this process's start
        for kind, tail, age in files:
            name = f"{SEGMENT_PREFIX}{pids[kind]}-{tail}"
            make(where, name, age)
            if age > STALE_AGE and (kind == "gone" or (kind == "alive" and age > running_for + 5)):
                expected.add(name)
            elif age > STALE_AGE and kind == "alive" and age > running_for - 5:
                either.add(name)
        removed = set(remove_stale_segments(where))
        assert removed - either == expected
        assert not removed & set(os.listdir(where))


#: a pid whose process has exited, for the property test (found once)
GONE_PID = dead_pid()
