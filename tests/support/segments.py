"""The arborcc shared-memory segments a test left in /dev/shm.

/dev/shm is shared by everything on the machine, other people's arborcc jobs too. A
segment's name carries the pid of the process that created it
(``arborcc-<pid>-...``); a segment that appeared during a test is this test's leftover
when its creator has exited or is a descendant of the test process, not when it belongs
to a live process of someone else."""

from __future__ import annotations

import os

from arborcc.runtime.communicator import SEGMENT_PREFIX


def segments() -> set[str]:
    """Names of the arborcc segments in /dev/shm now."""
    return {e for e in os.listdir("/dev/shm") if e.startswith(SEGMENT_PREFIX)}


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _ours_or_gone(pid: int) -> bool:
    if not os.path.exists(f"/proc/{pid}"):
        return True
    me = os.getpid()
    while pid > 1:
        if pid == me:
            return True
        pid = _parent(pid)
    return False


def leftovers(before: set[str]) -> set[str]:
    """Segments that appeared since ``before`` and were created by a process that has
    exited or descends from this one."""
    left = set()
    for name in segments() - before:
        pid = name[len(SEGMENT_PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or _ours_or_gone(int(pid)):
            left.add(name)
    return left
