"""The CPUs of threads a rank starts after the backend pinned it to one CPU.

The shared-memory runtime runs each rank on one CPU (as MPI launchers bind ranks;
:func:`arborcc.runtime.communicator.pin_to_cpu`), and Linux gives a new thread the CPU
affinity of the thread that starts it. So the threads of anything made after
``init_process_group`` - the I/O loop and worker threads of a gloo group made with
``dist.new_group(backend="gloo")``, the gloo group between hosts - would share the rank's
one CPU, and wait a whole scheduler tick (4 ms at 250 Hz) whenever something else runs
on it: gloo's 1 MB all-reduce on 2 ranks takes several times longer with pinned threads
than with free ones (``benchmarks/torch/allreduce.py --parts gloo-modes``).
:func:`free_threads` starts them with the CPUs the rank had before it was pinned;
:func:`free_this_thread` moves a thread the backend starts itself there (the
torch.distributed executor's posting and waiting threads).
"""

from __future__ import annotations

import os
from contextlib import contextmanager

#: the CPUs this process could run on before the backend first pinned it (None: not recorded)
cpus_before_pinning: frozenset[int] | None = None


def remember_affinity() -> None:
    """Record the calling thread's CPUs, once per process (the first backend, before its
    communicator pins the rank)."""
    global cpus_before_pinning
    if cpus_before_pinning is None:
        cpus_before_pinning = frozenset(os.sched_getaffinity(0))


@contextmanager
def free_threads():
    """Threads started inside this block (e.g. by ``dist.new_group(backend="gloo")``) may
    run on every CPU the rank had before the backend pinned it; the calling thread keeps
    its own CPU afterwards (make only other back-ends' groups here: an arborcc group made
    inside would lose the pinning of its rank). Does nothing when no backend recorded them."""
    if cpus_before_pinning is None:
        yield
        return
    pinned = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus_before_pinning)
    try:
        yield
    finally:
        os.sched_setaffinity(0, pinned)


def free_this_thread() -> None:
    """Let the calling thread run on every CPU the rank had before the backend pinned it
    (a helper thread started later by a pinned thread; the other threads keep theirs).
    Does nothing when no backend recorded them."""
    if cpus_before_pinning is not None:
        os.sched_setaffinity(0, cpus_before_pinning)  # 0: the calling thread only (Linux)
