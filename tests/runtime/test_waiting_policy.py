"""How ranks wait and where they run: the long spin only where every rank has a CPU of
its own, counted from the CPUs the job may use (its affinity), not the machine's."""

from __future__ import annotations

import os

import numpy as np
import pytest

from arborcc.runtime.launch import run_ranks


def _placement_rank(pin: bool):
    from arborcc.runtime import Communicator

    comm = Communicator.from_env(timeout=60, pin=pin)
    x = np.full(1024, float(comm.rank), np.float32)
    comm.allreduce(x)
    seen = (sorted(os.sched_getaffinity(0)), comm.options.spin_us, comm.options.yield_us, float(x[0]))
    comm.close()
    return seen


def run_with_affinity(cpus: set[int], pin: bool):
    """Two ranks started from a process restricted to ``cpus`` (as `taskset` would)."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        return run_ranks(_placement_rank, 2, args=(pin,), timeout=120)
    finally:
        os.sched_setaffinity(0, before)


def test_ranks_with_one_allowed_cpu_do_not_spin_long():
    cpu = min(os.sched_getaffinity(0))
    for affinity, spin, yield_us, total in run_with_affinity({cpu}, pin=True):
        assert affinity == [cpu] and (spin, yield_us) == (2.0, 100.0) and total == 1.0


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs this process may use")
def test_ranks_pinned_within_a_restricted_affinity_each_have_their_own_cpu():
    two = set(sorted(os.sched_getaffinity(0))[:2])
    seen = run_with_affinity(two, pin=True)
    assert sorted(a[0] for a, *_ in seen) == sorted(two) and all(len(a) == 1 for a, *_ in seen)
    assert all((spin, yield_us) == (500.0, 5000.0) for _, spin, yield_us, _ in seen)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs this process may use")
def test_unpinned_ranks_do_not_spin_long():
    two = set(sorted(os.sched_getaffinity(0))[:2])
    for affinity, spin, yield_us, total in run_with_affinity(two, pin=False):
        assert affinity == sorted(two) and (spin, yield_us) == (2.0, 100.0) and total == 1.0
